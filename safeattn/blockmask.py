"""Block masks: which (query block, key block) tiles a kernel must visit, and how.

Every mask source of a dense call — causal alignment, ``window``, ``key_mask`` and
``attn_mask`` (bool, or additive float whose -inf entries exclude) — is summarised per
(batch, query head, query block, key block) as one of::

    empty    no pair of the tile may attend: the kernels never load it
    full     every pair may attend and every row and key is in range: the kernels run the
             plain path (no element masks, no scan of V/K for excluded non-finite values)
    partial  anything else: element masks, and the excluded-value guard when a program's
             accumulator shows NaN/Inf (contract item 2; kernels/forward.py)

From that, compact per-row-block lists of the full and of the partial key blocks (a kernel
walks the full list, then the partial one), and their transpose per key block for the dK/dV
kernel — the idea of FlexAttention's ``BlockMask``, built here with a few vectorised torch
ops on the masks' device (no host synchronisation).

Additive masks: a tile whose float entries are all other than -inf is *full*, and the plain
path adds the bias too (it loads the bias tile but skips the -inf selection). An entry of
+inf or NaN is not an exclusion (contract item 3), so it propagates the same way on either path.

Sizes: the summary tile is :data:`BLOCK` (128) on a GPU, :data:`INTERPRETER_BLOCK` (32) under
Triton's interpreter, so that small CPU tests cross several tiles. Kernel blocks divide it.

Only calls with a ``key_mask`` or ``attn_mask`` need a summary: causal alignment and windows
alone are handled by the kernels' own index arithmetic, and ``varlen_attention`` runs one
program per sequence, so packed documents never share a tile.

Reuse. A model calls attention once per layer with the same mask:

- explicitly: ``bm = safeattn.block_mask(seq_q, seq_k, causal=True, key_mask=pad)`` once, then
  ``safeattn.attention(q, k, v, block_mask=bm)`` in every layer;
- implicitly: a summary is cached for the mask tensors it was built from, and reused while the
  *same* tensor objects (checked by identity, not address) come back with an unchanged
  version counter (an in-place write bumps it). A write through ``.data`` does not bump it:
  build a new mask instead.

CUDA graphs. Building a summary needs no host sync (only :meth:`BlockSummary.counts` reads
values back), so it can be recorded inside ``torch.cuda.graph``: a call with a
``key_mask``/``attn_mask`` inside a capture records its build (bypassing the cache), and
every replay summarises the values the mask tensors hold then. A :class:`BlockMask` built
before the capture is used as it was built; one built inside the captured region (once, for
every layer) is rebuilt on every replay.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from dataclasses import dataclass

import torch
from torch import Tensor

BLOCK = 128
INTERPRETER_BLOCK = 32
_CACHE_SIZE = 16


def block_size(device: torch.device) -> int:
    """The summary tile for a device: every shipped kernel config's blocks divide it."""
    from .kernels.launch import INTERPRET  # one reading of TRITON_INTERPRET for the package

    return INTERPRETER_BLOCK if INTERPRET or device.type != "cuda" else BLOCK


@dataclass(frozen=True, eq=False)
class BlockSummary:
    """Tile lists of one mask, int32 on the masks' device.

    ``Bm`` is 1 when no mask varies over the batch, else B; ``Hm`` is 1 when none varies over
    query heads, else Hq; nQB = cdiv(Nq, block_q), nKB = cdiv(Nk, block_k).

    kv_full_num, kv_part_num: (Bm, Hm, nQB) how many full / partial key blocks a row block has
    kv_full_idx, kv_part_idx: (Bm, Hm, nQB, nKB) their key-block indices, ascending, first
    q_full_num, q_part_num:   (Bm, Hm, nKB) the transpose, per key block
    q_full_idx, q_part_idx:   (Bm, Hm, nKB, nQB)
    """

    block_q: int
    block_k: int
    kv_full_num: Tensor
    kv_full_idx: Tensor
    kv_part_num: Tensor
    kv_part_idx: Tensor
    q_full_num: Tensor
    q_full_idx: Tensor
    q_part_num: Tensor
    q_part_idx: Tensor

    def counts(self) -> dict[str, int]:
        """Tiles per kind, summed over (Bm, Hm) — for tests and reports (synchronises)."""
        from ._inputs import capturing

        if capturing(self.kv_full_num.device):
            raise RuntimeError(
                "safeattn: BlockSummary.counts() reads the tile counts on the host, which "
                "cannot happen during CUDA graph capture (and they hold no values before a "
                "replay).\nHINT: call it outside the captured region, e.g. after a replay."
            )
        full = int(self.kv_full_num.sum())
        part = int(self.kv_part_num.sum())
        bm, hm, nqb, nkb = self.kv_full_idx.shape
        return {"full": full, "partial": part, "empty": bm * hm * nqb * nkb - full - part}


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _tiles_any_all(allowed: Tensor, bq: int, bk: int, nqb: int, nkb: int) -> tuple[Tensor, Tensor]:
    """(b, h, nq, nk) bool -> per-tile (any, all), each (b, h, nQB or 1, nKB or 1).

    A size-1 (broadcast) query or key axis stays size 1. Positions past the end are padded
    with False, so a tail tile is never *full*.
    """
    b, h, nq, nk = allowed.shape
    tq = nqb if nq > 1 else 1
    tk = nkb if nk > 1 else 1
    pq = tq * bq - nq if nq > 1 else 0
    pk = tk * bk - nk if nk > 1 else 0
    if pq or pk:
        padded = allowed.new_zeros(b, h, nq + pq, nk + pk)
        padded[:, :, :nq, :nk] = allowed
        allowed = padded
    tiles = allowed.reshape(b, h, tq, (nq + pq) // tq, tk, (nk + pk) // tk)
    any_ = tiles.any(dim=5).any(dim=3)
    all_ = tiles.all(dim=5).all(dim=3)
    return any_, all_


def _compact(mask: Tensor) -> Tensor:
    """The stored part of an expanded view: size 1 on every stride-0 (broadcast) axis."""
    index = tuple(slice(0, 1) if s == 0 else slice(None) for s in mask.stride())
    return mask[index]


def summarise(
    seq_q: int,
    seq_k: int,
    *,
    bottom_right: bool,
    window_left: int,
    window_right: int,
    key_mask: Tensor | None,
    attn_mask: Tensor | None,
    block_q: int,
    block_k: int,
    device: torch.device,
) -> BlockSummary:
    """Build the tile lists of one dense mask (see the module docstring).

    Args:
        seq_q, seq_k: Nq, Nk.
        bottom_right, window_left, window_right: as normalised by ``safeattn._inputs``
            (causality folded into ``window_right = 0``; -1 = unbounded).
        key_mask: (B, Nk) bool, True = may attend, or None.
        attn_mask: bool or float view expanded to (B, Hq, Nq, Nk) (stride 0 where it
            broadcasts), or None.
        block_q, block_k: the tile sizes.
    """
    nqb, nkb = max(_cdiv(seq_q, block_q), 1), max(_cdiv(seq_k, block_k), 1)
    diag = seq_k - seq_q if bottom_right else 0
    m0 = torch.arange(nqb, device=device) * block_q
    n0 = torch.arange(nkb, device=device) * block_k
    m1 = torch.clamp(m0 + block_q, max=seq_q) - 1  # last row in range
    n1 = torch.clamp(n0 + block_k, max=seq_k) - 1
    # Causal / window, exact per tile: the band i + diag - left <= j <= i + diag + right
    # meets the tile iff it meets it on each side (left, right >= 0 keep the band non-empty).
    any_ = (m0 < seq_q)[:, None] & (n0 < seq_k)[None, :]
    all_ = (m0 + block_q <= seq_q)[:, None] & (n0 + block_k <= seq_k)[None, :]
    if window_right >= 0:
        any_ = any_ & (n0[None, :] <= m1[:, None] + diag + window_right)
        all_ = all_ & (n1[None, :] <= m0[:, None] + diag + window_right)
    if window_left >= 0:
        any_ = any_ & (n1[None, :] >= m0[:, None] + diag - window_left)
        all_ = all_ & (n0[None, :] >= m1[:, None] + diag - window_left)
    any_, all_ = any_[None, None], all_[None, None]
    if key_mask is not None:
        k_any, k_all = _tiles_any_all(key_mask[:, None, None, :], block_q, block_k, nqb, nkb)
        any_, all_ = any_ & k_any, all_ & k_all
    if attn_mask is not None:
        stored = _compact(attn_mask)
        allowed = stored if stored.dtype == torch.bool else stored != float("-inf")
        a_any, a_all = _tiles_any_all(allowed, block_q, block_k, nqb, nkb)
        any_, all_ = any_ & a_any, all_ & a_all
    shape = (max(any_.shape[0], all_.shape[0]), max(any_.shape[1], all_.shape[1]), nqb, nkb)
    full = all_.expand(shape)
    part = any_.expand(shape) & ~full
    return BlockSummary(block_q, block_k, *_lists(full), *_lists(part),
                        *_lists(full.transpose(2, 3)), *_lists(part.transpose(2, 3)))  # fmt: skip


def _lists(tiles: Tensor) -> tuple[Tensor, Tensor]:
    """(…, rows, cols) bool -> (count (…, rows), indices (…, rows, cols)) int32, the True
    columns first in ascending order (a stable sort of "not selected")."""
    num = tiles.sum(dim=-1, dtype=torch.int32).contiguous()
    idx = torch.argsort((~tiles).to(torch.int8), dim=-1, stable=True).to(torch.int32)
    return num, idx.contiguous()


@dataclass(frozen=True, eq=False)
class BlockMask:
    """A mask built once and passed to every layer: ``attention(q, k, v, block_mask=bm)``.

    Holds the element-level description (causal alignment, window, key_mask, attn_mask) and,
    when there is a key_mask or attn_mask, its :class:`BlockSummary`. Build it with
    :func:`block_mask`; it is valid for any q/k/v whose lengths are ``(seq_q, seq_k)`` and
    whose batch and heads the masks broadcast to. The summary is a snapshot of the masks'
    values when it was built: after writing into them, build a new BlockMask. Captured into
    a CUDA graph, it must stay alive (as every static input) while the graph is replayed.
    """

    seq_q: int
    seq_k: int
    causal: bool | str
    window: tuple[int, int] | None
    key_mask: Tensor | None
    attn_mask: Tensor | None
    summary: BlockSummary | None

    def __repr__(self) -> str:
        from ._inputs import capturing

        masks = [n for n in ("key_mask", "attn_mask") if getattr(self, n) is not None]
        tiles = ""
        if self.summary is not None and capturing(self.summary.kv_full_num.device):
            tiles = ", tiles not counted (CUDA graph capture)"  # counts() would sync
        elif self.summary is not None:
            size = f"{self.summary.block_q}x{self.summary.block_k}"
            tiles = f", tiles={self.summary.counts()} of {size}"
        return (f"BlockMask(seq_q={self.seq_q}, seq_k={self.seq_k}, causal={self.causal!r}, "
                f"window={self.window!r}, masks={masks}{tiles})")  # fmt: skip


def block_mask(
    seq_q: int,
    seq_k: int,
    *,
    causal: bool | str = False,
    window: tuple[int, int] | None = None,
    key_mask: Tensor | None = None,
    attn_mask: Tensor | None = None,
) -> BlockMask:
    """Summarise a mask once, for reuse by every layer of a model.

    Args:
        seq_q, seq_k: the query and key lengths Nq, Nk of the calls it will serve.
        causal, window: as :func:`safeattn.attention`.
        key_mask: (B, Nk) bool, True = the key may be attended.
        attn_mask: bool (True = attend) or additive float, broadcastable to (B, Hq, Nq, Nk);
            a size-1 batch or head axis stays broadcast in the summary.

    Returns:
        a :class:`BlockMask`; pass it as ``attention(q, k, v, block_mask=bm)`` instead of the
        individual mask arguments.

    Raises:
        TypeError / ValueError naming the argument, as :func:`safeattn.attention` does.
    """
    from ._inputs import capturing, check_block_mask_args

    p = check_block_mask_args(seq_q, seq_k, causal=causal, window=window,
                              key_mask=key_mask, attn_mask=attn_mask)  # fmt: skip
    summary = None
    if p.key_mask is not None or p.attn_mask is not None:
        in_capture = not torch.compiler.is_compiling() and capturing(p.q.device)
        summary = summary_in_capture(p) if in_capture else summary_for(p)
    return BlockMask(seq_q, seq_k, causal, window, key_mask, attn_mask, summary)


def summary_for(p) -> BlockSummary:
    """The summary of a validated problem (AttnProblem or the block_mask() stand-in)."""
    device = (p.key_mask if p.key_mask is not None else p.attn_mask).device
    size = block_size(device)
    return summarise(
        p.seq_q, p.seq_k, bottom_right=p.bottom_right, window_left=p.window_left,
        window_right=p.window_right, key_mask=p.key_mask, attn_mask=p.attn_mask,
        block_q=size, block_k=size, device=device,
    )  # fmt: skip


def summary_in_capture(p) -> BlockSummary:
    """:func:`summary_for`, recorded into the CUDA graph being captured (the caller checked
    that one is). Every op of :func:`summarise` is sync-free, so this is not expected to
    fail; if a torch version makes one uncapturable, the user gets the way around it
    instead of a bare CUDA error. (Kept apart from summary_for, which Dynamo traces.)"""
    try:
        return summary_for(p)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        raise RuntimeError(
            "safeattn: building the block-mask summary of key_mask/attn_mask inside CUDA "
            f"graph capture failed ({first}).\nHINT: build the mask before capturing, "
            "`bm = safeattn.block_mask(Nq, Nk, causal=..., key_mask=...)`, and pass "
            "`block_mask=bm` in the captured calls (its tiles are then fixed for the graph: "
            "build a new one and capture again for another mask)."
        ) from exc


# Implicit reuse: key -> (weak refs to the source tensors, their versions, summary).
_CACHE: OrderedDict[tuple, tuple] = OrderedDict()


def _ref(t: Tensor | None):
    return None if t is None else weakref.ref(t)


def cached_summary(p, key_mask: Tensor | None, attn_mask: Tensor | None) -> BlockSummary:
    """The summary for a validated dense problem ``p``, reused while the caller passes the
    same ``key_mask`` / ``attn_mask`` objects unmodified (see the module docstring)."""
    shape = p.attn_mask.shape if p.attn_mask is not None else None
    strides = p.attn_mask.stride() if p.attn_mask is not None else None
    key = (
        id(key_mask), id(attn_mask), p.batch, p.heads_q, p.seq_q, p.seq_k, p.bottom_right,
        p.window_left, p.window_right, shape, strides,
    )  # fmt: skip
    versions = tuple(None if t is None else t._version for t in (key_mask, attn_mask))
    hit = _CACHE.get(key)
    if hit is not None:
        refs, old_versions, summary = hit
        alive = all((r is None and t is None) or (r is not None and r() is t)
                    for r, t in zip(refs, (key_mask, attn_mask), strict=True))  # fmt: skip
        if alive and old_versions == versions:
            _CACHE.move_to_end(key)
            return summary
    summary = summary_for(p)
    _CACHE[key] = ((_ref(key_mask), _ref(attn_mask)), versions, summary)
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return summary


def clear_cache() -> None:
    """Forget every implicitly cached summary."""
    _CACHE.clear()
