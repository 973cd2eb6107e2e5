"""The GPU attention problems and implementations the speed, memory and numerics suites
share (a private module: asv imports it but finds no benchmark; torch is imported inside the
functions): the shapes and inputs, the SDPA backend pinning, compiled FlexAttention.
"""

from __future__ import annotations

from functools import cache

from ._truth import workloads


def dtype_of(name: str):
    """``"bfloat16"`` -> ``torch.bfloat16``."""
    import torch

    return getattr(torch, name)


def gpu_problem(seq_len: int, head_dim: int, gqa: int) -> tuple[int, int, int]:
    """(batch, query heads, key/value heads) of a GPU benchmark shape, as DESIGN.md fixes them:
    B = 16384 // N tokens per batch and Hq = 2048 // D so that work per call is constant
    across shapes; ``gqa`` query heads share one key/value head."""
    heads_q = workloads.heads_for(head_dim)
    return workloads.batch_for(seq_len), heads_q, heads_q // gqa


def attention_inputs(
    impl: str, dtype_name: str, seq_len: int, head_dim: int, gqa: int, device: str = "cuda"
):
    """q (B, Hq, N, D), k and v (B, Hkv, N, D) and an upstream gradient (B, Hq, N, D), all
    contiguous on ``device`` (cuda:0 for the suites), q/k/v requiring grad. Seeded: every impl
    sees the same values."""
    import torch

    batch, heads_q, heads_kv = gpu_problem(seq_len, head_dim, gqa)
    gen = torch.Generator(device=device).manual_seed(0)
    dtype = dtype_of(dtype_name)

    def randn(heads: int):
        return torch.randn(
            batch, heads, seq_len, head_dim, device=device, dtype=dtype, generator=gen
        )

    q, k, v = randn(heads_q), randn(heads_kv), randn(heads_kv)
    grad_out = randn(heads_q)
    for t in (q, k, v):
        t.requires_grad_(True)
    return q, k, v, grad_out


_SDPA_BACKENDS = {
    "sdpa_flash": "FLASH_ATTENTION",
    "sdpa_cudnn": "CUDNN_ATTENTION",
    "sdpa_efficient": "EFFICIENT_ATTENTION",
    "sdpa_math": "MATH",
}


def impl_context(impl: str):
    """The context manager a measurement of ``impl`` runs inside: the SDPA peers pin their
    backend with ``torch.nn.attention.sdpa_kernel`` (entered once, outside the timed calls)."""
    from contextlib import nullcontext

    if impl in _SDPA_BACKENDS:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel([getattr(SDPBackend, _SDPA_BACKENDS[impl])])
    return nullcontext()


def attention_call(impl: str, causal: bool, seq_len: int, gqa: int):
    """``fn(q, k, v) -> out`` for ``impl`` ("safeattn" or a peer of
    ``regress.metrics.PEERS``), causal meaning top-left as in SDPA's ``is_causal``
    (square shapes here, so top-left and bottom-right agree)."""
    import torch

    if impl == "safeattn":
        import safeattn

        return lambda q, k, v: safeattn.attention(q, k, v, causal=causal)
    if impl in _SDPA_BACKENDS:
        sdpa = torch.nn.functional.scaled_dot_product_attention
        enable_gqa = gqa > 1
        return lambda q, k, v: sdpa(q, k, v, is_causal=causal, enable_gqa=enable_gqa)
    if impl == "flex":
        flex = compiled_flex()
        block_mask = _causal_block_mask(seq_len) if causal else None
        enable_gqa = gqa > 1
        return lambda q, k, v: flex(q, k, v, block_mask=block_mask, enable_gqa=enable_gqa)
    raise ValueError(f"benchmarks: unknown impl {impl!r}")


@cache
def compiled_flex(dynamic: bool = False):
    """FlexAttention compiled once per process. Dynamo's recompile limit (8 by default) is
    raised: past it, dynamo silently falls back to an eager path that materialises the
    whole score matrix (DESIGN.md, known pitfalls), and we would time that instead. The
    speed and memory suites compile it per shape (``dynamic=False``, as users run a fixed
    shape); numerics, whose every case has new lengths, uses ``dynamic=True`` except with a
    ``score_mod``, which that mode refuses (benchmarks/numerics.py)."""
    import torch
    import torch._dynamo.config as dynamo_config
    import torch._functorch.config as functorch_config
    from torch.nn.attention.flex_attention import flex_attention

    limits = ("recompile_limit", "cache_size_limit")
    limits += ("accumulated_recompile_limit", "accumulated_cache_size_limit")
    for name in limits:
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, 1024)
    # The compiled backward donates (frees) its saved buffers unless told not to, and then
    # refuses ``backward(retain_graph=True)``: the backward-only timing replays one graph.
    functorch_config.donated_buffer = False
    return torch.compile(flex_attention, dynamic=dynamic)


@cache
def _causal_block_mask(seq_len: int):
    from torch.nn.attention.flex_attention import create_block_mask

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    return create_block_mask(causal, None, None, seq_len, seq_len, device="cuda")
