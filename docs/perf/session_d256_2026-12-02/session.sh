#!/usr/bin/env bash
# Device call 1 of 2026-12-02 #4 (H200), from the repository root of the device's copy (the
# working tree): D = 256 causal backward, where issue 13's target sits at the line.
#   1. each launch's tiles alone (docs/perf/dkdv_tiles_probe.py, bf16 N = 4096, B = 4, H = 8):
#      the split dK, the split dV and dQ, shipped tile first, then tiles not in the lists
#      (16 warps; 128-row dQ; 64 queries a step in dK), with the whole backward's GPU time;
#   2. Nsight Compute over one D = 256 causal forward + backward (docs/perf/ncu_dense.py);
#   3. the host's issue times at HEAD (53fedb3's code has not been timed) and a GPU check of
#      the host path's tests.
# Detached; poll with S=/tmp/sess bash docs/perf/device_poll.sh 540.
D=docs/perf/session_d256_2026-12-02
mkdir -p /tmp/sess && rm -f /tmp/sess/done
setsid bash -c "
  exec >/tmp/sess/driver.log 2>&1
  export PYTHONUNBUFFERED=1 PYTHONPATH=.
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv
  python3 -c 'import torch, triton; print(\"torch\", torch.__version__, \"triton\", triton.__version__)'
  git log -1 --format='HEAD %h %s' 2>/dev/null | cut -c1-100
  probe() {  # kernel configs
    echo \"[\$(date +%T)] tiles \$1\"; echo \"tiles \$1\" >/tmp/sess/step
    timeout 330 python3 docs/perf/dkdv_tiles_probe.py --head-dim 256 --causal --whole \
      --shapes 4096:1 --kernel \$1 --configs \$2 >>/tmp/sess/tiles.jsonl 2>>/tmp/sess/tiles.err
    echo \"tiles \$1 rc=\$?\"
  }
  probe bwd_dk M32-N128-w8-s2,M64-N128-w8-s2,M64-N128-w16-s2,M32-N128-w16-s2,M32-N128-w8-s1,M64-N128-w8-s1
  probe bwd_dq M64-N64-w4-s2,M64-N64-w8-s2,M128-N64-w8-s2,M64-N128-w8-s2,M128-N64-w16-s2
  probe bwd_dv M64-N128-w8-s2,M64-N128-w16-s2,M128-N128-w16-s2
  echo \"[\$(date +%T)] ncu\"; echo ncu >/tmp/sess/step
  timeout 300 ncu --profile-from-start off --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section LaunchStats --section ComputeWorkloadAnalysis \
    python3 docs/perf/ncu_dense.py --d 256 --causal >/tmp/sess/ncu_d256_causal.txt 2>&1
  echo \"ncu rc=\$?\"
  echo \"[\$(date +%T)] host\"; echo host >/tmp/sess/step
  timeout 150 taskset -c 5 python3 docs/perf/session_swing_2026-12-02/host_probe.py --top 25 \
    --calls 200 >/tmp/sess/host.txt 2>/tmp/sess/host.err
  echo \"host rc=\$?\"
  echo \"[\$(date +%T)] tests\"; echo tests >/tmp/sess/step
  timeout 240 python3 -m pytest -v --gpu -n 8 tests/test_kernels.py -k 'per_config or guarded or side_stream' \
    >/tmp/sess/tests.log 2>&1
  echo \"tests rc=\$?\"
  echo \"[\$(date +%T)] done\"; echo done >/tmp/sess/step; touch /tmp/sess/done
" >/dev/null 2>&1 </dev/null &
echo $! >/tmp/sess.pid
