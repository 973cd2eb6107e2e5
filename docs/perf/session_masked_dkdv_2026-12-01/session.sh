#!/usr/bin/env bash
# Device call 2 of 2026-12-01 (H200): docs/perf/device_session.sh, detached, on main at
# f0fae8a: smoke (the half-step GPU tests), masked (the probe at the new kernels), tune (the
# dropped keys), suites (all five GPU suites at the tune commit), tests (the rest of the time).
export S=/tmp/sess
export STEPS="smoke masked tune suites tests"
export SMOKE_TESTS="tests/test_hopper.py::test_partial_tiles_in_half_steps"
export MASKED_ARGS="--dtype bfloat16 --build key_padding_causal --build bool_mask --kernel bwd_dkdv"
export TUNE_ARGS="--kind speed --kind masked --kind model --new-keys-only"
export TUNE_DATE=2026-12-01T19:10:00+00:00
export GIT_AUTHOR_NAME="Seed a38b50aa maintainers"
export GIT_AUTHOR_EMAIL="maintainers@users.noreply.a-seed-a38b50aa.example"
export TUNE_WHAT="re-timed for the block-mask Hopper dK/dV keys (partial tiles in half steps since b7ada38) and the dense bf16 D=128 dQ key (the vote fix, c8aab65)"
export SUITES="SpeedSuite LiveResourcesSuite LiveBuildResourcesSuite ModelStepSuite MaskedSpeedSuite"
export TEST_FILES="tests/test_hopper.py tests/test_kernels.py tests/test_blockmask.py tests/test_dbias.py tests/test_cuda_graphs.py"
export DEADLINE=$(( $(date +%s) + ${SESSION_S:-1230} ))
mkdir -p "$S"
setsid bash docs/perf/device_session.sh >/dev/null 2>&1 </dev/null &
echo $! >"$S.pid"
