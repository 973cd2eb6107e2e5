"""The forward and backward passes as kernel launches: output allocation, each kernel's
argument list (strides, masks, block-mask tiles) and grid. :mod:`.launch` chooses the
config and launches; ``ops.py`` wraps these functions as PyTorch operators.

Everything here receives an already-validated :class:`safeattn._inputs.AttnProblem`'s
tensors and its :class:`.launch.Meta`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os

import torch
import triton

from . import configs, hopper, launch, schedule
from .backward import _bwd_dkdv, _bwd_dq
from .forward import _attn_fwd, _dropout_keep, redo_grid
from .launch import Meta

_LN2 = math.log(2.0)
_LOG2E = 1.0 / _LN2


def _alloc_like(t: torch.Tensor) -> torch.Tensor:
    """Output buffer with ``t``'s shape and memory layout. ``SAFEATTN_POISON_OUTPUTS=1``
    fills it with NaN first, so a test can prove that every element gets written."""
    out = torch.empty_like(t)
    if os.environ.get("SAFEATTN_POISON_OUTPUTS") == "1":
        out.fill_(float("nan"))
    return out


def _dense_strides(t: torch.Tensor, varlen: bool) -> tuple[int, int, int, int]:
    """(batch, head, token, dim) strides; varlen tensors are (tokens, heads, dim)."""
    if varlen:
        return (0, t.stride(1), t.stride(0), t.stride(2))
    return tuple(t.stride())  # type: ignore[return-value]


def _lse_strides(lse: torch.Tensor, varlen: bool) -> tuple[int, int, int]:
    if varlen:  # (Hq, total_q)
        return (0, lse.stride(0), lse.stride(1))
    return tuple(lse.stride())  # type: ignore[return-value]


def _mask_args(key_mask, attn_mask, fallback):
    km = key_mask.view(torch.uint8) if key_mask is not None else fallback
    km_strides = tuple(key_mask.stride()) if key_mask is not None else (0, 0)
    if attn_mask is None:
        am, am_strides = fallback, (0, 0, 0, 0)
    else:
        am = attn_mask.view(torch.uint8) if attn_mask.dtype == torch.bool else attn_mask
        am_strides = tuple(attn_mask.stride())
    return km, km_strides, am, am_strides


def _leak_flags(meta: Meta, seq: int, heads: int, fallback: torch.Tensor) -> torch.Tensor:
    """The ``Leaked`` argument of a kernel with a guarded second launch: one int32 per program
    of the smallest block (16) over ``seq`` rows, ``batch * heads`` programs wide, where a
    row can be empty (``meta.may_have_empty_rows``); else a placeholder never read."""
    if not meta.may_have_empty_rows:
        return fallback
    n = triton.cdiv(seq, 16) * meta.batch * heads
    return torch.empty(n, device=fallback.device, dtype=torch.int32)


def _tile_args(summary, transposed: bool, fallback: torch.Tensor) -> tuple:
    """(full num, full idx, partial num, partial idx, 5 strides) of a block-mask summary,
    the per-row-block lists or (transposed) the per-key-block ones; a size-1 batch or head
    axis is read with stride 0. Without a summary: placeholders the kernel never reads."""
    if summary is None:
        return (fallback,) * 4 + (0,) * 5
    if transposed:
        tensors = (summary.q_full_num, summary.q_full_idx, summary.q_part_num, summary.q_part_idx)
    else:
        tensors = (summary.kv_full_num, summary.kv_full_idx, summary.kv_part_num,
                   summary.kv_part_idx)  # fmt: skip
    num, idx = tensors[0], tensors[1]

    def axis(t, d):
        return 0 if t.shape[d] == 1 else t.stride(d)

    strides = (axis(num, 0), axis(num, 1), axis(idx, 0), axis(idx, 1), idx.stride(2))
    return (*tensors, *strides)


def _new_lse(q: torch.Tensor, meta: Meta) -> torch.Tensor:
    if meta.varlen:
        return torch.empty((meta.heads_q, q.shape[0]), device=q.device, dtype=torch.float32)
    return torch.empty((meta.batch, meta.heads_q, meta.seq_q), device=q.device, dtype=torch.float32)


def forward(q, k, v, key_mask, attn_mask, cu_q, cu_k, meta: Meta, summary=None, seed=None):
    """Run the forward kernel. Returns ``(out, lse2)``; lse2 is the log2-domain LSE, fp32,
    (B, Hq, Nq) dense or (Hq, total_q) varlen, -inf on empty rows. ``summary``: the
    :class:`safeattn.blockmask.BlockSummary` of key_mask/attn_mask (needed iff meta.sparse).
    ``seed``: int64 (1,) on q's device, dropout's Philox seed (needed iff meta.dropout_p)."""
    out = _alloc_like(q)
    lse2 = _new_lse(q, meta)
    if out.numel() == 0:
        return out, lse2
    km, km_s, am, am_s = _mask_args(key_mask, attn_mask, q)
    cu_q = cu_q if cu_q is not None else q
    cu_k = cu_k if cu_k is not None else q
    tiles = _tile_args(summary, False, q)
    # The Hopper path (kernels/hopper.py): its own tune keys and config table.
    tma = hopper.use_tma(meta.varlen, q.device, q, k, v, out)
    meta = dataclasses.replace(meta, tma=tma)
    # Where a key can be excluded, the kernel flags its programs whose accumulator came out
    # non-finite, and a second launch redoes them with the guard (forward._attn_fwd).
    may_empty = meta.may_have_empty_rows
    leaked = _leak_flags(meta, meta.seq_q, meta.heads_q, q)

    @launch.per_config  # the guarded redo reuses the first launch's (descriptors included)
    def args(c: configs.KernelConfig) -> tuple:
        # TMA descriptors carry the config's tile shape: one set per config.
        descs = (None,) * 4
        if tma:
            bd = configs.block_d(meta.head_dim)
            rows = [c.block_m, c.block_n, c.block_n, c.block_m]
            descs = tuple(hopper.descriptors([q, k, v, out], rows, bd))
        return (
            q, k, v, out, lse2, km, am, cu_q, cu_k, *tiles[:4], leaked, _seed(seed, meta, q),
            *descs, meta.scale * _LOG2E, meta.softcap, meta.dropout_p,
            *_dense_strides(q, meta.varlen), *_dense_strides(k, meta.varlen),
            *_dense_strides(v, meta.varlen), *_dense_strides(out, meta.varlen),
            *_lse_strides(lse2, meta.varlen), *km_s, *am_s, *tiles[4:],
            meta.heads_q, meta.heads_q // meta.heads_kv, meta.seq_q, meta.seq_k,
            meta.window_left, meta.window_right, meta.head_dim,
            schedule.sched_chunk(c, *grid(c), kv_bytes, q.device, may_empty),
        )  # fmt: skip

    grid = lambda c: (triton.cdiv(meta.seq_q, c.block_m), meta.batch * meta.heads_q)
    kv_bytes = _head_bytes(meta.seq_k, meta, q) // (meta.heads_q // meta.heads_kv)
    # FOLD_SCALE: forward._fwd_step's scale folding, exact for a positive scale only.
    extra = {"USE_TMA": tma, "HAS_DROPOUT": meta.dropout_p > 0, "FOLD_SCALE": meta.scale > 0}
    cfg = launch._launch(
        "forward", _attn_fwd, grid, args, meta, q.dtype, q.device, meta.seq_q, meta.seq_k, extra
    )
    if may_empty:
        launch.launch_guarded_redo("forward", _attn_fwd, redo_grid(grid(cfg)), args, meta,
                                   q.dtype, q.device, cfg, extra)  # fmt: skip
    return out, lse2


def _head_bytes(seq: int, meta: Meta, t: torch.Tensor) -> int:
    """Bytes of one head's K and V, or Q and dO (seq, D each): what the programs of one
    (b, h) pair read in common (schedule.chunk_size)."""
    return 2 * seq * meta.head_dim * t.element_size()


def _seed(seed, meta: Meta, fallback: torch.Tensor) -> torch.Tensor:
    """The Seed argument: dropout's int64 (1,) seed, or a placeholder the kernels never read."""
    if meta.dropout_p > 0 and seed is None:
        raise ValueError("dropout_p > 0 needs the seed of the forward's dropout")
    return seed if meta.dropout_p > 0 else fallback


def _per_query_head(group: int, dtype: torch.dtype) -> bool:
    """Whether the dK/dV kernel runs once per query head, on K and V repeated over the GQA
    group, the group's heads summed after it (fp32 GQA). Why: an fp32 (IEEE) dot adds its
    products into the accumulator one at a time, so summing the group inside the kernel made
    one chain of group x Nq additions, where PyTorch's math (one head's matmul, then the sum
    over the group) makes Nq, then group: the H200's fp32 soft-capping GQA dV sat at 3.2x
    PyTorch's error. Costs K, V, dK and dV once per query head: fp32 only, where accuracy is
    what the caller asked for; fp16/bf16 sum the group in the kernel."""
    return group > 1 and dtype == torch.float32


OVERLAP_ENV = "SAFEATTN_BWD_OVERLAP"
_SIDE_STREAMS: dict[tuple[int, int], torch.cuda.Stream] = {}


def _overlap(device: torch.device) -> str:
    """How the dQ and dK/dV kernels share the GPU (CUDA; ``$SAFEATTN_BWD_OVERLAP``): "1"
    (default) dQ on a side stream, beside dK/dV; "2" dK/dV on a high-priority side stream,
    so the block scheduler hands freed SMs to its programs first and dQ's fill the tail;
    "0" one after the other on the caller's stream. Why beside: the two kernels read the
    same inputs and write different outputs, and each ends in a tail of idle SMs that the
    other can fill, as in FlexAttention's backward, which launches both program kinds as
    one grid. "2" is not the default: 0.995x the time of "1" on the H200 (one-process A/B,
    docs/perf/session_kvfirst_2026-12-04), short of the bar set before it was measured."""
    mode = os.environ.get(OVERLAP_ENV, "1").strip()
    if mode not in ("0", "1", "2"):
        raise ValueError(f"{OVERLAP_ENV} must be 0, 1 or 2, not {mode!r}")
    return mode if device.type == "cuda" and not launch.INTERPRET else "0"


def _side_stream(device: torch.device, priority: int = 0) -> torch.cuda.Stream:
    index = device.index if device.index is not None else torch.cuda.current_device()
    if (index, priority) not in _SIDE_STREAMS:
        _SIDE_STREAMS[index, priority] = torch.cuda.Stream(device=index, priority=priority)
    return _SIDE_STREAMS[index, priority]


def _on(stream) -> contextlib.AbstractContextManager:
    return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()


@functools.cache
def _largest_block(of, interpreted: bool) -> int:
    """``of(interpreted)`` (``configs.largest_block``, for ``Meta.no_tail``), once per function:
    it walks every config table, ~0.1 ms of the host's issue time on each backward. Keyed by
    the function too, so a test that patches ``configs.largest_block`` is asked anew. (Cached
    here, not in configs.py: that file keys the static audit's cache.)"""
    return of(interpreted)


def backward(
    q, k, v, out, dout, lse2, key_mask, attn_mask, cu_q, cu_k, meta: Meta, summary=None,
    dbias: bool = False, seed=None,
):  # fmt: skip
    """Run the three backward kernels. Returns ``(dq, dk, dv, dbias)``: dq, dk, dv shaped
    like q, k, v; with ``dbias`` (an additive float ``attn_mask``, dense only) the gradient of
    that mask as a contiguous (B, Hq, Nq, Nk) tensor of its dtype (zero where a pair is
    excluded or a tile is skipped), else None. It is the one N x N buffer the backward adds:
    a broadcast mask's gradient is this tensor summed over the broadcast axes (by autograd)."""
    dq, dk, dv = _alloc_like(q), _alloc_like(k), _alloc_like(v)
    db = None
    if dbias:
        if meta.varlen or attn_mask is None or attn_mask.dtype == torch.bool:
            raise ValueError("dbias needs a dense call with an additive float attn_mask")
        db = torch.zeros(attn_mask.shape, device=q.device, dtype=attn_mask.dtype)
    if meta.batch == 0 or meta.heads_q == 0:
        return dq, dk, dv, db
    if meta.seq_q == 0 or meta.seq_k == 0:
        # Nothing attends anything: every gradient is exactly zero.
        return dq.zero_(), dk.zero_(), dv.zero_(), db
    delta = torch.empty_like(lse2)
    km, km_s, am, am_s = _mask_args(key_mask, attn_mask, q)
    cu_q = cu_q if cu_q is not None else q
    cu_k = cu_k if cu_k is not None else q
    group = meta.heads_q // meta.heads_kv
    dev, dt = q.device, q.dtype

    pre_args = (
        out, dout, delta, cu_q, *_dense_strides(out, meta.varlen),
        *_dense_strides(dout, meta.varlen), *_lse_strides(delta, meta.varlen),
        meta.heads_q, meta.seq_q, meta.head_dim,
    )  # fmt: skip
    pre_grid = lambda c: (triton.cdiv(meta.seq_q, c.block_m), meta.batch * meta.heads_q)
    launch.launch_preprocess(pre_args, pre_grid, meta, dt, dev)

    common = (meta.scale * _LOG2E, meta.scale, meta.softcap, meta.dropout_p)
    seed = _seed(seed, meta, q)
    # The Hopper path (kernels/hopper.py) for both kernels: its own tune keys.
    tma = hopper.use_tma(meta.varlen, q.device, q, k, v, dout, dq, dk, dv)
    meta = dataclasses.replace(meta, tma=tma, dbias=db is not None)
    bd = configs.block_d(meta.head_dim)
    edge = _largest_block(configs.largest_block, launch.INTERPRET or dev.type != "cuda")

    def descs(c: configs.KernelConfig, tensors: list, rows: str) -> tuple:
        # One descriptor per tensor, rows "m" (query tiles) or "n" (key tiles) per letter.
        if not tma:
            return (None,) * len(tensors)
        tile = {"m": c.block_m, "n": c.block_n}
        return tuple(hopper.descriptors(tensors, [tile[r] for r in rows], bd))

    def half_descs(c: configs.KernelConfig) -> tuple:
        # Q and dO in half-height tiles, for the dK/dV kernel's partial block-mask tiles.
        if not hopper.half_partial(tma, meta.sparse, c.block_m):
            return (None, None)
        return tuple(hopper.descriptors([q, dout], [c.block_m // 2] * 2, bd))

    may_empty = meta.may_have_empty_rows
    # dQ first, with one of the two kernels on a side stream beside the other (_overlap),
    # joined before returning. First, so that a tuner's timing of either (triton's do_bench
    # synchronises the device before it times) never runs beside the other kernel.
    main = torch.cuda.current_stream(dev) if dev.type == "cuda" else None
    mode = _overlap(dev)
    side = None if mode == "0" else _side_stream(dev, -1 if mode == "2" else 0)
    q_stream, kv_stream = (side, None) if mode == "1" else (None, side)
    if side is not None:
        side.wait_stream(main)
    with _on(q_stream):
        tiles = _tile_args(summary, False, q)
        # The dQ kernel flags and redoes its programs the same way (backward._bwd_dq).
        leaked_q = _leak_flags(meta, meta.seq_q, meta.heads_q, q)
        q_args = launch.per_config(lambda c: (
            q, k, v, dout, lse2, delta, dq, leaked_q, db if db is not None else q, seed, km, am,
            cu_q, cu_k, *tiles[:4], *descs(c, [q, k, v, dout, dq], "mnnmm"), *common,
            *_dense_strides(q, meta.varlen), *_dense_strides(k, meta.varlen),
            *_dense_strides(v, meta.varlen), *_dense_strides(dout, meta.varlen),
            *_dense_strides(dq, meta.varlen), *_lse_strides(lse2, meta.varlen), *km_s, *am_s,
            *(db.stride() if db is not None else (0, 0, 0, 0)), *tiles[4:],
            meta.heads_q, group, meta.seq_q, meta.seq_k,
            meta.window_left, meta.window_right, meta.head_dim,
            schedule.sched_chunk(
                c, *q_grid(c), _head_bytes(meta.seq_k, meta, q) // group, dev, may_empty
            ),
        ))  # fmt: skip
        q_grid = lambda c: (triton.cdiv(meta.seq_q, c.block_m), meta.batch * meta.heads_q)
        extra = {"USE_TMA": tma, "HAS_DBIAS": db is not None, "HAS_DROPOUT": meta.dropout_p > 0,
                 "NO_TAIL": meta.no_tail(edge, "bwd_dq")}
        cfg = launch._launch(
            "bwd_dq", _bwd_dq, q_grid, q_args, meta, dt, dev, meta.seq_q, meta.seq_k, extra
        )
        if may_empty:
            launch.launch_guarded_redo("bwd_dq", _bwd_dq, redo_grid(q_grid(cfg)), q_args, meta,
                                       dt, dev, cfg, extra)  # fmt: skip
    with _on(kv_stream):
        tiles_t = _tile_args(summary, True, q)
        # The dK/dV kernel's heads: the K/V heads, or (fp32 GQA, _per_query_head) the query heads
        # on K and V repeated over the group, the group summed after the kernel.
        per_head = _per_query_head(group, dt)
        heads_kv, group_kv, k_kv, v_kv, dk_kv, dv_kv = meta.heads_kv, group, k, v, dk, dv
        if per_head:
            heads_kv, group_kv = meta.heads_q, 1
            k_kv, v_kv = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            dk_kv, dv_kv = torch.empty_like(k_kv), torch.empty_like(v_kv)
        # Where a row can be empty, the dK/dV kernel flags its programs whose results leaked
        # NaN/Inf from an empty row, and a second launch redoes them (backward._bwd_dkdv).
        leaked = _leak_flags(meta, meta.seq_k, heads_kv, q)
        kv_args = launch.per_config(lambda c: (
            q, k_kv, v_kv, dout, lse2, delta, dk_kv, dv_kv, leaked, seed, km, am, cu_q, cu_k,
            *tiles_t[:4], *descs(c, [q, k_kv, v_kv, dout, dk_kv, dv_kv], "mnnmnn"),
            *half_descs(c), *common,
            *_dense_strides(q, meta.varlen), *_dense_strides(k_kv, meta.varlen),
            *_dense_strides(v_kv, meta.varlen), *_dense_strides(dout, meta.varlen),
            *_dense_strides(dk_kv, meta.varlen), *_dense_strides(dv_kv, meta.varlen),
            *_lse_strides(lse2, meta.varlen), *km_s, *am_s, *tiles_t[4:],
            heads_kv, group_kv, meta.seq_q, meta.seq_k,
            meta.window_left, meta.window_right, meta.head_dim,
            schedule.sched_chunk(
                c, *kv_grid(c), _head_bytes(meta.seq_q, meta, q) * group_kv, dev, may_empty
            ),
        ))  # fmt: skip
        kv_grid = lambda c: (triton.cdiv(meta.seq_k, c.block_n), meta.batch * heads_kv)
        kv_extra = {"GQA": group_kv > 1, "GROUP": group_kv, "USE_TMA": tma,
                    "HAS_DROPOUT": meta.dropout_p > 0, "FOLD_DELTA": hopper.fold_delta(tma, bd),
                    "PAIR_STATS": lambda c: hopper.pair_stats(dev, c),  # by config: launch._kwargs
                    "NO_TAIL": meta.no_tail(edge, "bwd_dkdv")}
        # One launch, or (hopper.split_dkdv) dV then dK, each tuned, flagged and redone on its own;
        # every first launch rewrites all of `leaked`, so the halves share it.
        split = hopper.split_dkdv(tma, bd)
        for name, part in (configs.SPLIT_PARTS if split else {"bwd_dkdv": 0}).items():
            part_extra = {**kv_extra, "PART": part} if part else kv_extra
            cfg = launch._launch(
                name, _bwd_dkdv, kv_grid, kv_args, meta, dt, dev, meta.seq_q, meta.seq_k, part_extra
            )
            if may_empty:
                launch.launch_guarded_redo(name, _bwd_dkdv, redo_grid(kv_grid(cfg)), kv_args, meta,
                                           dt, dev, cfg, part_extra)  # fmt: skip
        if per_head:  # heads are dim 1 in both layouts, (B, H, N, D) and varlen (T, H, D)
            dk.copy_(dk_kv.unflatten(1, (meta.heads_kv, group)).sum(2))
            dv.copy_(dv_kv.unflatten(1, (meta.heads_kv, group)).sum(2))

    if side is not None:
        # Joined: whatever the caller does next on its stream (a free included: the caching
        # allocator reuses a block on the stream it was allocated on) comes after dQ.
        main.wait_stream(side)
    return dq, dk, dv, db


def dropout_keep(
    seed: torch.Tensor, batch: int, heads_q: int, seq_q: int, seq_k: int, dropout_p: float
) -> torch.Tensor:
    """The keep mask of the kernels' dropout for this seed: bool (B, Hq, Nq, Nk) on the
    seed's device, True = kept (varlen: B sequences of the max lengths, each sequence's
    pairs at the top left). For tests and ``safeattn.reference``'s ``dropout_keep``."""
    keep = torch.zeros((batch, heads_q, seq_q, seq_k), dtype=torch.uint8, device=seed.device)
    if keep.numel():
        grid = (triton.cdiv(seq_q, 32), batch * heads_q)
        _dropout_keep[grid](keep, seed, dropout_p, heads_q, seq_q, seq_k, BLOCK=32)
    return keep.bool()


def lse_natural(lse2: torch.Tensor) -> torch.Tensor:
    """log2-domain LSE -> natural log (what ``return_lse=True`` returns)."""
    return lse2 * _LN2
