#!/bin/bash
# The split dK/dV probe of 2026-11-29 (README.md here), as it ran on the H200: from the root
# of a copy of 654fc2f's tree with part_probe.patch applied (SAFEATTN_PART: 0 both, 1 dV
# alone, 2 dK alone) and docs/perf/dkdv_tiles_probe.py's SHAPES cut to [(4096, 1), (4096, 4)].
# Per part, the dK/dV kernel's time (the whole backward's is not meaningful: one half runs).
S=/tmp/sess; mkdir -p $S; exec >$S/driver.log 2>&1
cd "$(dirname "$0")"
run() { echo "[$(date +%T)] part=$1 d=$2 $3 $4"; echo "$1 $2 $3" > $S/step
  SAFEATTN_PART=$1 timeout 200 python3 docs/perf/dkdv_tiles_probe.py --label part$1 --head-dim $2 $3 --configs $4 >>$S/split.jsonl 2>>$S/split.err; }
run 0 256 --causal M64-N64-w8-s2
run 1 256 --causal M64-N128-w8-s2,M32-N128-w8-s2,M64-N64-w8-s2
run 2 256 --causal M64-N64-w8-s2,M32-N64-w8-s2,M64-N64-w8-s3
run 0 256 "" M64-N64-w8-s2
run 1 256 "" M64-N128-w8-s2
run 2 256 "" M64-N64-w8-s2,M64-N64-w8-s3
run 0 128 --causal M64-N64-w4-s2
run 1 128 --causal M64-N128-w8-s2,M128-N128-w8-s2
run 2 128 --causal M64-N64-w4-s2,M64-N128-w8-s2
echo done > $S/step
# second call: run 2 256 --causal M32-N128-w8-s2,M16-N128-w8-s2,M16-N128-w8-s3
# second call: run 2 256 "" M32-N128-w8-s2,M16-N128-w8-s2
