#!/usr/bin/env bash
# Device call 1 of 2026-12-03 #2 (H200), from the repository root of the device's copy:
# backward tiles outside the shipped lists, each the only candidate of its kernel
# (docs/perf/dkdv_tiles_probe.py, bf16, B and H the SpeedSuite's), with the whole backward's
# GPU time (dQ beside dK/dV and not):
#   1. D = 256 causal dQ (the weakest target row, 0.77-0.78x cuDNN): 128-row tiles with 32
#      keys, which fit sm90's shared memory (192 KB by the tile sizes) where M128-N64 does not;
#   2. D = 128 dQ, dense and causal: 128-key tiles (fewer, larger steps);
#   3. D = 128 dense dK/dV: one more stage, and 128 query rows.
set -u
echo "[$(date +%T)] start"; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
export PYTHONUNBUFFERED=1 PYTHONPATH=.
P=docs/perf/dkdv_tiles_probe.py
run() { echo "[$(date +%T)] $*"; timeout 200 python3 $P --whole --label HEAD "$@" >>"$OUT/tiles.jsonl" 2>>"$OUT/tiles.err"; echo "rc=$?"; }
run --head-dim 256 --causal --shapes 4096:1 --kernel bwd_dq \
  --configs M64-N64-w4-s2,M128-N32-w8-s2,M128-N32-w8-s3,M64-N32-w4-s2,M64-N32-w4-s3
run --head-dim 128 --shapes 4096:1,4096:4 --kernel bwd_dq \
  --configs M128-N64-w8-s4,M128-N128-w8-s2,M128-N128-w8-s1
run --head-dim 128 --causal --shapes 4096:1 --kernel bwd_dq \
  --configs M64-N64-w4-s2,M128-N64-w8-s4,M128-N128-w8-s2
run --head-dim 128 --shapes 4096:1 --kernel bwd_dkdv \
  --configs M64-N128-w8-s3,M64-N128-w8-s4,M128-N128-w8-s2,M128-N64-w8-s3
echo "[$(date +%T)] done"
python3 - <<'PY'
import json, os
for line in open(os.path.join(os.environ["OUT"], "tiles.jsonl")):
    r = json.loads(line)
    print(r.get("d"), "causal" if r.get("causal") else "dense", r.get("n"), r.get("gqa"), r["kernel"], r["config"],
          r.get("bwd_dq_us"), r.get("bwd_dkdv_us"), r.get("registers"), r.get("spills"), r.get("shared"),
          r.get("serial_ms"), r.get("overlap_ms"), r.get("error", ""))
PY
