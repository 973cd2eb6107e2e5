"""Per-architecture resource limits: the one table the config pruning, the static audit,
the asv resource benchmarks, the gate and the dashboard all read.

Shared memory is the per-block opt-in maximum (``cudaDevAttrMaxSharedMemoryPerBlockOptin``),
which is what a Triton kernel may use; the figures are NVIDIA's published limits.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ArchLimits:
    name: str  # "sm80"
    capability: int  # 80
    example_gpus: str
    smem_optin_bytes: int  # largest dynamic shared memory one block may opt in to
    regs_per_sm: int
    max_regs_per_thread: int


ARCHS: dict[str, ArchLimits] = {
    a.name: a
    for a in (
        ArchLimits("sm80", 80, "A100", 166_912, 65_536, 255),
        ArchLimits("sm86", 86, "RTX 30xx, A10, A40", 101_376, 65_536, 255),
        ArchLimits("sm89", 89, "L4, L40S, RTX 40xx", 101_376, 65_536, 255),
        ArchLimits("sm90", 90, "H100, H200", 232_448, 65_536, 255),
    )
}

SUPPORTED_ARCHS: tuple[str, ...] = tuple(ARCHS)


def arch_name(capability: tuple[int, int] | int) -> str:
    """``(9, 0)`` or ``90`` -> ``"sm90"``."""
    if isinstance(capability, tuple):
        capability = capability[0] * 10 + capability[1]
    return f"sm{capability}"


def limits_for(capability: tuple[int, int] | int) -> ArchLimits | None:
    """The table row for a compute capability, or None for an architecture not in it."""
    return ARCHS.get(arch_name(capability))
