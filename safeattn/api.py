"""Public API: ``attention``, ``varlen_attention`` and ``scaled_dot_product_attention``.

Causal alignment, for Nq = 3 query rows and Nk = 5 keys (``x`` = may attend)::

    causal=True / "top_left"            causal="bottom_right"
    (PyTorch's is_causal)               (FlashAttention >= 2.1)

         k0 k1 k2 k3 k4                      k0 k1 k2 k3 k4
    q0 [ x  .  .  .  . ]                q0 [ x  x  x  .  . ]
    q1 [ x  x  .  .  . ]                q1 [ x  x  x  x  . ]
    q2 [ x  x  x  .  . ]                q2 [ x  x  x  x  x ]

With Nq > Nk, bottom-right alignment leaves the first Nq - Nk rows with no key at all;
``window=(left, right)`` keeps keys ``i + off - left <= j <= i + off + right`` around the same
diagonal (``off`` = 0 top-left, Nk - Nq bottom-right; -1 = unbounded on that side).

Empty rows: a query row that may attend to no key at all (after causal, window, key_mask and
attn_mask are combined) outputs exactly 0, has LSE = -inf, and contributes exactly 0 to every
gradient — where a plain softmax gives NaN.

CUDA graphs: every entry point can be captured, forward and backward, by
``torch.cuda.graph``. Warm up first (PyTorch's recipe: a few eager calls of the same
shapes, dtypes, masks and layouts, on a side stream): that compiles and tunes the kernels,
which cannot happen inside a capture (safeattn raises a RuntimeError with a HINT if asked
to). A ``key_mask``/``attn_mask`` passed to a captured call is summarised inside the graph,
so a replay sees the values copied into the mask tensor before it. A :func:`block_mask`
built before the capture is a snapshot: replays use its tiles as they were (build it
inside the captured region to have it rebuilt on every replay). Inside a capture the
values of ``cu_seqlens`` are not checked, and ``max_seqlen_q/k`` stay those of capture.

Where it runs: CUDA tensors use the compiled Triton kernels. CPU tensors use the same Triton
kernels under Triton's interpreter when ``TRITON_INTERPRET=1`` was set before import (slow;
for tests), and otherwise :mod:`safeattn.reference` — the pure-PyTorch implementation of the
same contract — so CPU code never crashes for want of a GPU.
"""

from __future__ import annotations

import torch

from . import blockmask as _bm
from . import reference
from ._input_checks import check_block_mask_use
from ._inputs import AttnProblem, capturing, check_attention, check_varlen
from .blockmask import BlockMask
from .kernels import launch, ops, passes

Causal = bool | str
Window = tuple[int, int] | None


def _use_kernels(p: AttnProblem) -> bool:
    return p.q.device.type == "cuda" or launch.INTERPRET


def _run(p: AttnProblem, summary: _bm.BlockSummary | None = None):
    out, lse2 = ops.run(p, summary)  # torch.ops.safeattn.attn_fwd (+ its autograd)
    if p.return_lse:
        return out, passes.lse_natural(lse2)
    return out


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: Causal = False,
    window: Window = None,
    key_mask: torch.Tensor | None = None,
    attn_mask: torch.Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = 0.0,
    return_lse: bool = False,
    deterministic: bool = False,
    block_mask: BlockMask | None = None,
    dropout_p: float = 0.0,
):
    """NaN-safe fused attention, ``softmax(q kᵀ · scale + mask) v``, forward and backward.

    Args:
        q: (B, Hq, Nq, D) float16, bfloat16 or float32 (float32 is computed at IEEE accuracy,
            not tf32). Any strides, e.g. ``x.view(B, N, H, D).transpose(1, 2)``.
        k, v: (B, Hkv, Nk, D), same dtype and device; ``Hq % Hkv == 0`` (GQA/MQA need no flag).
            1 <= D <= 256; Nq, Nk >= 0.
        causal: False, True / "top_left" (as PyTorch's ``is_causal``) or "bottom_right"
            (as FlashAttention >= 2.1). See the module docstring's pictures.
        window: (left, right) local attention around the aligned diagonal; -1 = unbounded.
        key_mask: (B, Nk) bool, **True = this key may be attended** (the sense of SDPA's bool
            ``attn_mask`` and Hugging Face's ``attention_mask``; the opposite of
            ``nn.MultiheadAttention``'s ``key_padding_mask``).
        attn_mask: bool (True = attend) or additive float, broadcastable to (B, Hq, Nq, Nk).
            A float mask may require grad (a trainable bias): the backward returns its
            gradient dBias (= dS, 0 at excluded pairs and on empty rows), summed over the
            axes it was broadcast along. Cost: one (B, Hq, Nq, Nk) tensor of the mask's
            dtype written by the dQ kernel (no other N x N buffer); deterministic.
        scale: logit scale; default 1/sqrt(D).
        softcap: logit soft-capping (Gemma 2; FlashAttention-2's and FlexAttention's
            ``softcap``): each score ``s = q·k · scale`` becomes ``softcap · tanh(s / softcap)``
            before attn_mask's bias is added; masked pairs stay excluded. 0.0 or None: off
            (the kernels compile without it). Gradients flow through the cap.
        return_lse: also return the log-sum-exp, float32 (B, Hq, Nq), natural log, -inf on
            empty rows (of the capped scores when softcap is on).
        deterministic: gradients are bitwise reproducible in any case (the backward uses no
            atomics); True additionally pins the kernel configs (no timing-based choice), so
            results are also identical across processes on the same GPU model.
        block_mask: a :func:`safeattn.block_mask` built once for many calls (one per layer),
            instead of ``causal``/``window``/``key_mask``/``attn_mask`` (``softcap`` is not a
            mask: pass it beside the block mask). Without it, the tile summary of a
            key_mask/attn_mask is built on the first call and reused while the same mask
            tensors come back unmodified (see :mod:`safeattn.blockmask`).
        dropout_p: drop each (query, key) weight with this probability and scale the kept
            ones by 1 / (1 - p), as SDPA's ``dropout_p`` (pass 0.0 in eval). The mask comes
            from Philox seeded by the device's PyTorch generator (``torch.manual_seed``
            reproduces it) and is regenerated in the backward, never stored. It never
            resurrects an excluded key; empty rows stay exactly 0.

    Speed: with a key_mask or attn_mask, the kernels visit only the (query block, key block)
    tiles that some pair may attend; tiles where every pair may attend run without element
    masks. Building the summary reads each mask once.

    Returns:
        out (B, Hq, Nq, D) in q's dtype and memory layout, or ``(out, lse)``.

    Raises:
        TypeError / ValueError naming the argument, with shapes and a HINT, on bad input.
    """
    if block_mask is not None:
        check_block_mask_use(block_mask, q, k, causal, window, key_mask, attn_mask)
        causal, window = block_mask.causal, block_mask.window
        key_mask, attn_mask = block_mask.key_mask, block_mask.attn_mask
    p = check_attention(
        q, k, v, causal=causal, window=window, key_mask=key_mask, attn_mask=attn_mask,
        scale=scale, softcap=softcap, return_lse=return_lse, deterministic=deterministic,
        dropout_p=dropout_p,
    )  # fmt: skip
    if not _use_kernels(p):
        return reference.attend_problem(p)  # p is validated: the reference need not again
    summary = None
    if p.key_mask is not None or p.attn_mask is not None:
        if block_mask is not None and block_mask.summary is not None:
            summary = block_mask.summary
        elif torch.compiler.is_compiling():
            # A compiled graph builds the summary in the graph (a few tensor ops); the
            # identity/version cache is Python state that Dynamo cannot guard soundly.
            summary = _bm.summary_for(p)
        elif capturing(p.q.device):
            # CUDA graph capture: record the build, so that every replay summarises the
            # mask values of that replay. The cache is bypassed both ways: a cached summary
            # would be baked into the graph (stale once a replay gets a new mask), and one
            # recorded here holds its values only after a replay (no eager call may see it).
            summary = _bm.summary_in_capture(p)
        else:
            summary = _bm.cached_summary(p, key_mask, attn_mask)
    return _run(p, summary)


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: Causal = False,
    window: Window = None,
    scale: float | None = None,
    softcap: float | None = 0.0,
    return_lse: bool = False,
    deterministic: bool = False,
    dropout_p: float = 0.0,
):
    """Attention over packed variable-length sequences (FlashAttention's varlen layout).

    Args:
        q: (total_q, Hq, D); k, v: (total_k, Hkv, D). Sequence b is rows
            ``cu_seqlens_q[b]:cu_seqlens_q[b+1]`` of q and ``cu_seqlens_k[b]:cu_seqlens_k[b+1]``
            of k and v. Zero-length sequences are allowed.
        cu_seqlens_q, cu_seqlens_k: int32 (B + 1,), starting at 0, non-decreasing, ending at
            the total token count.
        max_seqlen_q, max_seqlen_k: upper bounds of the sequence lengths.
        causal, window, scale, softcap, deterministic, dropout_p: as :func:`attention`, per sequence
            (bottom-right alignment uses each sequence's own lengths).
        return_lse: also return lse, float32 (Hq, total_q), natural log.

    Returns:
        out (total_q, Hq, D), or ``(out, lse)``.
    """
    p = check_varlen(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=causal,
        window=window, scale=scale, softcap=softcap, return_lse=return_lse,
        deterministic=deterministic, dropout_p=dropout_p,
    )  # fmt: skip
    if not _use_kernels(p):
        return reference.attend_problem(p)
    return _run(p)


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> torch.Tensor:
    """Drop-in for ``torch.nn.functional.scaled_dot_product_attention``.

    Same signature and semantics (``is_causal`` is top-left aligned; a bool ``attn_mask`` is
    True = attend; a float one is added), with two deliberate differences: a fully masked
    row gives 0 instead of NaN, and masked-out positions never leak NaN/Inf. Shapes:
    query (..., Hq, L, E), key/value (..., Hkv, S, E) with the same leading dims; 3-D inputs
    (N, L, E) are one head. Heads must match unless ``enable_gqa=True``. ``dropout_p`` as
    :func:`attention`'s (applied whenever > 0, as PyTorch's).
    """
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, torch.Tensor) or t.dim() < 3:
            raise ValueError(
                f"safeattn.scaled_dot_product_attention: {name} must be a tensor of at least 3 "
                f"dims (..., L, E); got {getattr(t, 'shape', type(t).__name__)}.\n"
                "HINT: pass (N, H, L, E) or (N, L, E) tensors."
            )
    if query.dim() != key.dim() or key.dim() != value.dim():
        raise ValueError(
            "safeattn.scaled_dot_product_attention: query, key and value must have the same "
            f"number of dims; got {tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}."
            "\nHINT: reshape them to (N, H, L, E)."
        )
    if query.shape[-3:-2] != key.shape[-3:-2] and query.dim() >= 4 and not enable_gqa:
        raise ValueError(
            "safeattn.scaled_dot_product_attention: query has "
            f"{query.shape[-3]} heads and key {key.shape[-3]}; that needs enable_gqa=True "
            "(as in PyTorch).\nHINT: pass enable_gqa=True for grouped-query attention."
        )
    lead = query.shape[:-2]
    q4, k4, v4 = (_as_4d(t) for t in (query, key, value))
    mask4 = attn_mask
    if attn_mask is not None and query.dim() == 3 and attn_mask.dim() == 3:
        mask4 = attn_mask.unsqueeze(1)  # (N, L, S) -> (N, 1, L, S), as for the inputs
    elif attn_mask is not None and attn_mask.dim() > 4:
        mask4 = attn_mask.reshape(-1, *attn_mask.shape[-3:])
    out = attention(
        q4, k4, v4, causal=bool(is_causal), attn_mask=mask4, scale=scale, dropout_p=dropout_p
    )
    return out.reshape(*lead, out.shape[-2], out.shape[-1])


def _as_4d(t: torch.Tensor) -> torch.Tensor:
    """(N, L, E) -> (N, 1, L, E); (..., H, L, E) -> (prod(...), H, L, E)."""
    if t.dim() == 3:
        return t.unsqueeze(1)
    if t.dim() == 4:
        return t
    return t.reshape(-1, *t.shape[-3:])
