#!/usr/bin/env bash
# Device call of 2026-12-02: the exclusion mark A/B (mark_ab.py) and D=256 against cuDNN.
# Run from the repository root on the GPU machine, detached; writes under $S (default
# /tmp/sess) and touches $S/done at the end (poll with docs/perf/device_poll.sh).
#   "head":      this tree (MARK on every masked fp16/bf16 step, as 1b17267)
#   "boolonly":  a copy with MARK only where MASK_KIND == 1 (the bool-mask build)
set -u
S="${S:-/tmp/sess}"
mkdir -p "$S" && rm -f "$S/done"
exec >"$S/driver.log" 2>&1
export PYTHONUNBUFFERED=1
here=$(pwd)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
rm -rf /tmp/var && mkdir -p /tmp/var
cp -a safeattn benchmarks regress docs pyproject.toml /tmp/var/
sed -i 's/^    MARK: tl.constexpr = MASKED and DOT_PRECISION != "ieee"$/    MARK: tl.constexpr = MASKED and DOT_PRECISION != "ieee" and MASK_KIND == 1/' \
  /tmp/var/safeattn/kernels/backward.py
grep -n "MARK: tl.constexpr" safeattn/kernels/backward.py /tmp/var/safeattn/kernels/backward.py
P=docs/perf/session_mark_2026-12-02/mark_ab.py
for round in 1 2; do
  for d in 128 64; do
    echo "[$(date +%T)] round $round D=$d"
    (cd "$here" && timeout 200 python3 $P --label head --d $d >>"$S/mark_ab.jsonl" 2>>"$S/mark_ab.err")
    (cd /tmp/var && timeout 200 python3 $P --label boolonly --d $d >>"$S/mark_ab.jsonl" 2>>"$S/mark_ab.err")
  done
done
python3 $P --table "$S/mark_ab.jsonl" >"$S/mark_ab.txt" 2>&1
echo "[$(date +%T)] d256"
timeout 240 python3 docs/perf/tree_ab.py --label head --d256 >"$S/d256.jsonl" 2>"$S/d256.err"
python3 docs/perf/tree_ab.py --table "$S/d256.jsonl" >"$S/d256.txt" 2>&1
echo "[$(date +%T)] done"
touch "$S/done"
