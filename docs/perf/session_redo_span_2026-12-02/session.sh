#!/usr/bin/env bash
# The one device session of 2026-12-02 #5 (H200), at 734aafa: the guarded second launches in
# spans (redo_grid), first run on a GPU.
#   1. smoke: the guarded-launch tests on CUDA; a failure ends the session there;
#   2. redo: docs/perf/session_d256_2026-12-02/redo_probe.py --redo (the spanned redo against
#      no redo at all, cuDNN beside), 3 rounds;
#   3. the five GPU suites at HEAD and D = 256 against cuDNN (docs/perf/device_session.sh);
#   4. the kernel test files on CUDA, with what is left of TESTS_S.
# Detached; poll with S=/tmp/sess bash docs/perf/device_poll.sh 550. Carry .bundle and .whl.
export SUITES="SpeedSuite LiveResourcesSuite LiveBuildResourcesSuite ModelStepSuite MaskedSpeedSuite"
mkdir -p /tmp/sess && rm -f /tmp/sess/done
setsid bash -c '
  exec >/tmp/sess/driver.log 2>&1
  export PYTHONUNBUFFERED=1
  echo "[$(date +%T)] smoke"; echo smoke >/tmp/sess/step
  S=/tmp/sess/smoke STEPS=smoke SMOKE_S=300 SMOKE_TESTS="tests/test_kernels.py::test_the_guarded_second_launches_keep_excluded_values_out tests/test_kernels.py::test_empty_rows_with_several_blocks_per_redo_program tests/test_kernels.py::test_per_config_builds_each_configs_arguments_once" \
    bash docs/perf/device_session.sh || { echo "smoke failed"; echo done >/tmp/sess/step; exit 1; }
  echo "[$(date +%T)] redo"; echo redo >/tmp/sess/step
  PYTHONPATH=. timeout 300 python3 docs/perf/session_d256_2026-12-02/redo_probe.py --redo \
    >/tmp/sess/redo.jsonl 2>/tmp/sess/redo.err
  echo "redo rc=$?"
  python3 docs/perf/session_d256_2026-12-02/redo_probe.py --table /tmp/sess/redo.jsonl >/tmp/sess/redo.txt 2>&1
  echo "[$(date +%T)] suites"; echo suites >/tmp/sess/step
  S=/tmp/sess/suites STEPS="suites d256" bash docs/perf/device_session.sh
  echo "[$(date +%T)] tests"; echo tests >/tmp/sess/step
  S=/tmp/sess/tests STEPS=tests TESTS_S=${TESTS_S:-540} TESTS_N=14 \
    TEST_FILES="tests/test_kernels.py tests/test_hopper.py tests/test_families.py tests/test_cuda_graphs.py tests/test_blockmask.py tests/test_dbias.py tests/test_dropout.py" \
    bash docs/perf/device_session.sh
  echo "[$(date +%T)] done"; echo done >/tmp/sess/step; touch /tmp/sess/done
' >/dev/null 2>&1 </dev/null &
echo $! >/tmp/sess.pid
