#!/usr/bin/env bash
# The device session of 2026-12-02 #7 (H200): fp32 GQA dK/dV per query head
# (passes._per_query_head), first run on a GPU.
#   1. smoke: every softcap and GQA test of tests/test_kernels.py on CUDA (softcap plain-fp32
#      failed at its bound since 2026-11-26); a failure ends the session there;
#   2. docs/perf/per_head_fp32_probe.py: the per-head and in-kernel sums, time, memory, error;
#   3. the seven kernel test files on CUDA, TESTS_S seconds at most.
# Detached; poll with S=/tmp/sess bash docs/perf/device_poll.sh 545.
mkdir -p /tmp/sess && rm -f /tmp/sess/done
setsid bash -c '
  exec >/tmp/sess/driver.log 2>&1
  export PYTHONUNBUFFERED=1
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch, triton; print(torch.__version__, triton.__version__)"
  echo "[$(date +%T)] smoke"; echo smoke >/tmp/sess/step
  timeout 300 python3 -m pytest -q --gpu -n 14 tests/test_kernels.py -k "softcap or gqa" >/tmp/sess/smoke.log 2>&1
  rc=$?; echo "smoke rc=$rc"; tail -4 /tmp/sess/smoke.log
  [ $rc -eq 0 ] || { echo done >/tmp/sess/step; exit 1; }
  echo "[$(date +%T)] probe"; echo probe >/tmp/sess/step
  timeout 240 python3 docs/perf/per_head_fp32_probe.py >/tmp/sess/probe.txt 2>/tmp/sess/probe.err
  echo "probe rc=$?"; cat /tmp/sess/probe.txt
  echo "[$(date +%T)] tests"; echo tests >/tmp/sess/step
  S=/tmp/sess/tests STEPS=tests TESTS_S=${TESTS_S:-780} TESTS_N=14 \
    TEST_FILES="tests/test_kernels.py tests/test_hopper.py tests/test_families.py tests/test_cuda_graphs.py tests/test_blockmask.py tests/test_dbias.py tests/test_dropout.py" \
    bash docs/perf/device_session.sh
  tail -5 /tmp/sess/tests/tests.log
  echo "[$(date +%T)] done"; echo done >/tmp/sess/step; touch /tmp/sess/done
' >/dev/null 2>&1 </dev/null &
echo $! >/tmp/sess.pid
