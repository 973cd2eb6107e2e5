"""The kernels as PyTorch operators: ``torch.ops.safeattn.attn_fwd`` / ``attn_bwd``.

Registered with ``torch.library.custom_op`` (fake implementations for tracing,
``register_autograd`` for the backward), so ``torch.compile(..., fullgraph=True)`` and
``torch.export`` see one opaque node per attention call instead of tracing into the Triton
launcher (which Dynamo cannot). The operators take only tensors and plain scalars:

- every problem size is read from the tensors' shapes (so dynamic shapes stay symbolic),
  except the varlen maximum lengths, which are arguments;
- the block-mask summary (:class:`safeattn.blockmask.BlockSummary`) travels as its eight
  int32 tensors plus the tile sizes (``tiles`` empty without a summary).

Everything above them (validation, the summary) is ordinary PyTorch that Dynamo traces.
Eager calls bypass the operators (:func:`run`): their dispatch costs more than a small
kernel does.
"""

from __future__ import annotations

from dataclasses import fields

import torch
from torch import Tensor

from ..blockmask import BlockSummary
from . import launch, passes

_NAMESPACE = "safeattn"


def _meta(
    q: Tensor, k: Tensor, key_mask: Tensor | None, varlen: bool, batch: int, max_seqlen_q: int,
    max_seqlen_k: int, bottom_right: bool, window_left: int, window_right: int, mask_kind: int,
    scale: float, softcap: float, deterministic: bool, block_q: int, block_k: int,
    dropout_p: float = 0.0,
) -> launch.Meta:  # fmt: skip
    if varlen:  # q (total_q, Hq, D), k (total_k, Hkv, D)
        heads_q, heads_kv, seq_q, seq_k = q.shape[1], k.shape[1], max_seqlen_q, max_seqlen_k
    else:  # q (B, Hq, Nq, D), k (B, Hkv, Nk, D)
        batch, heads_q, heads_kv = q.shape[0], q.shape[1], k.shape[1]
        seq_q, seq_k = q.shape[2], k.shape[2]
    return launch.Meta(
        varlen=varlen, batch=batch, heads_q=heads_q, heads_kv=heads_kv, seq_q=seq_q,
        seq_k=seq_k, head_dim=q.shape[-1], bottom_right=bottom_right, window_left=window_left,
        window_right=window_right, has_key_mask=key_mask is not None, mask_kind=mask_kind,
        scale=scale, deterministic=deterministic, sparse_q=block_q, sparse_k=block_k,
        softcap=softcap, dropout_p=dropout_p,
    )  # fmt: skip


def _summary(tiles: list[Tensor], block_q: int, block_k: int) -> BlockSummary | None:
    """The inverse of :func:`run`'s ``tiles``: BlockSummary's tensor fields, in order."""
    return BlockSummary(block_q, block_k, *tiles) if tiles else None


def _lse_shape(q: Tensor, varlen: bool) -> tuple:
    return (q.shape[1], q.shape[0]) if varlen else (q.shape[0], q.shape[1], q.shape[2])


@torch.library.custom_op(f"{_NAMESPACE}::attn_fwd", mutates_args=())
def attn_fwd(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_mask: Tensor | None,
    attn_mask: Tensor | None,
    cu_seqlens_q: Tensor | None,
    cu_seqlens_k: Tensor | None,
    seed: Tensor | None,
    tiles: list[Tensor],
    varlen: bool,
    batch: int,
    max_seqlen_q: int,
    max_seqlen_k: int,
    bottom_right: bool,
    window_left: int,
    window_right: int,
    mask_kind: int,
    scale: float,
    softcap: float,
    deterministic: bool,
    block_q: int,
    block_k: int,
    dropout_p: float,
) -> tuple[Tensor, Tensor]:
    """Forward kernel: ``(out, lse2)``, out like q (same layout), lse2 float32 log2-domain
    (B, Hq, Nq), or (Hq, total_q) varlen. Arguments as validated by ``safeattn._inputs``
    (``batch`` is read only for varlen; ``block_q``/``block_k`` are 0 without tiles;
    ``softcap`` 0.0 = off; ``seed`` dropout's int64 (1,) seed, None when ``dropout_p`` is 0)."""
    meta = _meta(q, k, key_mask, varlen, batch, max_seqlen_q, max_seqlen_k, bottom_right,
                 window_left, window_right, mask_kind, scale, softcap, deterministic, block_q,
                 block_k, dropout_p)  # fmt: skip
    return passes.forward(
        q, k, v, key_mask, attn_mask, cu_seqlens_q, cu_seqlens_k, meta,
        _summary(tiles, block_q, block_k), seed,
    )  # fmt: skip


@attn_fwd.register_fake
def _(q, k, v, key_mask, attn_mask, cu_seqlens_q, cu_seqlens_k, seed, tiles, varlen, *args):
    out = torch.empty_like(q)  # launch allocates with empty_like: the same layout
    return out, q.new_empty(_lse_shape(q, varlen), dtype=torch.float32)


@torch.library.custom_op(f"{_NAMESPACE}::attn_bwd", mutates_args=())
def attn_bwd(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    dout: Tensor,
    lse2: Tensor,
    key_mask: Tensor | None,
    attn_mask: Tensor | None,
    cu_seqlens_q: Tensor | None,
    cu_seqlens_k: Tensor | None,
    seed: Tensor | None,
    tiles: list[Tensor],
    varlen: bool,
    batch: int,
    max_seqlen_q: int,
    max_seqlen_k: int,
    bottom_right: bool,
    window_left: int,
    window_right: int,
    mask_kind: int,
    scale: float,
    softcap: float,
    deterministic: bool,
    block_q: int,
    block_k: int,
    dropout_p: float,
    dbias: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Backward kernels: ``(dq, dk, dv, dbias)``, dq, dk, dv shaped (and laid out) like q, k,
    v; dbias (``dbias=True``) the additive attn_mask's gradient (B, Hq, Nq, Nk), else empty."""
    meta = _meta(q, k, key_mask, varlen, batch, max_seqlen_q, max_seqlen_k, bottom_right,
                 window_left, window_right, mask_kind, scale, softcap, deterministic, block_q,
                 block_k, dropout_p)  # fmt: skip
    dq, dk, dv, db = passes.backward(
        q, k, v, out, dout, lse2, key_mask, attn_mask, cu_seqlens_q, cu_seqlens_k, meta,
        _summary(tiles, block_q, block_k), dbias, seed,
    )  # fmt: skip
    return dq, dk, dv, db if db is not None else q.new_empty(0)


@attn_bwd.register_fake
def _(q, k, v, out, dout, lse2, key_mask, attn_mask, *args):
    db = attn_mask.new_empty(attn_mask.shape) if args[-1] else q.new_empty(0)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), db


# attn_fwd's arguments after q, k, v: five optional tensors, the tile list, then these.
_SCALARS = (
    "varlen", "batch", "max_seqlen_q", "max_seqlen_k", "bottom_right", "window_left",
    "window_right", "mask_kind", "scale", "softcap", "deterministic", "block_q", "block_k",
    "dropout_p",
)  # fmt: skip


def _setup_context(ctx, inputs, output):
    q, k, v, key_mask, attn_mask, cu_q, cu_k, seed, tiles, *scalars = inputs
    out, lse2 = output
    ctx.save_for_backward(q, k, v, out, lse2, key_mask, attn_mask, cu_q, cu_k, seed, *tiles)
    ctx.scalars = scalars
    ctx.n_tiles = len(tiles)


def _wants_dbias(ctx, attn_mask: Tensor | None) -> bool:
    """A float attn_mask that requires grad (only a dense call accepts one)."""
    return bool(ctx.needs_input_grad[4]) and attn_mask is not None and attn_mask.is_floating_point()


def _backward(ctx, dout, _dlse2):
    q, k, v, out, lse2, key_mask, attn_mask, cu_q, cu_k, seed, *tiles = ctx.saved_tensors
    want = _wants_dbias(ctx, attn_mask)
    dq, dk, dv, db = attn_bwd(q, k, v, out, dout, lse2, key_mask, attn_mask, cu_q, cu_k, seed,
                              tiles, *ctx.scalars, want)  # fmt: skip
    # One entry per input, the tile list as a list: no gradient but q, k, v (and attn_mask).
    grads = (dq, dk, dv, None, db if want else None, None, None, None, [None] * ctx.n_tiles)
    return grads + (None,) * len(_SCALARS)


attn_fwd.register_autograd(_backward, setup_context=_setup_context)


class _Eager(torch.autograd.Function):
    """The same launches for eager calls: ``custom_op`` dispatch costs ~20x an
    ``autograd.Function`` in Python (182 vs 10 us per call on a CPU core), which a 0.3 ms
    kernel would feel. Compiled graphs never see this class (see :func:`run`)."""

    @staticmethod
    def forward(ctx, q, k, v, key_mask, attn_mask, cu_q, cu_k, seed, meta: launch.Meta, summary):
        out, lse2 = passes.forward(q, k, v, key_mask, attn_mask, cu_q, cu_k, meta, summary, seed)
        ctx.save_for_backward(q, k, v, out, lse2, key_mask, attn_mask, cu_q, cu_k, seed)
        ctx.meta, ctx.summary = meta, summary
        ctx.mark_non_differentiable(lse2)
        return out, lse2

    @staticmethod
    def backward(ctx, dout, _dlse2):
        q, k, v, out, lse2, key_mask, attn_mask, cu_q, cu_k, seed = ctx.saved_tensors
        want = _wants_dbias(ctx, attn_mask)
        dq, dk, dv, db = passes.backward(
            q, k, v, out, dout, lse2, key_mask, attn_mask, cu_q, cu_k, ctx.meta, ctx.summary,
            want, seed,
        )  # fmt: skip
        return dq, dk, dv, None, db, None, None, None, None, None


def dropout_seed(device: torch.device) -> Tensor:
    """A fresh dropout seed, int64 (1,) on ``device``, drawn from that device's PyTorch
    generator: ``torch.manual_seed`` reproduces it, and a compiled graph or a CUDA graph
    capture records the draw (no host round trip)."""
    return torch.randint(0, 2**62, (1,), device=device, dtype=torch.int64)


def run(p, summary: BlockSummary | None) -> tuple[Tensor, Tensor]:
    """Forward (with autograd) of a validated :class:`safeattn._inputs.AttnProblem`:
    ``attn_fwd`` inside a compiled graph (Dynamo and ``torch.export`` trace to it), the
    same launches through :class:`_Eager` otherwise. lse2 carries no gradient either way
    (as documented for ``return_lse``)."""
    mask_kind = 0
    if p.attn_mask is not None:
        mask_kind = 1 if p.attn_mask.dtype == torch.bool else 2
    block_q, block_k = (summary.block_q, summary.block_k) if summary is not None else (0, 0)
    scalars = (p.varlen, p.batch, p.seq_q, p.seq_k, p.bottom_right, p.window_left,
               p.window_right, mask_kind, p.scale, p.softcap, p.deterministic, block_q,
               block_k, p.dropout_p)  # fmt: skip
    seed = dropout_seed(p.q.device) if p.dropout_p > 0 else None
    if not torch.compiler.is_compiling():
        meta = _meta(p.q, p.k, p.key_mask, *scalars)
        return _Eager.apply(p.q, p.k, p.v, p.key_mask, p.attn_mask, p.cu_seqlens_q,
                            p.cu_seqlens_k, seed, meta, summary)  # fmt: skip
    tiles = [] if summary is None else [getattr(summary, f.name) for f in fields(summary)[2:]]
    out, lse2 = attn_fwd(p.q, p.k, p.v, p.key_mask, p.attn_mask, p.cu_seqlens_q,
                         p.cu_seqlens_k, seed, tiles, *scalars)  # fmt: skip
    return out, lse2.detach()
