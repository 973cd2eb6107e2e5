"""Launch order: how many (batch, head) pairs the kernels take together (``sched_chunk``).

The forward, dK/dV and dQ grids are (blocks, B * heads). Under causal attention (a window, a
mask) the programs' work differs: a query block near the end sees up to N / BLOCK_N key
blocks, one near the start a single one. The GPU starts programs in launch order, so where
the heavy programs of the last (b, h) pairs are launched late they run on alone at the end
while the other SMs idle: by list-scheduling arithmetic 7 % of the causal forward at D=128,
N=4096, B=4, H=16 on 132 SMs, and 15 % where two programs share an SM.

The Hopper path's forward and dQ kernels, and its dK/dV at D=128 (``forward._program_ids``;
the portable kernels and the other dK/dV builds keep one pair after another, see its note
and ``backward._bwd_dkdv``) therefore walk the pairs in chunks of ``sched_chunk`` and,
inside a chunk, block by block across the chunk's pairs, heaviest block first. The chunk
size is a trade:
- big enough that a chunk holds about two waves of programs (``2 * slots`` programs), so
  that the light programs at the end of the last chunk fill the tail;
- small enough that what the programs in flight read (the K and V of the chunk's heads in
  the forward and dQ, the Q and dO of their query heads in dK/dV) stays within half the L2
  cache, as it did with the blocks of one pair after another.
  Where the two disagree, L2 wins: a miss there costs the whole kernel, a tail a fraction
  of a wave.

Only where the work is uneven (causal, a window or a mask: ``Meta.may_have_empty_rows``).
Without them every program does the same work and there is no tail to fill, while the chunk
still widens what is in flight: on an H200 (docs/perf/tree_ab.py, two processes per tree) the
non-causal D=128 forward ran 2.5 % slower in chunks of 9 pairs than pair by pair, so even
work keeps chunks of one pair, the order before.
"""

from __future__ import annotations

import functools

import torch

from .configs import KernelConfig


@functools.cache
def _device(index: int) -> tuple[int, int]:
    props = torch.cuda.get_device_properties(index)
    return props.multi_processor_count, props.L2_cache_size


def device_slots(device: torch.device) -> tuple[int, int | None]:
    """(SM count, L2 bytes) of a CUDA device; (1, None) elsewhere (the interpreter, where
    small chunks make the tests walk several)."""
    if device.type != "cuda":
        return 1, None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _device(index)


def chunk_size(
    n_blocks: int, n_bh: int, slots: int, bytes_per_bh: int, l2_bytes: int | None
) -> int:
    """(b, h) pairs per chunk of the launch order, in [1, n_bh].

    ``n_blocks``: the grid's first axis (query or key blocks); ``n_bh``: its second;
    ``slots``: programs the GPU runs at once; ``bytes_per_bh``: what one pair's programs read
    in common (K and V of its KV head, shared by the GQA group); ``l2_bytes``: the L2 cache
    (None: no limit)."""
    chunk = -(-2 * slots // max(n_blocks, 1))
    if l2_bytes:
        chunk = min(chunk, l2_bytes // 2 // max(bytes_per_bh, 1))
    return max(1, min(chunk, n_bh))


def sched_chunk(
    cfg: KernelConfig,
    n_blocks: int,
    n_bh: int,
    bytes_per_bh: int,
    device: torch.device,
    uneven: bool,
) -> int:
    """:func:`chunk_size` for a launch of ``cfg`` on ``device`` where the programs' work is
    ``uneven``, else 1 (see the module docstring): two programs per SM at 4 warps (the
    kernels' 4-warp configs use about half the register file or less), one at 8."""
    if not uneven:
        return 1
    sms, l2 = device_slots(device)
    per_sm = 2 if cfg.num_warps <= 4 else 1
    return chunk_size(n_blocks, n_bh, sms * per_sm, bytes_per_bh, l2)
