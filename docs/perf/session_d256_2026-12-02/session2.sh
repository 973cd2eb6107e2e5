#!/usr/bin/env bash
# Device call 2 of 2026-12-02 #4 (H200), at 832e258 (the kernels of dcf59d1, the host path of
# 53fedb3): the GPU tests that had not run whole on the landed host path (CUDA graphs, the
# Hopper path, the adversarial families), then the five GPU suites and D = 256 against cuDNN.
# Two docs/perf/device_session.sh runs, one after the other, each with its own folder
# (.bundle and .whl carried).
export SUITES="SpeedSuite LiveResourcesSuite LiveBuildResourcesSuite ModelStepSuite MaskedSpeedSuite"
mkdir -p /tmp/sess
setsid bash -c '
  S=/tmp/sess/tests STEPS=tests TESTS_S=380 TESTS_N=14 \
    TEST_FILES="tests/test_cuda_graphs.py tests/test_hopper.py tests/test_families.py" \
    bash docs/perf/device_session.sh
  S=/tmp/sess/suites STEPS="suites d256" bash docs/perf/device_session.sh
' >/dev/null 2>&1 </dev/null &
echo $! >/tmp/sess.pid
