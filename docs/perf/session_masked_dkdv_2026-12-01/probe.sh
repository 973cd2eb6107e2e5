#!/usr/bin/env bash
# Device call 1 of 2026-12-01 (H200, at d6cfac2: the kernels of 03c45bb): every D=128 dK/dV and dQ candidate of the masked and dense
# builds timed by the tuner (spill filter off), with extra tiles: dK/dV M32-N128-w8 (spill-free
# in the key_padding_causal build, sm90 static), dQ M128-N128-w8-s2 and M64-N128 (spill-free in
# the dense, causal and key_padding_causal builds). Pass 1 fills Triton's cache, one process per
# build in parallel (its timings are discarded); pass 2 times with a warm cache, one build after
# another, alone on the GPU.
set -u
O="${OUT:-/tmp/out}"
export PYTHONUNBUFFERED=1
args=(--dtype bfloat16 --kernel bwd_dkdv --kernel bwd_dq
      --extra 32,128,8,3 --extra 32,128,8,4 --extra 32,128,8,2
      --extra bwd_dq:128,128,8,2 --extra bwd_dq:64,128,8,2 --extra bwd_dq:64,128,4,2)
builds=(key_padding_causal bool_mask dense causal)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
t0=$(date +%s)
for b in "${builds[@]}"; do
  timeout 300 python3 docs/perf/masked_dkdv_probe.py "${args[@]}" --build "$b" >/dev/null 2>"$O/warm_$b.err" &
done
wait
echo "pass 1 (compile) $(( $(date +%s) - t0 )) s"
t0=$(date +%s)
for b in "${builds[@]}"; do
  timeout 200 python3 docs/perf/masked_dkdv_probe.py "${args[@]}" --build "$b" >>"$O/probe.jsonl" 2>>"$O/probe.err"
  echo "pass 2 $b rc=$? $(( $(date +%s) - t0 )) s"
done
python3 docs/perf/masked_dkdv_probe.py --table "$O/probe.jsonl" | tee "$O/probe.txt"
