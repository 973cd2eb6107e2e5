"""The Hopper path: on sm90 the forward and backward kernels read their Q, K, V (and dO) tiles
and write their output tiles (Out; dK, dV; dQ) through TMA tensor descriptors instead of
pointer tensors.

Why: a pointer tile holds one 64-bit address per element across the program's threads; at
BLOCK_M = 128 and D = 128 that is most of the register file, and the portable forward
spilled on the H100 (README, LiveResourcesSuite). A TMA descriptor is one object per
tensor: the copy engine computes the addresses, the loop's loads pipeline through shared
memory with mbarriers, and the registers go to the accumulators.

Safety is unchanged: only the addressing differs. TMA reads elements outside the tensor
(rows past N, columns past D) as 0, exactly what the portable kernel's masked loads return
(``other=0.0``), and a TMA store writes nothing outside it; every masking rule, the empty-row
rule and the excluded-value guard run on the loaded tiles as before. ``tests/test_hopper.py``
checks the two paths bit for bit under the interpreter.

When it runs (:func:`use_tma`): ``SAFEATTN_TMA=auto`` (default) on a GPU of compute
capability 9.x for fp16/bf16, not varlen, and only for tensors TMA can address: unit stride
along D, 16-byte-aligned base and strides. ``SAFEATTN_TMA=0`` never; ``SAFEATTN_TMA=1``
wherever the layout allows, the CPU interpreter included (tests). The path has its own
config table (``configs.candidates(..., tma=True)``) and its own tune keys (flag ``tma``).
The forward and the backward take it at every head dim: at D=256 the backward through
descriptors was 0.68x the portable one's speed with the old D=256 configs (it spilled 1,112 B
per thread in dK/dV), and with the configs from the D=256 sweep it is 1.05-1.06x faster forward
+ backward (H100, three runs, docs/perf/hopper_ab_h100_d256_2026-11-27.log).
"""

from __future__ import annotations

import functools
import os

import torch

from .configs import KernelConfig

ENV = "SAFEATTN_TMA"
_SETTINGS = ("auto", "0", "1")
_ALIGN = 16  # bytes: TMA's alignment for the global base address and every non-unit stride


def setting() -> str:
    """``SAFEATTN_TMA``: ``auto`` (default), ``0`` or ``1``; anything else is an error."""
    value = os.environ.get(ENV, "auto").strip().lower() or "auto"
    if value not in _SETTINGS:
        raise ValueError(
            f"safeattn: {ENV}={value!r} is not one of {', '.join(_SETTINGS)}.\n"
            "HINT: auto takes the Hopper (TMA) path on sm90 GPUs, 0 never, 1 wherever the "
            "tensors' layout allows it."
        )
    return value


def applies(capability: tuple[int, int], dtype: torch.dtype) -> bool:
    """Is the Hopper path the automatic choice on a GPU of this compute capability?"""
    return capability[0] == 9 and dtype in (torch.float16, torch.bfloat16)


@functools.cache
def _capability(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def _strides(t: torch.Tensor) -> list[int]:
    """``t``'s strides with those of size-1 dimensions replaced by the contiguous value:
    such a stride is never stepped along, but TMA still requires it aligned."""
    strides = list(t.stride())
    inner = 1
    for d in range(t.dim() - 1, -1, -1):
        if t.shape[d] == 1:
            strides[d] = inner
        inner = strides[d] * t.shape[d]
    return strides


def addressable(t: torch.Tensor) -> bool:
    """Can a TMA descriptor address this (B, H, N, D) tensor? Unit stride along D, a
    16-byte-aligned base address, every other stride a positive multiple of 16 bytes."""
    if t.dim() != 4 or t.numel() == 0:
        return False
    strides = _strides(t)
    size = t.element_size()
    return (
        strides[-1] == 1
        and t.data_ptr() % _ALIGN == 0
        and all(s > 0 and (s * size) % _ALIGN == 0 for s in strides[:-1])
    )


def use_tma(varlen: bool, device: torch.device, *tensors: torch.Tensor) -> bool:
    """Should the kernel over these (B, H, N, D) tensors take the Hopper path? See the module
    docstring. Raises ValueError for a bad ``SAFEATTN_TMA``."""
    mode = setting()
    if mode == "0" or varlen:
        return False
    if mode == "auto":
        if device.type != "cuda":
            return False
        index = device.index if device.index is not None else torch.cuda.current_device()
        if not applies(_capability(index), tensors[0].dtype):
            return False
    return all(addressable(t) for t in tensors)


def descriptors(tensors: list[torch.Tensor], rows: list[int], block_d: int) -> list:
    """One host tensor descriptor per (B, H, N, D) tensor, block [1, 1, rows[i], block_d]:
    what the kernel's ``desc.load([b, h, row, 0])`` reads at once."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    return [
        TensorDescriptor(t, list(t.shape), _strides(t), [1, 1, r, block_d])
        for t, r in zip(tensors, rows, strict=True)
    ]


def fold_delta(tma: bool, block_d: int) -> bool:
    """Whether the dK/dV kernel starts dP's accumulator at -delta (``backward._dkdv_step``'s
    register note): the Hopper path at D = 128, where the fold was measured. The LSE was
    folded too at first (61d2547: no spill at M64-N64-w4-s2, D=128 backward 0.93-1.00x the
    time of 0063d1a's on the H100), until the GPU tests showed it cost dV accuracy with large
    logits. With both folded, D = 64, the portable path and D = 256 spilled as much or more;
    delta alone has been checked at D = 128 only."""
    return tma and block_d == 128


def pairs(capability: int, cfg: KernelConfig) -> bool:
    """Whether the dK/dV kernel's plain steps, in calls with masked steps, load each row's LSE
    and delta as one pair (``backward._dkdv_step``'s PAIRED note) with ``cfg`` on a GPU of
    ``capability`` (90 = sm90). Only where it was measured faster, on the H200
    (docs/perf/session_pairs_land_2026-12-03): compute capability 9.x, tiles of 64 keys or
    more (the ones whose dots are wgmma's) pipelined in 3 stages or more. D = 64 causal
    backward 0.91x the time at M64-N64-w4-s3; at M32-N64-w4-s2 1-2 % slower (fp16 causal,
    the bool mask, the window), hence the stages. Triton 3.9 fails to compile the pair into
    the mma v2 lowering (an assertion in TritonGPUAccelerateMatmul), which sm80/86/89 and
    sm90's 32-key tiles (D = 256) take."""
    return capability // 10 == 9 and cfg.block_n >= 64 and cfg.num_stages >= 3


def pair_stats(device: torch.device, cfg: KernelConfig) -> bool:
    """:func:`pairs` for a launch with ``cfg`` on ``device``. Under the CPU interpreter
    always, so that the tests run the paired loads."""
    if device.type != "cuda":
        return True
    index = device.index if device.index is not None else torch.cuda.current_device()
    major, minor = _capability(index)
    return pairs(10 * major + minor, cfg)


HALF_PARTIAL_ROWS = 64


def half_partial(tma: bool, sparse: bool, block_m: int) -> bool:
    """Whether the dK/dV kernel walks its partial block-mask tiles in steps of half its
    ``block_m`` query rows, through Q and dO descriptors of that height
    (``backward._dkdv_head``'s register note): the Hopper path with a block mask, from
    :data:`HALF_PARTIAL_ROWS` rows. Its full tiles keep the whole block."""
    return tma and sparse and block_m >= HALF_PARTIAL_ROWS


def split_dkdv(tma: bool, block_d: int) -> bool:
    """Whether the dK/dV kernel runs as two launches, dV then dK (``backward._bwd_dkdv``'s
    PART; their configs are ``bwd_dv`` and ``bwd_dk``): the Hopper path at D = 256. There
    the joint kernel's registers hold dK, dV, K and V and spill at every 128-key tile; apart,
    each fits one (the kernel times: ``configs._HOPPER_SPLIT``'s note). At D = 128 the joint
    kernel already runs without spills, and the split's fifth matmul made it 1.6x slower."""
    return tma and block_d == 256
