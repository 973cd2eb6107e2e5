#!/usr/bin/env bash
# Device call 2 of the spill fix (H200): docs/perf/device_session.sh, detached, at the sign
# mark (-0.0) and the mask made first: tests (the masked paths' contract tests, 170 s), then
# suites (all five GPU suites).
export S=/tmp/sess
export STEPS="tests suites"
export TEST_FILES="tests/test_kernels.py::test_excluded_keys_values_never_leak tests/test_kernels.py::test_a_nan_row_adds_nothing_to_keys_it_excludes tests/test_kernels.py::test_included_nan_propagates tests/test_kernels.py::test_per_pair_exclusion_under_causal tests/test_blockmask.py::test_excluded_values_in_every_tile_kind tests/test_kernels.py::test_the_guarded_second_launches_keep_excluded_values_out tests/test_kernels.py::test_empty_rows_are_exact_zeros tests/test_kernels.py::test_deterministic_gradients tests/test_kernels.py::test_masks_match_reference tests/test_kernels.py::test_varlen_matches_per_sequence_reference tests/test_kernels.py::test_adversarial_families"
export TESTS_S=170
export TESTS_N=14
mkdir -p "$S"
setsid bash docs/perf/device_session.sh >/dev/null 2>&1 </dev/null &
echo $! >"$S.pid"
