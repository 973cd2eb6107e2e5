"""Validation and normalisation of every attention argument, in one place.

Every public entry point (``safeattn.attention``, ``safeattn.varlen_attention``,
``safeattn.reference``) calls :func:`check_attention` or :func:`check_varlen` first thing,
once per call. They raise ``TypeError`` (wrong type or dtype) or ``ValueError`` (wrong shape,
value or device) with a multi-line message that names the argument, shows the shapes, dtypes
and devices involved and ends with a ``HINT:`` line; nothing downstream asserts on user input.
The checks of single arguments and their messages live in :mod:`safeattn._input_checks`, the
checks of ``cu_seqlens`` values in :mod:`safeattn._cu_seqlens`.

The result is an :class:`AttnProblem`: the tensors plus every normalised fact a kernel or the
reference needs (sizes, the diagonal alignment, the window with causality folded in, the
expanded masks, the scale). :func:`allowed_mask` and :func:`sequence_problems` derive the
exact allowed pairs and the per-sequence problems from it.

Masking semantics (DESIGN.md). Row ``i`` of a (sequence of) ``Nq`` queries against ``Nk``
keys has the diagonal offset ``off = 0`` (top-left, PyTorch's ``is_causal``) or
``off = Nk - Nq`` (bottom-right, FlashAttention >= 2.1; per sequence for varlen). Key ``j`` is
allowed for query ``i`` iff::

    (left  < 0 or i + off - left <= j)  and  (right < 0 or j <= i + off + right)
    and key_mask[b, j]  and  attn_mask[b, h, i, j] (bool: True; float: not -inf)

Soft-capping (``softcap > 0``, as FlashAttention-2, FlexAttention and Gemma 2): the score
``s = q·k · scale`` becomes ``softcap · tanh(s / softcap)`` before an additive float
``attn_mask`` is added; which pairs are allowed does not change.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ._cu_seqlens import check_cu_seqlens, check_max_seqlen
from ._input_checks import (
    check_attn_mask,
    check_causal,
    check_dropout,
    check_flag,
    check_heads_and_dim,
    check_key_mask,
    check_qkv_types,
    check_scale,
    check_softcap,
    check_window,
    describe,
    error,
    qkv_facts,
)


@dataclass
class AttnProblem:
    """A validated, normalised attention call.

    Dense: ``q`` (B, Hq, Nq, D), ``k``/``v`` (B, Hkv, Nk, D), any strides.
    Varlen: packed ``q`` (total_q, Hq, D), ``k``/``v`` (total_k, Hkv, D) with int32
    ``cu_seqlens_*`` of shape (B + 1,); ``seq_q``/``seq_k`` are then the max sequence lengths.
    """

    q: Tensor
    k: Tensor
    v: Tensor
    varlen: bool
    batch: int
    heads_q: int
    heads_kv: int
    seq_q: int
    seq_k: int
    head_dim: int
    cu_seqlens_q: Tensor | None
    cu_seqlens_k: Tensor | None
    causal: bool  # True for either alignment
    bottom_right: bool  # False: top-left diagonal (PyTorch is_causal); True: FA >= 2.1
    window_left: int  # -1 = unbounded
    window_right: int  # -1 = unbounded; 0 whenever causal
    key_mask: Tensor | None  # (B, Nk) bool, True = may attend (dense only)
    attn_mask: Tensor | None  # bool or float, expanded view (B, Hq, Nq, Nk)
    scale: float
    softcap: float  # 0.0 = off; else scores become softcap * tanh(score / softcap)
    return_lse: bool
    deterministic: bool
    dropout_p: float = 0.0  # probability of dropping a pair (regenerated in the backward)


# --------------------------------------------------------------------------- CUDA graphs


def capturing(device: torch.device) -> bool:
    """Whether work for ``device`` is being recorded into a CUDA graph right now (the current
    stream is capturing, e.g. inside ``torch.cuda.graph``). Kernels recorded then run only at
    replay, so nothing may read tensor values on the host (a sync is illegal in a capture,
    and the values would be those of capture time anyway). Asked only where a host read or
    a Python-side cache would otherwise happen; False for a non-CUDA device."""
    return (
        device.type == "cuda"
        and torch.cuda.is_available()  # a CPU-only torch cannot be asked (tests fake devices)
        and torch.cuda.is_current_stream_capturing()
    )


# --------------------------------------------------------------------------- dense


def check_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool | str = False,
    window: tuple[int, int] | None = None,
    key_mask: Tensor | None = None,
    attn_mask: Tensor | None = None,
    scale: float | None = None,
    softcap: float | None = 0.0,
    return_lse: bool = False,
    deterministic: bool = False,
    allow_float64: bool = False,
    dropout_p: float = 0.0,
) -> AttnProblem:
    """Validate a dense call: q (B, Hq, Nq, D), k/v (B, Hkv, Nk, D) -> AttnProblem.

    key_mask: (B, Nk) bool, True = may attend. attn_mask: bool (True = attend) or additive
    float, broadcastable to (B, Hq, Nq, Nk). softcap: None or 0.0 = off, else a positive cap
    (see the module docstring). Raises TypeError / ValueError (see module doc).
    """
    check_qkv_types(q, k, v, allow_float64)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 4:
            raise error(
                ValueError,
                f"`{name}` must be 4-D (B, H, N, D), got {x.dim()}-D.",
                qkv_facts(q, k, v),
                "for a (B, N, H, D) tensor pass x.transpose(1, 2) (no copy needed); "
                "for packed (total, H, D) sequences use safeattn.varlen_attention.",
            )
    if k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0]:
        raise error(
            ValueError,
            f"batch mismatch: `q` has B={q.shape[0]}, `k` B={k.shape[0]}, `v` B={v.shape[0]}.",
            qkv_facts(q, k, v),
            "q, k and v must share the batch dimension (dim 0).",
        )
    check_heads_and_dim(q, k, v, head_axis=1)
    batch, heads_q, seq_q, head_dim = q.shape
    heads_kv, seq_k = k.shape[1], k.shape[2]

    is_causal, bottom_right = check_causal(causal)
    left, right = check_window(window, is_causal)

    if key_mask is not None:
        check_key_mask(key_mask, q, k, batch, seq_k)
    expanded_mask = None
    if attn_mask is not None:
        expanded_mask = check_attn_mask(attn_mask, q, k, v, (batch, heads_q, seq_q, seq_k))

    return AttnProblem(
        q=q,
        k=k,
        v=v,
        varlen=False,
        batch=batch,
        heads_q=heads_q,
        heads_kv=heads_kv,
        seq_q=seq_q,
        seq_k=seq_k,
        head_dim=head_dim,
        cu_seqlens_q=None,
        cu_seqlens_k=None,
        causal=is_causal,
        bottom_right=bottom_right,
        window_left=left,
        window_right=right,
        key_mask=key_mask,
        attn_mask=expanded_mask,
        scale=check_scale(scale, head_dim),
        softcap=check_softcap(softcap),
        return_lse=check_flag("return_lse", return_lse),
        deterministic=check_flag("deterministic", deterministic),
        dropout_p=check_dropout(dropout_p),
    )


# --------------------------------------------------------------------------- varlen


def check_varlen(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    cu_seqlens_q: Tensor,
    cu_seqlens_k: Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    *,
    causal: bool | str = False,
    window: tuple[int, int] | None = None,
    scale: float | None = None,
    softcap: float | None = 0.0,
    return_lse: bool = False,
    deterministic: bool = False,
    allow_float64: bool = False,
    dropout_p: float = 0.0,
) -> AttnProblem:
    """Validate a packed varlen call: q (total_q, Hq, D), k/v (total_k, Hkv, D),
    cu_seqlens_* int32 (B + 1,) -> AttnProblem (varlen=True, seq_q/seq_k = max lengths).

    Reads cu_seqlens on the host once to check its values (not again while the same tensor
    object comes back unmodified: see :func:`safeattn._cu_seqlens.check_cu_seqlens`),
    except inside a compiled graph (``torch.compile``) or a CUDA graph capture, where that
    would be a host sync: there the
    values (and max_seqlen_q/k as bounds of the lengths) are trusted.
    """
    check_qkv_types(q, k, v, allow_float64)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 3:
            raise error(
                ValueError,
                f"`{name}` must be 3-D packed (total_tokens, H, D) for varlen, got {x.dim()}-D.",
                qkv_facts(q, k, v),
                "concatenate the sequences along dim 0; for padded (B, H, N, D) batches use "
                "safeattn.attention with key_mask.",
            )
    check_heads_and_dim(q, k, v, head_axis=1)
    # Reading the values would be a host sync inside a compiled graph or a CUDA graph capture.
    read = not (torch.compiler.is_compiling() or capturing(q.device))
    cu_q = check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], "q", q, read)
    cu_k = check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, k.shape[0], "k", q, read)
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise error(
            ValueError,
            f"`cu_seqlens_q` and `cu_seqlens_k` must have the same length (B + 1), "
            f"got {cu_seqlens_q.shape[0]} and {cu_seqlens_k.shape[0]}.",
            {"cu_seqlens_q": describe(cu_seqlens_q), "cu_seqlens_k": describe(cu_seqlens_k)},
            "every sequence has a query part and a key part (either may be empty).",
        )
    lengths_q = [b - a for a, b in itertools.pairwise(cu_q)] if cu_q is not None else []
    lengths_k = [b - a for a, b in itertools.pairwise(cu_k)] if cu_k is not None else []
    max_q = check_max_seqlen("max_seqlen_q", max_seqlen_q, lengths_q, "cu_seqlens_q")
    max_k = check_max_seqlen("max_seqlen_k", max_seqlen_k, lengths_k, "cu_seqlens_k")

    is_causal, bottom_right = check_causal(causal)
    left, right = check_window(window, is_causal)
    return AttnProblem(
        q=q,
        k=k,
        v=v,
        varlen=True,
        batch=cu_seqlens_q.shape[0] - 1,
        heads_q=q.shape[1],
        heads_kv=k.shape[1],
        seq_q=max_q,
        seq_k=max_k,
        head_dim=q.shape[2],
        cu_seqlens_q=cu_seqlens_q,
        cu_seqlens_k=cu_seqlens_k,
        causal=is_causal,
        bottom_right=bottom_right,
        window_left=left,
        window_right=right,
        key_mask=None,
        attn_mask=None,
        scale=check_scale(scale, q.shape[2]),
        softcap=check_softcap(softcap),
        return_lse=check_flag("return_lse", return_lse),
        deterministic=check_flag("deterministic", deterministic),
        dropout_p=check_dropout(dropout_p),
    )


# --------------------------------------------------------------------------- block masks


def check_block_mask_args(
    seq_q: Any,
    seq_k: Any,
    *,
    causal: Any,
    window: Any,
    key_mask: Any,
    attn_mask: Any,
) -> AttnProblem:
    """Validate ``safeattn.block_mask(...)``'s arguments as :func:`check_attention` would for
    a call of those lengths. The problem's q/k/v are stride-0 stand-ins (no memory); its
    batch and heads are the masks' own (1 where no mask has the axis)."""
    for name, n in (("seq_q", seq_q), ("seq_k", seq_k)):
        if isinstance(n, bool) or not isinstance(n, int):
            raise error(
                TypeError,
                f"`{name}` must be an int, got {type(n).__name__}.",
                {name: repr(n)[:80]},
                "pass the query and key lengths Nq, Nk of the calls the mask will serve.",
            )
        if n < 0:
            raise error(ValueError, f"`{name}` must be >= 0, got {n}.", {name: repr(n)},
                         "pass the query and key lengths Nq, Nk.")  # fmt: skip
    masks = [t for t in (key_mask, attn_mask) if isinstance(t, Tensor)]
    device = masks[0].device if masks else torch.device("cpu")
    batch, heads = 1, 1
    if isinstance(attn_mask, Tensor) and attn_mask.dim() == 4:
        batch, heads = attn_mask.shape[0], attn_mask.shape[1]
    if isinstance(key_mask, Tensor) and key_mask.dim() == 2:
        batch = key_mask.shape[0]
    stand_in = torch.zeros((), dtype=torch.float16, device=device)
    q = stand_in.expand(batch, heads, seq_q, 16)
    k = stand_in.expand(batch, heads, seq_k, 16)
    return check_attention(q, k, k, causal=causal, window=window, key_mask=key_mask,
                           attn_mask=attn_mask)  # fmt: skip


# --------------------------------------------------------------------------- masks


def allowed_mask(p: AttnProblem) -> Tensor:
    """Bool (B, Hq, Nq, Nk) mask of the (query, key) pairs a DENSE problem may attend.

    Combines causal alignment, window, key_mask and attn_mask (a float mask excludes exactly
    its -inf entries). On p.q's device; may be a broadcast (stride-0) view.
    """
    if p.varlen:
        raise ValueError(
            "safeattn: allowed_mask() needs a dense problem, got a varlen one.\n"
            "HINT: split it first with sequence_problems(p)."
        )
    device = p.q.device
    rows = torch.arange(p.seq_q, device=device)[:, None]
    cols = torch.arange(p.seq_k, device=device)[None, :]
    diagonal = rows + (p.seq_k - p.seq_q if p.bottom_right else 0)
    allowed = torch.ones(p.seq_q, p.seq_k, dtype=torch.bool, device=device)
    if p.window_left >= 0:
        allowed = allowed & (cols >= diagonal - p.window_left)
    if p.window_right >= 0:
        allowed = allowed & (cols <= diagonal + p.window_right)
    mask = allowed.expand(p.batch, p.heads_q, p.seq_q, p.seq_k)
    if p.key_mask is not None:
        mask = mask & p.key_mask[:, None, None, :]
    if p.attn_mask is not None:
        if p.attn_mask.dtype == torch.bool:
            mask = mask & p.attn_mask
        else:
            mask = mask & (p.attn_mask != float("-inf"))
    return mask


@dataclass(frozen=True)
class SequencePart:
    """One sequence of a varlen problem, as a dense problem of batch 1."""

    rows: slice  # its token range in the packed q
    keys: slice  # its token range in the packed k / v
    problem: AttnProblem  # q (1, Hq, Lq, D), k/v (1, Hkv, Lk, D): views of the packed tensors


def sequence_problems(p: AttnProblem) -> list[SequencePart]:
    """Split a varlen problem into one dense problem per sequence (zero-length ones included).

    The bottom-right alignment is per sequence, as in FlashAttention.
    """
    if not p.varlen:
        raise ValueError(
            "safeattn: sequence_problems() needs a varlen problem.\n"
            "HINT: a dense problem is already one problem; use allowed_mask(p)."
        )
    cu_q = p.cu_seqlens_q.tolist()
    cu_k = p.cu_seqlens_k.tolist()
    parts = []
    for b in range(p.batch):
        rows, keys = slice(cu_q[b], cu_q[b + 1]), slice(cu_k[b], cu_k[b + 1])
        sub = dataclasses.replace(
            p,
            q=p.q[rows].transpose(0, 1).unsqueeze(0),
            k=p.k[keys].transpose(0, 1).unsqueeze(0),
            v=p.v[keys].transpose(0, 1).unsqueeze(0),
            varlen=False,
            batch=1,
            seq_q=rows.stop - rows.start,
            seq_k=keys.stop - keys.start,
            cu_seqlens_q=None,
            cu_seqlens_k=None,
        )
        parts.append(SequencePart(rows, keys, sub))
    return parts
