"""Numerics: non-finite rate, wrong-result rate and max relative error vs the float64
reference, per adversarial family (``safeattn.families``) × implementation × dtype.

``NumericsSuite`` (GPU only; absent without a usable CUDA GPU)
    family × impl (safeattn and every peer of ``regress.metrics.PEERS``) × dtype,
    on the families' "gpu" size.
``InterpreterNumericsSuite`` (anywhere)
    family × impl (safeattn under Triton's interpreter, SDPA's math backend) × dtype on the
    CPU, "small" size.

Rates are fractions of trials (seeds 0 .. trials-1: :data:`GPU_TRIALS` on the GPU, where a
trial of the "gpu" size costs seconds of compiling; :data:`CPU_TRIALS` on the CPU, one in
quick mode); each trial runs forward and backward and is judged by
``safeattn.contract.check``. Peers get the exact
allowed-pairs mask of each case through ``contract.mask_adapter``: SDPA as a dense
``attn_mask`` (``None`` when every pair is allowed), FlexAttention as a compiled block
mask / score bias, and the ``softcap`` family's cap as a ``score_mod`` (SDPA has no
soft-capping: NaN there). The ``dropout`` family is judged for safeattn only (against the
reference given safeattn's own keep mask): a peer cannot say which pairs it dropped, so it
is NaN there. A peer that refuses a case (SDPA flash takes no mask at all) makes
that (family, impl, dtype) NaN, with the error as the reason; a family that crashes an
implementation outright is recorded the same way.

Family names are fixed here, not read from ``safeattn.families.FAMILIES``: asv benchmarks
old commits with this suite, and a family that a commit lacks is NaN for it;
tests/test_asv_suite.py checks that these names match the package's.
"""

from __future__ import annotations

import itertools

from ._attention import compiled_flex, dtype_of, impl_context
from ._env import cuda_usable, quick, require_cuda, use_interpreter
from ._grid import GRID_TIMEOUT_S, field_tracker, lookup, measure_grid
from ._truth import metrics

FAMILIES = [
    "leftpad_causal",
    "all_keys_masked",
    "neginf_mask_rows",
    "nan_in_excluded_kv",
    "large_logits",
    "ragged_tails",
    "gqa_ragged",
    "varlen_empty_seqs",
    "extreme_grad_out",
    "softcap",
    "trainable_bias",
    "dropout",
]
DTYPES = ["float16", "bfloat16"]
GPU_IMPLS = [metrics.OWN_IMPL, *metrics.PEERS]
CPU_IMPLS = [metrics.OWN_IMPL, "sdpa_math"]
RATES = ("nonfinite_rate", "wrong_result_rate", "max_rel_error")
# Trials per (family, impl, dtype). GPU: one, at the families' realistic "gpu" size; two took
# 380 s for the grid on an H200 (first real run, commit ed3fc95, cold caches), most of a
# device call. CPU: two at the "small" size (one in quick mode).
GPU_TRIALS = 1
CPU_TRIALS = 2


def _impl(name: str):
    """safeattn.attention, or a peer wrapped with the case's exact mask."""
    import torch

    import safeattn
    from safeattn import contract

    if name == metrics.OWN_IMPL:
        return safeattn.attention
    if name.startswith("sdpa_"):
        sdpa = torch.nn.functional.scaled_dot_product_attention

        def call_sdpa(q, k, v, mask, scale):
            if mask.dtype == torch.bool and bool(mask.all()):
                mask = None  # nothing excluded: lets backends without mask support run
            return sdpa(q, k, v, attn_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1])

        return contract.mask_adapter(name, call_sdpa)
    if name == "flex":
        from torch.nn.attention.flex_attention import create_block_mask

        flex = compiled_flex(dynamic=True)
        # A score_mod (soft-capping, a float bias) is compiled per shape: with dynamic=True
        # the compiled flex_attention rejects the tensors a score_mod captures (H100 and
        # H200, torch 2.11: "all unwrapped values must be FakeTensor, int, or SymInt"), and
        # these families had no FlexAttention figures; dynamic=False runs them
        # (docs/perf/flex_score_mod_check_h100_2026-11-27.log).
        flex_score_mod = compiled_flex(dynamic=False)

        def call_flex(q, k, v, mask, scale, softcap=0.0):
            batch, heads, n_q, n_k = mask.shape
            # The cap as a captured 0-d tensor: a Python float in the score_mod's closure
            # becomes a symbolic input under dynamic=True, which the compiled flex_attention
            # refuses (H200, torch 2.11: "all unwrapped values must be FakeTensor, int, or
            # SymInt"; CPU inductor: "unbacked_bindings").
            cap_t = torch.tensor(float(softcap), device=q.device)

            def cap(score):
                # FlexAttention's soft-capping recipe: a score_mod, before any bias.
                return cap_t * torch.tanh(score / cap_t) if softcap else score

            if mask.dtype == torch.bool:
                block_mask = create_block_mask(
                    lambda b, h, qi, ki: mask[b, h, qi, ki],
                    batch,
                    heads,
                    n_q,
                    n_k,
                    device=q.device,
                )
                capped = (lambda score, b, h, qi, ki: cap(score)) if softcap else None
                return (flex_score_mod if softcap else flex)(
                    q,
                    k,
                    v,
                    score_mod=capped,
                    block_mask=block_mask,
                    scale=scale,
                    enable_gqa=q.shape[1] != k.shape[1],
                )
            bias = mask

            def add_bias(score, b, h, qi, ki):
                return cap(score) + bias[b, h, qi, ki]

            return flex_score_mod(
                q, k, v, score_mod=add_bias, scale=scale, enable_gqa=q.shape[1] != k.shape[1]
            )

        return contract.mask_adapter(name, call_flex)
    raise ValueError(f"benchmarks: unknown impl {name!r}")


def _measure(grid: list, device: str, size: str, trials: int, tag: str) -> dict:
    def rates(family: str, impl: str, dtype: str) -> dict[str, float]:
        from safeattn import contract

        with impl_context(impl):
            values = contract.rates(family, _impl(impl), dtype_of(dtype), device, trials, size)
        return dict(zip(RATES, map(float, values), strict=True))

    return measure_grid(
        tag,
        itertools.product(*grid),
        rates,
        describe=lambda r: " ".join(f"{k}={v:.3g}" for k, v in r.items()),
        label=" ".join,
    )


class NumericsSuite:
    """Safety and accuracy on the GPU, safeattn beside every peer; see module docstring."""

    params = (FAMILIES, GPU_IMPLS, DTYPES)
    param_names = ("family", metrics.IMPL_PARAM, "dtype")
    timeout = GRID_TIMEOUT_S
    version = "numerics-1"  # bump when what it measures changes (see _grid)

    def setup(self, cache, *combo):
        lookup(cache, combo)  # not measured: skipped (NaN) here, not failed (_grid)

    def setup_cache(self) -> dict:
        require_cuda()
        return _measure(self.params, "cuda", "gpu", GPU_TRIALS, "numerics")

    track_nonfinite_rate = field_tracker("nonfinite_rate")
    track_wrong_result_rate = field_tracker("wrong_result_rate")
    track_max_rel_error = field_tracker("max_rel_error")


if not cuda_usable():
    del NumericsSuite  # pruned: no usable CUDA GPU here


class InterpreterNumericsSuite:
    """Safety and accuracy on the CPU: safeattn under Triton's interpreter, SDPA math."""

    params = (FAMILIES, CPU_IMPLS, DTYPES)
    param_names = ("family", metrics.IMPL_PARAM, "dtype")
    timeout = GRID_TIMEOUT_S
    version = "numerics-cpu-1"  # bump when what it measures changes (see _grid)

    def setup(self, cache, *combo):
        lookup(cache, combo)  # not measured: skipped (NaN) here, not failed (_grid)

    def setup_cache(self) -> dict:
        use_interpreter()
        return _measure(self.params, "cpu", "small", 1 if quick() else CPU_TRIALS, "numerics-cpu")

    track_nonfinite_rate = field_tracker("nonfinite_rate")
    track_wrong_result_rate = field_tracker("wrong_result_rate")
    track_max_rel_error = field_tracker("max_rel_error")
