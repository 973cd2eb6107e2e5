#!/usr/bin/env bash
# Device call 1 of 2026-12-02 (H200): docs/perf/device_session.sh, detached, at 8874510 (an
# excluded pair's P is a bit-cast -0.0 in the dK/dV kernel; the mask made before the scores'
# product): suites (all five GPU suites), then tests (the masked paths' and the contract's GPU
# tests, the ones c0dacb5's literal -0.0 failed among them).
export S=/tmp/sess
export STEPS="suites tests"
export SUITES="SpeedSuite LiveResourcesSuite LiveBuildResourcesSuite ModelStepSuite MaskedSpeedSuite"
export TEST_FILES="tests/test_blockmask.py tests/test_kernels.py::test_excluded_keys_values_never_leak tests/test_kernels.py::test_per_pair_exclusion_under_causal tests/test_kernels.py::test_the_guarded_second_launches_keep_excluded_values_out tests/test_kernels.py::test_a_nan_row_adds_nothing_to_keys_it_excludes tests/test_kernels.py::test_included_nan_propagates tests/test_kernels.py::test_tails_write_every_element tests/test_kernels.py::test_deterministic_gradients tests/test_kernels.py::test_empty_rows_are_exact_zeros tests/test_hopper.py::test_contract_holds_on_the_path tests/test_kernels.py::test_adversarial_families tests/test_kernels.py::test_gqa_and_transposed_strides tests/test_kernels.py::test_head_dims tests/test_kernels.py::test_masks_match_reference tests/test_kernels.py::test_softcap_with_a_block_mask tests/test_kernels.py::test_softcap_excluded_keys_values_never_leak tests/test_kernels.py::test_softcap_included_nonfinite_propagates tests/test_kernels.py::test_varlen_matches_per_sequence_reference tests/test_dbias.py::test_dbias_is_exactly_zero_where_excluded_and_nan_stays_out tests/test_dropout.py::test_dropout_keeps_the_contract tests/test_hopper.py::test_partial_tiles_in_half_steps"
export TESTS_S=480
export TESTS_N=14
mkdir -p "$S"
setsid bash docs/perf/device_session.sh >/dev/null 2>&1 </dev/null &
echo $! >"$S.pid"
