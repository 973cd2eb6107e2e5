"""The checks of single attention arguments, and the error messages they raise.

Each check raises ``TypeError`` (wrong type or dtype) or ``ValueError`` (wrong shape, value or
device) with a multi-line message (:func:`error`): what is wrong, the shapes, dtypes and
devices involved, and a ``HINT:`` line. :mod:`safeattn._inputs` combines them into the checks
of a whole call; the values of ``cu_seqlens`` are checked in :mod:`safeattn._cu_seqlens`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

KERNEL_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 256
CAUSAL_VALUES = (False, True, "top_left", "bottom_right")


# --------------------------------------------------------------------------- messages


def describe(t: Tensor) -> str:
    return f"shape={tuple(t.shape)}, dtype={t.dtype}, device={t.device}"


def error(kind: type[Exception], what: str, facts: dict[str, str], hint: str) -> Exception:
    """A multi-line error: what is wrong, the facts involved, and how to fix it."""
    lines = [f"safeattn: {what}"]
    lines += [f"  {name}: {text}" for name, text in facts.items()]
    lines.append(f"HINT: {hint}")
    return kind("\n".join(lines))


def qkv_facts(q: Tensor, k: Tensor, v: Tensor) -> dict[str, str]:
    return {"q": describe(q), "k": describe(k), "v": describe(v)}


# --------------------------------------------------------------------------- shared checks


def check_qkv_types(q: Any, k: Any, v: Any, allow_float64: bool) -> None:
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, Tensor):
            raise error(
                TypeError,
                f"`{name}` must be a torch.Tensor, got {type(x).__name__}.",
                {name: repr(x)[:80]},
                f"pass `{name}` as a tensor, e.g. torch.as_tensor({name}, dtype=torch.float16).",
            )
    allowed = KERNEL_DTYPES + ((torch.float64,) if allow_float64 else ())
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.dtype not in allowed:
            raise error(
                TypeError,
                f"`{name}` has dtype {x.dtype}, which is not supported.",
                qkv_facts(q, k, v) | {"supported": ", ".join(map(str, allowed))},
                f"cast with `{name}.to(torch.bfloat16)` (or float16/float32)"
                + ("" if allow_float64 else "; float64 is only supported by safeattn.reference")
                + ".",
            )
    if not (q.dtype == k.dtype == v.dtype):
        raise error(
            TypeError,
            "`q`, `k` and `v` must have the same dtype.",
            qkv_facts(q, k, v),
            "cast all three to one dtype, e.g. `k = k.to(q.dtype); v = v.to(q.dtype)`.",
        )
    if not (q.device == k.device == v.device):
        raise error(
            ValueError,
            "`q`, `k` and `v` must be on the same device.",
            qkv_facts(q, k, v),
            "move them with `k = k.to(q.device); v = v.to(q.device)`.",
        )


def check_heads_and_dim(q: Tensor, k: Tensor, v: Tensor, head_axis: int) -> None:
    """Common shape rules once the layout is known (head_axis: 1 dense, 1 varlen)."""
    if k.shape != v.shape:
        raise error(
            ValueError,
            "`k` and `v` must have the same shape.",
            qkv_facts(q, k, v),
            "keys and values come in pairs: same batch, heads, length and head dim.",
        )
    head_dim = q.shape[-1]
    if k.shape[-1] != head_dim:
        raise error(
            ValueError,
            f"head dim mismatch: `q` has D={head_dim}, `k`/`v` have D={k.shape[-1]}.",
            qkv_facts(q, k, v),
            "the last dimension of q, k and v must be equal (v with another D is not supported).",
        )
    if not 1 <= head_dim <= MAX_HEAD_DIM:
        raise error(
            ValueError,
            f"head dim D={head_dim} of `q` is outside 1..{MAX_HEAD_DIM}.",
            qkv_facts(q, k, v),
            f"split heads so that D <= {MAX_HEAD_DIM}.",
        )
    heads_q, heads_kv = q.shape[head_axis], k.shape[head_axis]
    if heads_kv < 1 or heads_q % heads_kv != 0:
        raise error(
            ValueError,
            f"the number of query heads of `q` (Hq={heads_q}) must be a multiple of the "
            f"number of key/value heads of `k` (Hkv={heads_kv}).",
            qkv_facts(q, k, v),
            "for GQA/MQA each group of Hq // Hkv query heads shares one kv head; "
            "check which axis holds the heads (dense layout is (B, H, N, D)).",
        )


def check_causal(causal: Any) -> tuple[bool, bool]:
    """-> (causal, bottom_right alignment)."""
    if isinstance(causal, bool):
        return causal, False
    if isinstance(causal, str) and causal in ("top_left", "bottom_right"):
        return True, causal == "bottom_right"
    raise error(
        TypeError if not isinstance(causal, str) else ValueError,
        f"`causal` must be one of {CAUSAL_VALUES}, got {causal!r}.",
        {"causal": f"{causal!r} ({type(causal).__name__})"},
        'use True / "top_left" (PyTorch is_causal: row i sees keys <= i) or "bottom_right" '
        "(FlashAttention >= 2.1: the last query sees the last key).",
    )


def check_window(window: Any, causal: bool) -> tuple[int, int]:
    """-> (left, right), -1 = unbounded, causality folded into right."""
    if window is None:
        left, right = -1, -1
    else:
        is_pair = isinstance(window, (tuple, list)) and len(window) == 2
        if not is_pair or not all(isinstance(w, int) and not isinstance(w, bool) for w in window):
            raise error(
                TypeError,
                f"`window` must be None or a pair of ints (left, right), got {window!r}.",
                {"window": f"{window!r} ({type(window).__name__})"},
                "pass e.g. window=(256, 0) for 256 keys of left context; -1 means unbounded.",
            )
        left, right = window
        if left < -1 or right < -1:
            raise error(
                ValueError,
                f"`window` values must be >= -1, got {window!r}.",
                {"window": repr(window)},
                "use -1 for an unbounded side, a non-negative count of keys otherwise.",
            )
    if causal:
        # Causal means "no key right of the diagonal": it caps the right side at 0.
        right = 0
    return left, right


def check_scale(scale: Any, head_dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    _require_float("scale", scale, "None or a Python float",
                   "pass a float such as 1 / math.sqrt(D) (use float(t) for a 0-d tensor).")
    if not math.isfinite(scale):
        raise error(
            ValueError,
            f"`scale` must be finite, got {scale!r}.",
            {"scale": repr(scale)},
            "pass a finite float; None gives the default 1 / sqrt(D).",
        )
    return float(scale)


# Soft-capping computes cap·log2(e) and its reciprocal in float32 inside the kernels: both
# stay normal, finite numbers for caps in this range (a subnormal cap flushed to 0 would
# turn a 0 score into 0/0 = NaN).
SOFTCAP_RANGE = (1e-30, 1e30)


def check_softcap(softcap: Any) -> float:
    """``softcap``: None or 0.0 = off; else the cap of ``cap * tanh(score / cap)`` -> the cap
    as a float (0.0 = off)."""
    if softcap is None:
        return 0.0
    _require_float("softcap", softcap, "None or a Python float",
                   "pass a float such as 50.0 (Gemma 2's attention cap), or 0.0 / None for no "
                   "soft-capping (use float(t) for a 0-d tensor).")
    low, high = SOFTCAP_RANGE
    if softcap != 0 and not low <= softcap <= high:  # NaN fails every comparison
        raise error(
            ValueError,
            f"`softcap` must be 0 (off) or a finite positive number in [{low:g}, {high:g}], "
            f"got {softcap!r}.",
            {"softcap": repr(softcap)},
            "pass a positive cap (scores become cap * tanh(score / cap), e.g. 50.0), or 0.0 / "
            "None to switch soft-capping off.",
        )
    return float(softcap)


def check_dropout(dropout_p: Any) -> float:
    """``dropout_p``: the probability of dropping each (query, key) pair, in [0, 1)."""
    _require_float("dropout_p", dropout_p, "a Python float",
                   "pass a float such as 0.1 (0.0 = no dropout; use float(t) for a 0-d tensor).")
    if not 0.0 <= dropout_p < 1.0:  # NaN fails too
        raise error(
            ValueError,
            f"`dropout_p` must be in [0, 1), got {dropout_p!r}.",
            {"dropout_p": repr(dropout_p)},
            "pass the probability of dropping an attention weight, e.g. 0.1; 0.0 in eval.",
        )
    return float(dropout_p)


def _require_float(name: str, value: Any, expected: str, hint: str) -> None:
    """TypeError unless ``value`` is a Python int or float (a bool is not)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise error(
            TypeError,
            f"`{name}` must be {expected}, got {type(value).__name__}.",
            {name: repr(value)[:80]},
            hint,
        )


def check_flag(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise error(
            TypeError,
            f"`{name}` must be a bool, got {type(value).__name__}.",
            {name: repr(value)[:80]},
            f"pass {name}=True or {name}=False.",
        )
    return value


# --------------------------------------------------------------------------- masks


def check_key_mask(key_mask: Any, q: Tensor, k: Tensor, batch: int, seq_k: int) -> None:
    """``key_mask``: a (B, Nk) bool tensor on q's device."""
    if not isinstance(key_mask, Tensor):
        raise error(
            TypeError,
            f"`key_mask` must be a bool tensor or None, got {type(key_mask).__name__}.",
            {"key_mask": repr(key_mask)[:80]},
            "pass a (B, Nk) torch.bool tensor, True = the key may be attended.",
        )
    if key_mask.dtype != torch.bool:
        raise error(
            TypeError,
            f"`key_mask` must have dtype torch.bool, got {key_mask.dtype}.",
            {"key_mask": describe(key_mask), "k": describe(k)},
            "pass `key_mask.bool()` with True = the key may be attended (like Hugging Face "
            "attention_mask; the opposite of nn.MultiheadAttention's key_padding_mask, "
            "for which pass `~key_padding_mask`).",
        )
    if tuple(key_mask.shape) != (batch, seq_k):
        raise error(
            ValueError,
            f"`key_mask` must have shape (B, Nk) = {(batch, seq_k)}, got {tuple(key_mask.shape)}.",
            {"key_mask": describe(key_mask), "q": describe(q), "k": describe(k)},
            "key_mask has one entry per (batch element, key); for per-query or per-head "
            "masks use attn_mask.",
        )
    if key_mask.device != q.device:
        raise error(
            ValueError,
            "`key_mask` must be on the same device as `q`.",
            {"key_mask": describe(key_mask), "q": describe(q)},
            "move it with `key_mask = key_mask.to(q.device)`.",
        )


def check_attn_mask(
    attn_mask: Any, q: Tensor, k: Tensor, v: Tensor, target: tuple[int, int, int, int]
) -> Tensor:
    """``attn_mask``: bool or float, on q's device, broadcastable to ``target``
    (B, Hq, Nq, Nk). Returns the expanded view (a float mask that requires grad gets its
    gradient through it: the kernels' dBias, summed by autograd over broadcast axes)."""
    if not isinstance(attn_mask, Tensor):
        raise error(
            TypeError,
            f"`attn_mask` must be a tensor or None, got {type(attn_mask).__name__}.",
            {"attn_mask": repr(attn_mask)[:80]},
            "pass a bool tensor (True = attend) or an additive float tensor "
            "broadcastable to (B, Hq, Nq, Nk).",
        )
    if attn_mask.dtype != torch.bool and not attn_mask.dtype.is_floating_point:
        raise error(
            TypeError,
            f"`attn_mask` must be bool or floating point, got {attn_mask.dtype}.",
            {"attn_mask": describe(attn_mask), "q": describe(q)},
            "use `attn_mask.bool()` (True = attend) or an additive float mask "
            "(0 = attend, -inf = excluded).",
        )
    if attn_mask.device != q.device:
        raise error(
            ValueError,
            "`attn_mask` must be on the same device as `q`.",
            {"attn_mask": describe(attn_mask), "q": describe(q)},
            "move it with `attn_mask = attn_mask.to(q.device)`.",
        )
    try:
        if attn_mask.dim() > 4:
            raise RuntimeError("more than 4 dims")
        expanded_mask = attn_mask.expand(target)
    except RuntimeError:
        raise error(
            ValueError,
            f"`attn_mask` of shape {tuple(attn_mask.shape)} is not broadcastable to "
            f"(B, Hq, Nq, Nk) = {target}.",
            {"attn_mask": describe(attn_mask)} | qkv_facts(q, k, v),
            "give attn_mask size 1 or the full size on each of (B, Hq, Nq, Nk), "
            "e.g. (Nq, Nk) or (B, 1, Nq, Nk).",
        ) from None
    return expanded_mask


# --------------------------------------------------------------------------- block masks


def check_block_mask_use(
    block_mask: Any, q: Tensor, k: Tensor, causal: Any, window: Any, key_mask: Any,
    attn_mask: Any,
) -> None:  # fmt: skip
    """``attention(..., block_mask=bm)``: bm is a BlockMask for these lengths, and no other
    mask argument competes with it."""
    from .blockmask import BlockMask

    if not isinstance(block_mask, BlockMask):
        raise error(
            TypeError,
            f"`block_mask` must be a safeattn BlockMask, got {type(block_mask).__name__}.",
            {"block_mask": repr(block_mask)[:80]},
            "build it with safeattn.block_mask(Nq, Nk, causal=..., key_mask=...).",
        )
    given = [name for name, value, default in (
        ("causal", causal, False), ("window", window, None), ("key_mask", key_mask, None),
        ("attn_mask", attn_mask, None)) if value is not default]  # fmt: skip
    if given:
        raise error(
            ValueError,
            f"`block_mask` was given together with {', '.join(given)}.",
            {"block_mask": repr(block_mask)},
            "describe the whole mask in safeattn.block_mask(...) and pass only block_mask=.",
        )
    dense = isinstance(q, Tensor) and isinstance(k, Tensor) and q.dim() == 4 and k.dim() == 4
    if dense and (q.shape[2], k.shape[2]) != (block_mask.seq_q, block_mask.seq_k):
        raise error(
            ValueError,
            f"`block_mask` was built for (Nq, Nk) = {(block_mask.seq_q, block_mask.seq_k)}, "
            f"but q and k have Nq = {q.shape[2]}, Nk = {k.shape[2]}.",
            {"block_mask": repr(block_mask), "q": describe(q), "k": describe(k)},
            "build one block mask per pair of lengths.",
        )
