"""Features: what soft-capping, dropout and a bias gradient (issue 16) cost, in safeattn
and in the peers that have them.

``FeatureSpeedSuite`` (GPU only, absent from the grid without a usable CUDA GPU)
    impl × dtype × feature at one dense, non-causal shape (``regress/workloads.FEATURE_SHAPE``:
    B=4, H=16, N=4096, D=128; non-causal because SDPA takes no ``is_causal`` beside a bias),
    bf16: safeattn beside FlexAttention (compiled) and SDPA pinned to flash, cuDNN and
    memory-efficient, once plain (``none``) and once with each feature, so that a feature's
    cost is its time over the plain time of the same implementation in the same run.
    Measured as ``speed.SpeedSuite`` is (``speed._time_passes``: forward, backward,
    forward+backward; CUDA events after an untimed call that compiles and tunes):

=========== ================================ ====================================
feature     safeattn                         peers
=========== ================================ ====================================
none        ``attention(q, k, v)``            flex, SDPA flash / cuDNN / efficient
softcap     ``attention(softcap=cap)``        flex: ``score_mod`` cap·tanh(s/cap)
dropout     ``attention(dropout_p=p)``        SDPA flash / cuDNN / efficient
bias_grad   ``attention(attn_mask=bias)``,    flex: ``score_mod`` adding the captured
            bias (1, H, N, N) requiring grad  bias; SDPA cuDNN / efficient
=========== ================================ ====================================

A peer without the feature raises NotImplementedError naming what it lacks (stored as NaN
with that reason, benchmarks/_grid.py); a backend that refuses at run time raises its own
error, reported the same way. The bias gradient is part of every backward that has it:
``bias.grad`` is reset to None before each timed call, as q, k and v's are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._attention import attention_inputs, compiled_flex, dtype_of
from ._env import cuda_usable
from ._grid import GRID_TIMEOUT_S, lookup, pass_tracker
from ._truth import metrics, workloads
from .speed import FEATURE_PARAM_NAMES, _gpu_grid, _medians, _time_passes, per_pass

# Every peer that has one of the features; bf16 only (the features' arithmetic does not
# depend on the 16-bit format).
FEATURE_IMPLS: list[str] = [metrics.OWN_IMPL, "flex", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient"]
FEATURE_DTYPES = ["bfloat16"]
FEATURES: list[str] = list(workloads.FEATURES)


@dataclass
class FeatureCase:
    """One (feature, impl): ``call(q, k, v) -> out`` and ``inputs`` = (q, k, v, grad_out);
    ``leaves``: further tensors that receive a gradient (the trainable bias)."""

    call: Callable[..., Any]
    inputs: tuple
    leaves: tuple = ()


def trainable_bias(dtype_name: str):
    """(1, H, N, N) additive bias requiring grad (a learned pair bias shared by the batch),
    small values: the softmax stays as spread as without it."""
    import torch

    s = workloads.FEATURE_SHAPE
    gen = torch.Generator(device="cuda").manual_seed(1)
    bias = torch.randn(
        1, s.heads, s.seq_len, s.seq_len, device="cuda", dtype=dtype_of(dtype_name), generator=gen
    )
    return (bias * 0.1).requires_grad_()


def _safeattn_call(feature: str, bias):
    import safeattn

    if feature == "softcap":
        return lambda q, k, v: safeattn.attention(q, k, v, softcap=workloads.FEATURE_SOFTCAP)
    if feature == "dropout":
        return lambda q, k, v: safeattn.attention(q, k, v, dropout_p=workloads.FEATURE_DROPOUT_P)
    if feature == "bias_grad":
        return lambda q, k, v: safeattn.attention(q, k, v, attn_mask=bias)
    return lambda q, k, v: safeattn.attention(q, k, v)


def _flex_call(feature: str, bias):
    import torch

    flex = compiled_flex()
    if feature == "dropout":
        raise NotImplementedError("FlexAttention has no dropout")
    if feature == "softcap":
        cap = workloads.FEATURE_SOFTCAP

        def softcap(score, b, h, q_idx, kv_idx):
            return cap * torch.tanh(score / cap)

        return lambda q, k, v: flex(q, k, v, score_mod=softcap)
    if feature == "bias_grad":

        def add_bias(score, b, h, q_idx, kv_idx):
            return score + bias[0, h, q_idx, kv_idx]

        return lambda q, k, v: flex(q, k, v, score_mod=add_bias)
    return lambda q, k, v: flex(q, k, v)


def _sdpa_call(feature: str, bias):
    import torch

    sdpa = torch.nn.functional.scaled_dot_product_attention
    if feature == "softcap":
        raise NotImplementedError("SDPA has no logit soft-capping")
    if feature == "dropout":
        return lambda q, k, v: sdpa(q, k, v, dropout_p=workloads.FEATURE_DROPOUT_P)
    if feature == "bias_grad":
        return lambda q, k, v: sdpa(q, k, v, attn_mask=bias)
    return lambda q, k, v: sdpa(q, k, v)


def feature_case(feature: str, impl: str, dtype_name: str) -> FeatureCase:
    """The call and inputs of ``impl`` ("safeattn", "flex" or an SDPA peer, whose backend
    the caller pins with ``_attention.impl_context``) on ``feature`` (a key of
    ``workloads.FEATURES``)."""
    if feature not in workloads.FEATURES:
        raise ValueError(
            f"benchmarks: unknown feature {feature!r}; known: {list(workloads.FEATURES)}"
        )
    bias = trainable_bias(dtype_name) if feature == "bias_grad" else None
    if impl == "safeattn":
        call = _safeattn_call(feature, bias)
    elif impl == "flex":
        call = _flex_call(feature, bias)
    elif impl.startswith("sdpa_"):
        call = _sdpa_call(feature, bias)
    else:
        raise ValueError(f"benchmarks: unknown impl {impl!r}")
    s = workloads.FEATURE_SHAPE  # SpeedSuite's inputs at that shape: its B and H too
    inputs = attention_inputs(impl, dtype_name, s.seq_len, s.head_dim, 1)
    return FeatureCase(call, inputs, () if bias is None else (bias,))


def _feature_times(impl: str, dtype: str, feature: str):
    """{pass: [ms, ...]} for one implementation with one feature (bias and inputs built first)."""
    case = feature_case(feature, impl, dtype)
    combo = (impl, dtype, feature)
    return _time_passes(
        "feature-speed", combo, case.call, case.inputs, guard_compiles=True, leaves=case.leaves
    )


class FeatureSpeedSuite:
    """GPU time of safeattn and its peers with each feature; see the module docstring."""

    params = (FEATURE_IMPLS, FEATURE_DTYPES, FEATURES)
    param_names = FEATURE_PARAM_NAMES
    timeout = GRID_TIMEOUT_S
    version = "feature-speed-1"  # bump when what it measures changes (see _grid)

    def setup(self, cache, *combo):
        lookup(cache, ("forward", *combo))  # not measured: skipped (NaN) here, not failed (_grid)

    def setup_cache(self) -> dict:
        return per_pass(_gpu_grid("feature-speed", self.params, _feature_times, _medians))

    track_forward_ms = pass_tracker("forward")
    track_backward_ms = pass_tracker("backward")
    track_fwd_bwd_ms = pass_tracker("fwd_bwd")


if not cuda_usable():
    del FeatureSpeedSuite  # pruned: no usable CUDA GPU here (asv then lists no such benchmark)
