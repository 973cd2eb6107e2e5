#!/usr/bin/env bash
# Device call 2 of 2026-12-03 #2 (H200): the D = 256 Hopper dQ list with M128-N32-w8-s3 first.
#   1. D = 256 forward + backward against cuDNN by GPU time (tree_ab.py --d256), the tree with
#      the new list ("new") and the same tree with e53aacc's configs.py ("base"), alternating
#      processes, each with its own tuning cache (D = 256 has no table entries: it is tuned);
#   2. the two dQ tiles on the other D = 256 shapes (dense; causal GQA 4);
#   3. dK and dV tiles of the split D = 256 dK/dV not tried before (64 keys, 4 warps);
#   4. the GPU tests that run D = 256 or the tuner's limits.
set -u
echo "[$(date +%T)] start"; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
export PYTHONUNBUFFERED=1
S=docs/perf/session_dq_tiles_2026-12-03
rm -rf /tmp/base && mkdir -p /tmp/base && cp -r safeattn /tmp/base/ && cp $S/configs_head.tmp /tmp/base/safeattn/kernels/configs.py
for round in 1 2; do
  for lab in base new; do
    tree=$PWD; [ $lab = base ] && tree=/tmp/base
    echo "[$(date +%T)] d256 $lab round $round"
    SAFEATTN_TUNING_CACHE=/tmp/cache_$lab PYTHONPATH=$tree timeout 200 python3 docs/perf/tree_ab.py --label $lab --d256 >>"$OUT/d256.jsonl" 2>>"$OUT/d256.err"; echo "rc=$?"
  done
done
python3 docs/perf/tree_ab.py --table "$OUT/d256.jsonl" > "$OUT/d256.txt" 2>&1
export PYTHONPATH=.
P=docs/perf/dkdv_tiles_probe.py
run() { echo "[$(date +%T)] $*"; timeout 200 python3 $P --whole --label new "$@" >>"$OUT/tiles.jsonl" 2>>"$OUT/tiles.err"; echo "rc=$?"; }
run --head-dim 256 --shapes 4096:1 --kernel bwd_dq --configs M64-N64-w4-s2,M128-N32-w8-s3
run --head-dim 256 --causal --shapes 4096:4 --kernel bwd_dq --configs M64-N64-w4-s2,M128-N32-w8-s3
run --head-dim 256 --causal --shapes 4096:1 --kernel bwd_dk --configs M32-N128-w8-s2,M32-N64-w4-s3,M32-N64-w4-s4,M16-N64-w4-s4
run --head-dim 256 --causal --shapes 4096:1 --kernel bwd_dv --configs M64-N128-w8-s2,M32-N64-w4-s4,M64-N64-w4-s3
echo "[$(date +%T)] tests"
timeout 200 python3 -m pytest -q --gpu -n 8 tests/test_kernels.py -k "256 or head_dims or split_dkdv or tuner_never" > "$OUT/tests.log" 2>&1; echo "tests rc=$?"
echo "[$(date +%T)] done"
tail -3 "$OUT/tests.log"
cat "$OUT/d256.txt"
python3 - <<'PY'
import json, os
for line in open(os.path.join(os.environ["OUT"], "tiles.jsonl")):
    r = json.loads(line)
    print(r.get("d"), "causal" if r.get("causal") else "dense", r.get("n"), r.get("gqa"), r["kernel"], r["config"],
          r.get("bwd_dq_us"), r.get("dkdv_parts_us"), r.get("registers"), r.get("spills"), r.get("shared"),
          r.get("serial_ms"), r.get("overlap_ms"), r.get("error", ""))
PY
