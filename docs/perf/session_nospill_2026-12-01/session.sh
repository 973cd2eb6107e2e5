#!/usr/bin/env bash
# Device call 1 of 2026-12-01, second session (H200): docs/perf/device_session.sh, detached,
# at the spill fix (bool-mask tile read again, one masked query loop): smoke (the masked and
# packed-documents GPU tests), suites (all five GPU suites), tests (the masked paths' GPU
# tests, the rest of the time), curve (safeattn and cuDNN TFLOP/s at D=128 against N).
export S=/tmp/sess
export STEPS="smoke suites tests curve"
export SMOKE_TESTS="tests/test_kernels.py::test_masks_match_reference tests/test_kernels.py::test_varlen_matches_per_sequence_reference tests/test_hopper.py::test_partial_tiles_in_half_steps"
export SUITES="SpeedSuite LiveResourcesSuite LiveBuildResourcesSuite ModelStepSuite MaskedSpeedSuite"
export TEST_FILES="tests/test_blockmask.py tests/test_kernels.py::test_excluded_keys_values_never_leak tests/test_kernels.py::test_per_pair_exclusion_under_causal tests/test_kernels.py::test_the_guarded_second_launches_keep_excluded_values_out tests/test_kernels.py::test_a_nan_row_adds_nothing_to_keys_it_excludes tests/test_kernels.py::test_included_nan_propagates tests/test_kernels.py::test_tails_write_every_element tests/test_kernels.py::test_deterministic_gradients tests/test_kernels.py::test_empty_rows_are_exact_zeros tests/test_hopper.py::test_contract_holds_on_the_path tests/test_kernels.py::test_adversarial_families tests/test_kernels.py::test_gqa_and_transposed_strides tests/test_kernels.py::test_head_dims"
export TESTS_S=330
export CURVE_S=240
mkdir -p "$S"
setsid bash docs/perf/device_session.sh >/dev/null 2>&1 </dev/null &
echo $! >"$S.pid"
