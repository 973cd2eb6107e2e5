#!/usr/bin/env bash
# Device call 2 of 2026-12-02 (H200), at the landing kernels (the -0.0 mark on the bool-mask
# build only): the masked paths' and the contract's GPU tests (fp16/bf16, plus the one fp32
# case that failed at b57988a), then the five GPU suites and D=256 against cuDNN. Two
# docs/perf/device_session.sh runs, one after the other, each with its own folder.
export TEST_FILES="$(sed -n 's/^export TEST_FILES="\(.*\)"$/\1/p' docs/perf/session_negzero_2026-12-02/session.sh)"
export SUITES="SpeedSuite LiveResourcesSuite LiveBuildResourcesSuite ModelStepSuite MaskedSpeedSuite"
mkdir -p /tmp/sess
setsid bash -c '
  S=/tmp/sess/tests STEPS=tests TESTS_S=420 TESTS_N=14 \
    PYTEST_ADDOPTS="-k \"not fp32 or trainable_bias\"" bash docs/perf/device_session.sh
  S=/tmp/sess/suites STEPS="suites d256" bash docs/perf/device_session.sh
' >/dev/null 2>&1 </dev/null &
echo $! >/tmp/sess.pid
