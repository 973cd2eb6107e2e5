"""The values of ``cu_seqlens``: checked with one host read, and remembered while the same
tensor comes back unmodified (a model passes one ``cu_seqlens`` to every layer).

Used by :func:`safeattn._inputs.check_varlen`, which decides whether the values may be read
at all (not inside a compiled graph or a CUDA graph capture).
"""

from __future__ import annotations

import itertools
import operator
import weakref
from collections import OrderedDict
from typing import Any

import torch
from torch import Tensor

from ._input_checks import describe, error

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


def check_cu_seqlens(
    name: str, cu: Any, total: int, total_name: str, q: Tensor, read_values: bool
) -> list[int] | None:
    """Check one cu_seqlens tensor; returns its values (one host read, accepted, and none
    while the same tensor comes back unmodified: identity and version counter, so an
    in-place write is seen but a write through ``.data`` is not), or None when
    ``read_values`` is False (inside a compiled graph or a CUDA graph capture, where reading
    them would need a host sync and, in a capture, would see capture-time values, not those
    of a replay): only the type, shape and device are checked then."""
    if not isinstance(cu, Tensor):
        raise error(
            TypeError,
            f"`{name}` must be an int32 tensor, got {type(cu).__name__}.",
            {name: repr(cu)[:80]},
            f"pass `{name} = torch.tensor([0, len0, len0 + len1, ...], dtype=torch.int32)`.",
        )
    if cu.dtype != torch.int32:
        raise error(
            TypeError,
            f"`{name}` must have dtype torch.int32, got {cu.dtype}.",
            {name: describe(cu)},
            f"cast with `{name}.to(torch.int32)` (FlashAttention's convention).",
        )
    if cu.dim() != 1 or cu.numel() < 1:
        raise error(
            ValueError,
            f"`{name}` must be 1-D with B + 1 >= 1 entries, got shape {tuple(cu.shape)}.",
            {name: describe(cu)},
            f"{name} holds the cumulative sequence starts: [0, len0, len0 + len1, ...].",
        )
    if cu.device != q.device:
        raise error(
            ValueError,
            f"`{name}` must be on the same device as `q`.",
            {name: describe(cu), "q": describe(q)},
            f"move it with `{name} = {name}.to(q.device)`.",
        )
    if not read_values:
        return None
    cached = _cached_cu_seqlens(cu, total)
    if cached is not None:
        return cached
    values = cu.tolist()
    facts = {name: f"{describe(cu)}, values={values[:12]}{' ...' if len(values) > 12 else ''}"}
    if values[0] != 0:
        raise error(
            ValueError,
            f"`{name}` must start at 0, got {values[0]}.",
            facts,
            f"prepend a 0: {name} = [0, len0, len0 + len1, ...].",
        )
    if any(b < a for a, b in itertools.pairwise(values)):
        raise error(
            ValueError,
            f"`{name}` must be non-decreasing (sequence lengths >= 0).",
            facts,
            "build it with `torch.nn.functional.pad(lengths.cumsum(0), (1, 0))`; "
            "zero-length sequences are fine, negative ones are not.",
        )
    if values[-1] != total:
        raise error(
            ValueError,
            f"`{name}` ends at {values[-1]}, but {total_name} holds {total} tokens.",
            facts | {total_name: f"total tokens = {total}"},
            f"the last entry of {name} must equal {total_name}.shape[0].",
        )
    _remember_cu_seqlens(cu, total, values)
    return values


def check_max_seqlen(name: str, value: Any, lengths: list[int], cu_name: str) -> int:
    try:
        if isinstance(value, bool):
            raise TypeError("bool is not a length")
        max_len = operator.index(value)
    except TypeError:
        raise error(
            TypeError,
            f"`{name}` must be an int, got {type(value).__name__}.",
            {name: repr(value)[:80]},
            f"pass `{name} = int(max sequence length)`.",
        ) from None
    longest = max(lengths, default=0)
    if max_len < 0 or max_len < longest:
        raise error(
            ValueError,
            f"`{name}`={max_len} is smaller than the longest sequence ({longest}) or negative.",
            {name: str(max_len), cu_name: f"sequence lengths = {lengths[:12]}"},
            f"pass `{name} = int(({cu_name}[1:] - {cu_name}[:-1]).max())`.",
        )
    return max_len
