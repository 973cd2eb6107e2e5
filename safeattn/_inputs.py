"""Validation and normalisation of every attention argument, in one place.

Every public entry point (``safeattn.attention``, ``safeattn.varlen_attention``,
``safeattn.reference``) calls :func:`check_attention` or :func:`check_varlen` first thing.
They raise ``TypeError`` (wrong type or dtype) or ``ValueError`` (wrong shape, value or
device) with a multi-line message that names the argument, shows the shapes, dtypes and
devices involved and ends with a ``HINT:`` line; nothing downstream asserts on user input.

The result is an :class:`AttnProblem`: the tensors plus every normalised fact a kernel or the
reference needs (sizes, the diagonal alignment, the window with causality folded in, the
expanded masks, the scale).

Masking semantics (DESIGN.md). Row ``i`` of a (sequence of) ``Nq`` queries against ``Nk``
keys has the diagonal offset ``off = 0`` (top-left, PyTorch's ``is_causal``) or
``off = Nk - Nq`` (bottom-right, FlashAttention >= 2.1; per sequence for varlen). Key ``j`` is
allowed for query ``i`` iff::

    (left  < 0 or i + off - left <= j)  and  (right < 0 or j <= i + off + right)
    and key_mask[b, j]  and  attn_mask[b, h, i, j] (bool: True; float: not -inf)
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import operator
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

KERNEL_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256
CAUSAL_VALUES = (False, True, "top_left", "bottom_right")


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
    return_lse: bool
    deterministic: bool


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


# --------------------------------------------------------------------------- messages


def _describe(t: Tensor) -> str:
    return f"shape={tuple(t.shape)}, dtype={t.dtype}, device={t.device}"


def _error(kind: type[Exception], what: str, facts: dict[str, str], hint: str) -> Exception:
    """A multi-line error: what is wrong, the facts involved, and how to fix it."""
    lines = [f"safeattn: {what}"]
    lines += [f"  {name}: {text}" for name, text in facts.items()]
    lines.append(f"HINT: {hint}")
    return kind("\n".join(lines))


def _qkv_facts(q: Tensor, k: Tensor, v: Tensor) -> dict[str, str]:
    return {"q": _describe(q), "k": _describe(k), "v": _describe(v)}


# --------------------------------------------------------------------------- shared checks


def _check_qkv_types(q: Any, k: Any, v: Any, allow_float64: bool) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor):
            raise _error(
                TypeError,
                f"`{name}` must be a torch.Tensor, got {type(x).__name__}.",
                {name: repr(x)[:80]},
                f"pass `{name}` as a tensor, e.g. torch.as_tensor({name}, dtype=torch.float16).",
            )
    allowed = KERNEL_DTYPES + ((torch.float64,) if allow_float64 else ())
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dtype not in allowed:
            raise _error(
                TypeError,
                f"`{name}` has dtype {x.dtype}, which is not supported.",
                _qkv_facts(q, k, v) | {"supported": ", ".join(map(str, allowed))},
                f"cast with `{name}.to(torch.bfloat16)` (or float16/float32)"
                + ("" if allow_float64 else "; float64 is only supported by safeattn.reference")
                + ".",
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise _error(
            TypeError,
            "`q`, `k` and `v` must have the same dtype.",
            _qkv_facts(q, k, v),
            "cast all three to one dtype, e.g. `k = k.to(q.dtype); v = v.to(q.dtype)`.",
        )
    if not (q.device == k.device == v.device):
        raise _error(
            ValueError,
            "`q`, `k` and `v` must be on the same device.",
            _qkv_facts(q, k, v),
            "move them with `k = k.to(q.device); v = v.to(q.device)`.",
        )


def _check_heads_and_dim(q: Tensor, k: Tensor, v: Tensor, head_axis: int) -> None:
    """Common shape rules once the layout is known (head_axis: 1 dense, 1 varlen)."""
    if k.shape != v.shape:
        raise _error(
            ValueError,
            "`k` and `v` must have the same shape.",
            _qkv_facts(q, k, v),
            "keys and values come in pairs: same batch, heads, length and head dim.",
        )
    head_dim = q.shape[-1]
    if k.shape[-1] != head_dim:
        raise _error(
            ValueError,
            f"head dim mismatch: `q` has D={head_dim}, `k`/`v` have D={k.shape[-1]}.",
            _qkv_facts(q, k, v),
            "the last dimension of q, k and v must be equal (v with another D is not supported).",
        )
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise _error(
            ValueError,
            f"head dim D={head_dim} of `q` is outside 1..{MAX_HEAD_DIM}.",
            _qkv_facts(q, k, v),
            f"split heads so that D <= {MAX_HEAD_DIM}.",
        )
    heads_q, heads_kv = q.shape[head_axis], k.shape[head_axis]
    if heads_kv < 1 or heads_q % heads_kv != 0:
        raise _error(
            ValueError,
            f"the number of query heads of `q` (Hq={heads_q}) must be a multiple of the "
            f"number of key/value heads of `k` (Hkv={heads_kv}).",
            _qkv_facts(q, k, v),
            "for GQA/MQA each group of Hq // Hkv query heads shares one kv head; "
            "check which axis holds the heads (dense layout is (B, H, N, D)).",
        )


def _check_causal(causal: Any) -> tuple[bool, bool]:
    """-> (causal, bottom_right alignment)."""
    if isinstance(causal, bool):
        return causal, False
    if isinstance(causal, str) and causal in ("top_left", "bottom_right"):
        return True, causal == "bottom_right"
    raise _error(
        TypeError if not isinstance(causal, str) else ValueError,
        f"`causal` must be one of {CAUSAL_VALUES}, got {causal!r}.",
        {"causal": f"{causal!r} ({type(causal).__name__})"},
        'use True / "top_left" (PyTorch is_causal: row i sees keys <= i) or "bottom_right" '
        "(FlashAttention >= 2.1: the last query sees the last key).",
    )


def _check_window(window: Any, causal: bool) -> tuple[int, int]:
    """-> (left, right), -1 = unbounded, causality folded into right."""
    if window is None:
        left, right = -1, -1
    else:
        is_pair = isinstance(window, (tuple, list)) and len(window) == 2
        if not is_pair or not all(isinstance(w, int) and not isinstance(w, bool) for w in window):
            raise _error(
                TypeError,
                f"`window` must be None or a pair of ints (left, right), got {window!r}.",
                {"window": f"{window!r} ({type(window).__name__})"},
                "pass e.g. window=(256, 0) for 256 keys of left context; -1 means unbounded.",
            )
        left, right = window
        if left < -1 or right < -1:
            raise _error(
                ValueError,
                f"`window` values must be >= -1, got {window!r}.",
                {"window": repr(window)},
                "use -1 for an unbounded side, a non-negative count of keys otherwise.",
            )
    if causal:
        # Causal means "no key right of the diagonal": it caps the right side at 0.
        right = 0
    return left, right


def _check_scale(scale: Any, head_dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise _error(
            TypeError,
            f"`scale` must be None or a Python float, got {type(scale).__name__}.",
            {"scale": repr(scale)[:80]},
            "pass a float such as 1 / math.sqrt(D) (use float(t) for a 0-d tensor).",
        )
    if not math.isfinite(scale):
        raise _error(
            ValueError,
            f"`scale` must be finite, got {scale!r}.",
            {"scale": repr(scale)},
            "pass a finite float; None gives the default 1 / sqrt(D).",
        )
    return float(scale)


def _check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _error(
            TypeError,
            f"`{name}` must be a bool, got {type(value).__name__}.",
            {name: repr(value)[:80]},
            f"pass {name}=True or {name}=False.",
        )
    return value


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
    return_lse: bool = False,
    deterministic: bool = False,
    allow_float64: bool = False,
) -> AttnProblem:
    """Validate a dense call: q (B, Hq, Nq, D), k/v (B, Hkv, Nk, D) -> AttnProblem.

    key_mask: (B, Nk) bool, True = may attend. attn_mask: bool (True = attend) or additive
    float, broadcastable to (B, Hq, Nq, Nk). Raises TypeError / ValueError (see module doc).
    """
    _check_qkv_types(q, k, v, allow_float64)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 4:
            raise _error(
                ValueError,
                f"`{name}` must be 4-D (B, H, N, D), got {x.dim()}-D.",
                _qkv_facts(q, k, v),
                "for a (B, N, H, D) tensor pass x.transpose(1, 2) (no copy needed); "
                "for packed (total, H, D) sequences use safeattn.varlen_attention.",
            )
    if k.shape[0] != q.shape[0] or v.shape[0] != q.shape[0]:
        raise _error(
            ValueError,
            f"batch mismatch: `q` has B={q.shape[0]}, `k` B={k.shape[0]}, `v` B={v.shape[0]}.",
            _qkv_facts(q, k, v),
            "q, k and v must share the batch dimension (dim 0).",
        )
    _check_heads_and_dim(q, k, v, head_axis=1)
    batch, heads_q, seq_q, head_dim = q.shape
    heads_kv, seq_k = k.shape[1], k.shape[2]

    is_causal, bottom_right = _check_causal(causal)
    left, right = _check_window(window, is_causal)

    if key_mask is not None:
        if not isinstance(key_mask, Tensor):
            raise _error(
                TypeError,
                f"`key_mask` must be a bool tensor or None, got {type(key_mask).__name__}.",
                {"key_mask": repr(key_mask)[:80]},
                "pass a (B, Nk) torch.bool tensor, True = the key may be attended.",
            )
        if key_mask.dtype != torch.bool:
            raise _error(
                TypeError,
                f"`key_mask` must have dtype torch.bool, got {key_mask.dtype}.",
                {"key_mask": _describe(key_mask), "k": _describe(k)},
                "pass `key_mask.bool()` with True = the key may be attended (like Hugging Face "
                "attention_mask; the opposite of nn.MultiheadAttention's key_padding_mask, "
                "for which pass `~key_padding_mask`).",
            )
        if tuple(key_mask.shape) != (batch, seq_k):
            raise _error(
                ValueError,
                f"`key_mask` must have shape (B, Nk) = {(batch, seq_k)}, "
                f"got {tuple(key_mask.shape)}.",
                {"key_mask": _describe(key_mask), "q": _describe(q), "k": _describe(k)},
                "key_mask has one entry per (batch element, key); for per-query or per-head "
                "masks use attn_mask.",
            )
        if key_mask.device != q.device:
            raise _error(
                ValueError,
                "`key_mask` must be on the same device as `q`.",
                {"key_mask": _describe(key_mask), "q": _describe(q)},
                "move it with `key_mask = key_mask.to(q.device)`.",
            )

    expanded_mask = None
    if attn_mask is not None:
        if not isinstance(attn_mask, Tensor):
            raise _error(
                TypeError,
                f"`attn_mask` must be a tensor or None, got {type(attn_mask).__name__}.",
                {"attn_mask": repr(attn_mask)[:80]},
                "pass a bool tensor (True = attend) or an additive float tensor "
                "broadcastable to (B, Hq, Nq, Nk).",
            )
        if attn_mask.dtype != torch.bool and not attn_mask.dtype.is_floating_point:
            raise _error(
                TypeError,
                f"`attn_mask` must be bool or floating point, got {attn_mask.dtype}.",
                {"attn_mask": _describe(attn_mask), "q": _describe(q)},
                "use `attn_mask.bool()` (True = attend) or an additive float mask "
                "(0 = attend, -inf = excluded).",
            )
        if attn_mask.device != q.device:
            raise _error(
                ValueError,
                "`attn_mask` must be on the same device as `q`.",
                {"attn_mask": _describe(attn_mask), "q": _describe(q)},
                "move it with `attn_mask = attn_mask.to(q.device)`.",
            )
        if attn_mask.dtype.is_floating_point and attn_mask.requires_grad:
            raise _error(
                ValueError,
                "`attn_mask` requires grad, but no gradient flows to attn_mask in v1.",
                {"attn_mask": _describe(attn_mask) + ", requires_grad=True"},
                "pass `attn_mask.detach()`; a learnable bias is not supported yet.",
            )
        target = (batch, heads_q, seq_q, seq_k)
        try:
            if attn_mask.dim() > 4:
                raise RuntimeError("more than 4 dims")
            expanded_mask = attn_mask.expand(target)
        except RuntimeError:
            raise _error(
                ValueError,
                f"`attn_mask` of shape {tuple(attn_mask.shape)} is not broadcastable to "
                f"(B, Hq, Nq, Nk) = {target}.",
                {"attn_mask": _describe(attn_mask)} | _qkv_facts(q, k, v),
                "give attn_mask size 1 or the full size on each of (B, Hq, Nq, Nk), "
                "e.g. (Nq, Nk) or (B, 1, Nq, Nk).",
            ) from None

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
        scale=_check_scale(scale, head_dim),
        return_lse=_check_flag("return_lse", return_lse),
        deterministic=_check_flag("deterministic", deterministic),
    )


# --------------------------------------------------------------------------- varlen


# Checked cu_seqlens values, reused while the *same* tensor object comes back with an
# unchanged version counter (the rule of blockmask's summary cache): a model passes one
# cu_seqlens to every layer, and each read is a host sync after which the GPU idles while
# the rest of the call is prepared. Only values that passed the checks are stored.
_CU_SEQLENS_CACHE: OrderedDict[tuple[int, int], tuple] = OrderedDict()
_CU_SEQLENS_CACHE_SIZE = 16


def _cached_cu_seqlens(cu: Tensor, total: int) -> list[int] | None:
    """The checked values of ``cu`` (for ``total`` tokens) if this very tensor, unmodified,
    was checked before; else None."""
    hit = _CU_SEQLENS_CACHE.get((id(cu), total))
    if hit is None:
        return None
    ref, version, values = hit
    if ref() is not cu or version != cu._version:
        return None
    _CU_SEQLENS_CACHE.move_to_end((id(cu), total))
    return list(values)


def _remember_cu_seqlens(cu: Tensor, total: int, values: list[int]) -> None:
    _CU_SEQLENS_CACHE[(id(cu), total)] = (weakref.ref(cu), cu._version, tuple(values))
    while len(_CU_SEQLENS_CACHE) > _CU_SEQLENS_CACHE_SIZE:
        _CU_SEQLENS_CACHE.popitem(last=False)


def clear_cu_seqlens_cache() -> None:
    """Forget every checked ``cu_seqlens`` (the next call reads and checks it again)."""
    _CU_SEQLENS_CACHE.clear()


def _check_cu_seqlens(
    name: str, cu: Any, total: int, total_name: str, q: Tensor
) -> list[int] | None:
    """Check one cu_seqlens tensor; returns its values (one host read, accepted, and none
    while the same tensor comes back unmodified: identity and version counter, so an
    in-place write is seen but a write through ``.data`` is not), or None inside a compiled
    graph or a CUDA graph capture, where reading them would need a host sync (and, in a
    capture, would see capture-time values, not those of a replay): only the type, shape
    and device are checked there."""
    if not isinstance(cu, Tensor):
        raise _error(
            TypeError,
            f"`{name}` must be an int32 tensor, got {type(cu).__name__}.",
            {name: repr(cu)[:80]},
            f"pass `{name} = torch.tensor([0, len0, len0 + len1, ...], dtype=torch.int32)`.",
        )
    if cu.dtype != torch.int32:
        raise _error(
            TypeError,
            f"`{name}` must have dtype torch.int32, got {cu.dtype}.",
            {name: _describe(cu)},
            f"cast with `{name}.to(torch.int32)` (FlashAttention's convention).",
        )
    if cu.dim() != 1 or cu.numel() < 1:
        raise _error(
            ValueError,
            f"`{name}` must be 1-D with B + 1 >= 1 entries, got shape {tuple(cu.shape)}.",
            {name: _describe(cu)},
            f"{name} holds the cumulative sequence starts: [0, len0, len0 + len1, ...].",
        )
    if cu.device != q.device:
        raise _error(
            ValueError,
            f"`{name}` must be on the same device as `q`.",
            {name: _describe(cu), "q": _describe(q)},
            f"move it with `{name} = {name}.to(q.device)`.",
        )
    if torch.compiler.is_compiling() or capturing(cu.device):
        return None
    cached = _cached_cu_seqlens(cu, total)
    if cached is not None:
        return cached
    values = cu.tolist()
    facts = {name: f"{_describe(cu)}, values={values[:12]}{' ...' if len(values) > 12 else ''}"}
    if values[0] != 0:
        raise _error(
            ValueError,
            f"`{name}` must start at 0, got {values[0]}.",
            facts,
            f"prepend a 0: {name} = [0, len0, len0 + len1, ...].",
        )
    if any(b < a for a, b in itertools.pairwise(values)):
        raise _error(
            ValueError,
            f"`{name}` must be non-decreasing (sequence lengths >= 0).",
            facts,
            "build it with `torch.nn.functional.pad(lengths.cumsum(0), (1, 0))`; "
            "zero-length sequences are fine, negative ones are not.",
        )
    if values[-1] != total:
        raise _error(
            ValueError,
            f"`{name}` ends at {values[-1]}, but {total_name} holds {total} tokens.",
            facts | {total_name: f"total tokens = {total}"},
            f"the last entry of {name} must equal {total_name}.shape[0].",
        )
    _remember_cu_seqlens(cu, total, values)
    return values


def _check_max_seqlen(name: str, value: Any, lengths: list[int], cu_name: str) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError("bool is not a length")
        max_len = operator.index(value)
    except TypeError:
        raise _error(
            TypeError,
            f"`{name}` must be an int, got {type(value).__name__}.",
            {name: repr(value)[:80]},
            f"pass `{name} = int(max sequence length)`.",
        ) from None
    longest = max(lengths, default=0)
    if max_len < 0 or max_len < longest:
        raise _error(
            ValueError,
            f"`{name}`={max_len} is smaller than the longest sequence ({longest}) or negative.",
            {name: str(max_len), cu_name: f"sequence lengths = {lengths[:12]}"},
            f"pass `{name} = int(({cu_name}[1:] - {cu_name}[:-1]).max())`.",
        )
    return max_len


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
    return_lse: bool = False,
    deterministic: bool = False,
    allow_float64: bool = False,
) -> AttnProblem:
    """Validate a packed varlen call: q (total_q, Hq, D), k/v (total_k, Hkv, D),
    cu_seqlens_* int32 (B + 1,) -> AttnProblem (varlen=True, seq_q/seq_k = max lengths).

    Reads cu_seqlens on the host once to check its values (not again while the same tensor
    object comes back unmodified: see :func:`_check_cu_seqlens`), except inside a compiled graph
    (``torch.compile``) or a CUDA graph capture, where that would be a host sync: there the
    values (and max_seqlen_q/k as bounds of the lengths) are trusted.
    """
    _check_qkv_types(q, k, v, allow_float64)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dim() != 3:
            raise _error(
                ValueError,
                f"`{name}` must be 3-D packed (total_tokens, H, D) for varlen, got {x.dim()}-D.",
                _qkv_facts(q, k, v),
                "concatenate the sequences along dim 0; for padded (B, H, N, D) batches use "
                "safeattn.attention with key_mask.",
            )
    _check_heads_and_dim(q, k, v, head_axis=1)
    cu_q = _check_cu_seqlens("cu_seqlens_q", cu_seqlens_q, q.shape[0], "q", q)
    cu_k = _check_cu_seqlens("cu_seqlens_k", cu_seqlens_k, k.shape[0], "k", q)
    if cu_seqlens_q.shape[0] != cu_seqlens_k.shape[0]:
        raise _error(
            ValueError,
            f"`cu_seqlens_q` and `cu_seqlens_k` must have the same length (B + 1), "
            f"got {cu_seqlens_q.shape[0]} and {cu_seqlens_k.shape[0]}.",
            {"cu_seqlens_q": _describe(cu_seqlens_q), "cu_seqlens_k": _describe(cu_seqlens_k)},
            "every sequence has a query part and a key part (either may be empty).",
        )
    lengths_q = [b - a for a, b in itertools.pairwise(cu_q)] if cu_q is not None else []
    lengths_k = [b - a for a, b in itertools.pairwise(cu_k)] if cu_k is not None else []
    max_q = _check_max_seqlen("max_seqlen_q", max_seqlen_q, lengths_q, "cu_seqlens_q")
    max_k = _check_max_seqlen("max_seqlen_k", max_seqlen_k, lengths_k, "cu_seqlens_k")

    is_causal, bottom_right = _check_causal(causal)
    left, right = _check_window(window, is_causal)
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
        scale=_check_scale(scale, q.shape[2]),
        return_lse=_check_flag("return_lse", return_lse),
        deterministic=_check_flag("deterministic", deterministic),
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
            raise _error(
                TypeError,
                f"`{name}` must be an int, got {type(n).__name__}.",
                {name: repr(n)[:80]},
                "pass the query and key lengths Nq, Nk of the calls the mask will serve.",
            )
        if n < 0:
            raise _error(ValueError, f"`{name}` must be >= 0, got {n}.", {name: repr(n)},
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


def check_block_mask_use(
    block_mask: Any, q: Tensor, k: Tensor, causal: Any, window: Any, key_mask: Any,
    attn_mask: Any,
) -> None:  # fmt: skip
    """``attention(..., block_mask=bm)``: bm is a BlockMask for these lengths, and no other
    mask argument competes with it."""
    from .blockmask import BlockMask

    if not isinstance(block_mask, BlockMask):
        raise _error(
            TypeError,
            f"`block_mask` must be a safeattn BlockMask, got {type(block_mask).__name__}.",
            {"block_mask": repr(block_mask)[:80]},
            "build it with safeattn.block_mask(Nq, Nk, causal=..., key_mask=...).",
        )
    given = [name for name, value, default in (
        ("causal", causal, False), ("window", window, None), ("key_mask", key_mask, None),
        ("attn_mask", attn_mask, None)) if value is not default]  # fmt: skip
    if given:
        raise _error(
            ValueError,
            f"`block_mask` was given together with {', '.join(given)}.",
            {"block_mask": repr(block_mask)},
            "describe the whole mask in safeattn.block_mask(...) and pass only block_mask=.",
        )
    dense = isinstance(q, Tensor) and isinstance(k, Tensor) and q.dim() == 4 and k.dim() == 4
    if dense and (q.shape[2], k.shape[2]) != (block_mask.seq_q, block_mask.seq_k):
        raise _error(
            ValueError,
            f"`block_mask` was built for (Nq, Nk) = {(block_mask.seq_q, block_mask.seq_k)}, "
            f"but q and k have Nq = {q.shape[2]}, Nk = {k.shape[2]}.",
            {"block_mask": repr(block_mask), "q": _describe(q), "k": _describe(k)},
            "build one block mask per pair of lengths.",
        )


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
