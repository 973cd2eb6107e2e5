#!/usr/bin/env bash
# Device call 3 of 2026-12-02 (H200): D=256 N=4096 against cuDNN (docs/perf/tree_ab.py
# --d256) in four processes, to see whether the causal rows' 0.65x (call 2) against 0.81x
# on 2026-11-29 (same forward kernel and configs) is a process-to-process effect. The third
# process runs the backward's two kernels one after the other (SAFEATTN_BWD_OVERLAP=0).
set -u
S="${S:-/tmp/sess}"
mkdir -p "$S" && rm -f "$S/done"
exec >"$S/driver.log" 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=.
for run in head1 head2 serial head3; do
  echo "[$(date +%T)] $run $(nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv,noheader)"
  if [ "$run" = serial ]; then export SAFEATTN_BWD_OVERLAP=0; else export SAFEATTN_BWD_OVERLAP=1; fi
  timeout 150 python3 docs/perf/tree_ab.py --label "$run" --d256 >>"$S/d256_repeat.jsonl" 2>>"$S/d256_repeat.err"
done
python3 docs/perf/tree_ab.py --table "$S/d256_repeat.jsonl" >"$S/d256_repeat.txt" 2>&1
echo "[$(date +%T)] done"
touch "$S/done"
