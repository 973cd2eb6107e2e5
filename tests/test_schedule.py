"""The kernels' launch order (kernels/schedule.py, forward._program_ids): every (block, bh)
program exactly once, chunks of pairs, heaviest block first; and the chunk-size rule."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl

from safeattn.kernels import schedule
from safeattn.kernels.configs import KernelConfig
from safeattn.kernels.forward import _program_ids


@triton.jit
def _record(Out, sched_chunk, HEAVY_LAST: tl.constexpr):
    """Out[launch index] = (block, bh) that _program_ids gives that program."""
    blk, bh = _program_ids(sched_chunk, HEAVY_LAST)
    lin = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
    tl.store(Out + 2 * lin, blk)
    tl.store(Out + 2 * lin + 1, bh)


def _order(n_blk: int, n_bh: int, chunk: int, heavy_last: bool) -> list[tuple[int, int]]:
    out = torch.full((n_blk * n_bh * 2,), -1, dtype=torch.int32)
    _record[(n_blk, n_bh)](out, chunk, heavy_last)
    return [tuple(p) for p in out.view(-1, 2).tolist()]


def _expected(n_blk: int, n_bh: int, chunk: int, heavy_last: bool) -> list[tuple[int, int]]:
    """The documented order, written out: chunks of `chunk` pairs (the last one takes the
    remainder), block by block across the chunk, heaviest block first."""
    n_chunks = max(n_bh // chunk, 1)
    order = []
    for c in range(n_chunks):
        pairs = range(c * chunk, n_bh if c == n_chunks - 1 else (c + 1) * chunk)
        blocks = range(n_blk - 1, -1, -1) if heavy_last else range(n_blk)
        order += [(blk, bh) for blk in blocks for bh in pairs]
    return order


@pytest.mark.parametrize(
    ("n_blk", "n_bh", "chunk"),
    [(3, 5, 2), (4, 8, 3), (1, 6, 4), (5, 1, 1), (2, 7, 7), (3, 4, 9), (6, 6, 1)],
)
@pytest.mark.parametrize("heavy_last", [True, False])
def test_program_ids_visit_every_program_once_in_the_documented_order(
    n_blk, n_bh, chunk, heavy_last
):
    order = _order(n_blk, n_bh, chunk, heavy_last)
    assert sorted(order) == [(b, h) for b in range(n_blk) for h in range(n_bh)]
    assert order == _expected(n_blk, n_bh, min(chunk, n_bh), heavy_last)


def test_chunk_size_rule():
    # About two waves of programs per chunk: 2 * 264 slots / 32 blocks -> 17 pairs.
    assert schedule.chunk_size(32, 64, 264, 2 << 20, None) == 17
    # ...unless the chunk's K/V would pass half the L2 cache (50 MB / 2 / 2 MiB -> 11).
    assert schedule.chunk_size(32, 64, 264, 2 << 20, 50_000_000) == 11
    # Never more than the grid has, never less than one.
    assert schedule.chunk_size(2, 4, 264, 1 << 10, None) == 4
    assert schedule.chunk_size(512, 64, 132, 64 << 20, 50_000_000) == 1


def test_sched_chunk_counts_two_programs_per_sm_at_four_warps():
    cpu = torch.device("cpu")  # one "SM", no L2 limit
    assert schedule.sched_chunk(KernelConfig(64, 64, 4, 2), 1, 16, 1, cpu, True) == 4
    assert schedule.sched_chunk(KernelConfig(128, 128, 8, 2), 1, 16, 1, cpu, True) == 2


def test_even_work_keeps_one_pair_per_chunk():
    cpu = torch.device("cpu")
    assert schedule.sched_chunk(KernelConfig(64, 64, 4, 2), 1, 16, 1, cpu, False) == 1
