"""Config choice: a pure, bounded function of (kernel, head-dim bucket, dtype).

- :func:`candidates` is the shipped list, best-first; the static audit (``safeattn.audit``)
  cross-compiles every entry for each supported architecture.
- :func:`keep` is the static filter; :func:`fits` prunes against a device's shared-memory
  limit using the *compiled* kernel's figure (the launcher asks Triton), so a config over the
  running GPU's opt-in limit is never launched.
- :func:`tune_key` buckets lengths (next power of two, capped) so that a new sequence length
  reuses an earlier choice instead of re-tuning; sequence lengths are runtime arguments of the
  kernels (``do_not_specialize``), so they never trigger a recompile either.
- Single-config mode: ``SAFEATTN_AUTOTUNE=0`` or ``deterministic=True`` take the first
  candidate that fits, no timing; under ``TRITON_INTERPRET=1`` small interpreter blocks are used.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

import torch

KERNELS: tuple[str, ...] = ("forward", "bwd_preprocess", "bwd_dkdv", "bwd_dq")
# The dK/dV kernel's two halves where it runs as two launches (kernels/hopper.split_dkdv):
# the same function (backward._bwd_dkdv) with these PARTs, configs and tune keys of their own.
SPLIT_PARTS: dict[str, int] = {"bwd_dv": 1, "bwd_dk": 2}
HEAD_DIM_BUCKETS: tuple[int, ...] = (16, 32, 64, 128, 256)
DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class KernelConfig:
    block_m: int  # query rows per block
    block_n: int  # keys per block
    num_warps: int
    num_stages: int

    def __str__(self) -> str:
        return f"M{self.block_m}-N{self.block_n}-w{self.num_warps}-s{self.num_stages}"


C = KernelConfig

# Best-first lists for 2-byte dtypes, per head-dim bucket (16 and 32 share the 32 list).
# Order from tools/config_sweep.py on an H200 (bf16, N=4096, D=64 and 128, 2026-11-21):
# e.g. dK/dV at D=128 ran 2.27 ms with M64-N64-w4-s1 against 2.60 ms with M64-N64-w4-s2.
# The D=256 backward lists from its own sweep (H100, bf16, N=4096, causal and not, 2026-11-27,
# docs/perf/config_sweep_d256_h100_164348c_2026-11-27.log): causal dK/dV 2.15 ms with
# M64-N32-w4-s2 against 3.52 ms with M32-N32-w4-s1, the best of the lists before; dQ 0.97-0.99
# ms against 1.14 ms with M64-N32-w4-s1. The small tiles stay last, for GPUs with less
# shared memory.
_HALF: dict[str, dict[int, list[KernelConfig]]] = {
    "forward": {
        32: [C(128, 64, 4, 3), C(128, 128, 4, 3), C(64, 64, 4, 3)],
        64: [C(128, 64, 4, 3), C(64, 128, 4, 3), C(128, 64, 4, 4), C(64, 64, 4, 3)],
        128: [C(64, 64, 4, 3), C(128, 128, 8, 3), C(128, 64, 8, 3), C(128, 64, 8, 4)],
        256: [C(128, 64, 8, 2), C(64, 64, 4, 2), C(64, 32, 4, 2)],
    },
    "bwd_dkdv": {
        32: [C(32, 128, 4, 3), C(64, 64, 4, 3), C(32, 64, 4, 2)],
        64: [C(32, 128, 4, 3), C(64, 64, 4, 3), C(32, 64, 4, 2)],
        128: [C(64, 64, 4, 1), C(32, 64, 4, 3), C(64, 128, 8, 1), C(64, 128, 8, 2)],
        256: [C(64, 32, 4, 2), C(64, 64, 8, 2), C(32, 32, 4, 2), C(32, 32, 4, 1)],
    },
    "bwd_dq": {
        32: [C(128, 64, 4, 3), C(64, 32, 4, 3), C(64, 64, 4, 2)],
        64: [C(128, 64, 4, 3), C(64, 32, 4, 3), C(64, 64, 4, 2)],
        128: [C(128, 64, 8, 3), C(64, 64, 4, 2), C(64, 32, 4, 3), C(128, 32, 4, 3)],
        256: [C(64, 64, 4, 2), C(128, 64, 8, 1), C(64, 32, 4, 1), C(32, 32, 4, 1)],
    },
    "bwd_preprocess": {32: [C(128, 16, 4, 1)], 64: [C(128, 16, 4, 1)], 128: [C(64, 16, 4, 1)],
                       256: [C(32, 16, 4, 1)]},
}  # fmt: skip

# The Hopper path's forward (kernels/hopper.py: sm90, fp16/bf16, TMA tiles), which the pointer
# registers no longer crowd: 128-row tiles with 8 warps first, as Triton's fused-attention
# tutorial tunes its Hopper forward; the tuner times them all on first use of a key.
_HOPPER_FORWARD: dict[int, list[KernelConfig]] = {
    32: [C(128, 128, 8, 3), C(128, 64, 4, 3), C(128, 128, 4, 3), C(64, 64, 4, 3)],
    64: [C(128, 128, 8, 3), C(128, 64, 4, 3), C(128, 128, 4, 3), C(64, 64, 4, 3)],
    128: [C(128, 128, 8, 2), C(128, 128, 8, 3), C(128, 64, 8, 3), C(128, 64, 4, 3),
          C(64, 64, 4, 3)],
    256: [C(128, 64, 8, 2), C(128, 32, 8, 2), C(64, 64, 4, 2)],
}  # fmt: skip

# The Hopper path's backward kernels, from their own sweep (tools/config_sweep.py --path hopper,
# H100, bf16, triton 3.6, 2026-11-27, docs/perf/config_sweep_hopper_bwd_h100_2026-11-27.log).
# D=128: dQ M64-N64-w4-s2 ran 2.51 / 1.36 ms (non-causal / causal, N=8192) against 2.56 /
# 1.44 with M128-N64-w8-s3, the portable list's choice. dK/dV: M64-N64-w4-s2 ran 3.84 / 2.16
# ms against 4.31 / 2.21 for M32-N64-w4-s3, but spills (sm90, triton 3.6, with delta folded,
# hopper.fold_delta: 48 / 64 / 144 B per thread dense / causal / GQA build), so it is not
# shipped. M32-N64-w4-s3 compiles without spills in the dense and causal builds (its GQA
# build: 288 B); M64-N64-w8-s2, without spills in all three, ran 1.5-2.2x slower than it at
# every key of the H100's tune (docs/perf/tune_h100_2026-11-28.log), so it is not shipped.
# M64-N128-w8-s2, which the tuner once took for the left-padded causal shape, spilled (16 B).
# The other head dims' sweeps (D=64, D=256 causal) chose configs the portable lists already
# hold first or second.
# dK/dV M64-N128-w8-s3 (FlexAttention's backward tile): the dense NO_TAIL build
# (backward._dkdv_head) holds it in 226-244 registers without spills, and it ran 539 / 1789 /
# 1982 us against M32-N64-w4-s3's 562 / 1965 / 2079 (bf16 dense N=1024, N=4096, N=4096 GQA 4;
# H200, docs/perf/dkdv_tiles_probe.py, session_full_dkdv_2026-11-29/). Its other builds spill,
# so the tuner's spill filter leaves it to the dense calls. M64-N64-w4-s2: the causal NO_TAIL
# build holds it without spills (128 B with the tail loop; 24 B in the GQA build), and it ran
# 368 / 998 us against M32-N64-w4-s3's 407 / 1136 (bf16 causal N=1024, N=4096; H200,
# session_no_tail_2026-11-29/). Both last, so no untuned call takes them.
# D=256 dQ M128-N32-w8-s3: 128 query rows in 8 warps hold the 128x256 fp32 accumulator at
# half the registers per thread of M64-N64-w4-s2, which spilled 80 B; 32-key steps keep its
# shared memory (229,400 B with triton 3.6) inside sm90's opt-in limit where M128-N64 does
# not. It ran 733 us against 874 (bf16 causal N=4096, B=4, H=8; whole backward 2.207 against
# 2.362 ms; H200, docs/perf/session_dq_tiles_2026-12-03/).
_HOPPER_BACKWARD: dict[str, dict[int, list[KernelConfig]]] = {
    "bwd_dkdv": {**_HALF["bwd_dkdv"],
                 128: [C(32, 64, 4, 3), C(32, 64, 4, 4), C(64, 128, 8, 3), C(64, 64, 4, 2)]},
    "bwd_dq": {**_HALF["bwd_dq"],
               128: [C(64, 64, 4, 2), C(128, 64, 8, 4), C(128, 64, 8, 3), C(64, 32, 4, 3)],
               256: [C(128, 32, 8, 3), *_HALF["bwd_dq"][256]]},
}  # fmt: skip
# The Hopper D=256 dK/dV as two launches (hopper.split_dkdv), D=256 only. Timed alone, each
# its kernel (H200, bf16 N=4096, causal / dense / causal GQA 4, us; docs/perf/
# session_split_dkdv_2026-11-29/): dV M64-N128-w8-s2 556 / 1061 / 750 (M32-N128-w8-s2 697 /
# - / 1061); dK M32-N128-w8-s2 1002 / 2000 / 1518 (M16-N128-w8-s3 1438 / - / 1958, M64-N64-
# w8-s2 1598 / 2996 / 1824). The joint kernel's best, M64-N64-w8-s2: 2182 / 3424 / 2632.
_HOPPER_SPLIT: dict[str, dict[int, list[KernelConfig]]] = {
    "bwd_dv": {256: [C(64, 128, 8, 2), C(32, 128, 8, 2)]},
    "bwd_dk": {256: [C(32, 128, 8, 2), C(16, 128, 8, 3), C(64, 64, 8, 2)]},
}
_HOPPER: dict[str, dict[int, list[KernelConfig]]] = {
    "forward": _HOPPER_FORWARD, **_HOPPER_BACKWARD, **_HOPPER_SPLIT,
}

# fp32 (IEEE) tiles take twice the bytes and registers: smaller blocks.
_FP32: dict[str, dict[int, list[KernelConfig]]] = {
    "forward": {
        32: [C(64, 64, 4, 2), C(64, 32, 4, 2)],
        64: [C(64, 64, 4, 2), C(64, 32, 4, 2)],
        128: [C(64, 32, 4, 2), C(32, 32, 4, 2)],
        256: [C(32, 32, 4, 1), C(32, 16, 4, 1)],
    },
    "bwd_dkdv": {
        32: [C(32, 64, 4, 2), C(32, 32, 4, 2)],
        64: [C(32, 64, 4, 2), C(32, 32, 4, 2)],
        128: [C(32, 32, 4, 1), C(16, 32, 4, 1)],
        256: [C(16, 32, 4, 1), C(16, 16, 4, 1)],
    },
    "bwd_dq": {
        32: [C(64, 32, 4, 2), C(32, 32, 4, 2)],
        64: [C(64, 32, 4, 2), C(32, 32, 4, 2)],
        128: [C(32, 32, 4, 1), C(32, 16, 4, 1)],
        256: [C(32, 16, 4, 1), C(16, 16, 4, 1)],
    },
    "bwd_preprocess": _HALF["bwd_preprocess"],
}

# Configs whose compiled shared memory exceeds what some supported GPUs offer, and the bytes
# they need (measured by ``python -m safeattn.audit``, cross-compiled: the plain variant on
# 2026-11-21 with triton 3.6, recorded as LARGE_SMEM_BYTES, i.e. "sm80 and sm90 only"; the
# block-mask variant on 2026-11-23 with triton 3.9, whose plain path also pipelines the
# additive-mask tile). A config is shipped to a GPU only if its opt-in limit covers the need.
# Keyed by (kernel, head-dim bucket, fp32?, block-mask variant?, config).
LARGE_SMEM_BYTES = 160 * 1024
_SMEM_NEEDED: dict[tuple[str, int, bool, bool, KernelConfig], int] = {
    **{(kernel, bucket, fp32, masked, cfg): LARGE_SMEM_BYTES
       for kernel, bucket, fp32, cfg in (
           ("forward", 128, False, C(128, 128, 8, 3)),
           ("forward", 128, False, C(128, 64, 8, 4)),
           ("forward", 256, False, C(128, 64, 8, 2)),
           ("forward", 256, False, C(64, 64, 4, 2)),
           ("bwd_dkdv", 128, False, C(64, 128, 8, 1)),
           ("bwd_dkdv", 256, True, C(16, 32, 4, 1)),
           ("bwd_dq", 128, False, C(128, 64, 8, 3)),
       )
       for masked in (False, True)},
    # 196,608 with triton 3.6; the audit with triton 3.9 (2026-11-27): 262,144, and 262,168
    # on the Hopper path, over even sm90's limit: never shipped with a block mask.
    ("forward", 128, False, True, C(128, 128, 8, 3)): 262_168,
    ("forward", 128, False, True, C(128, 64, 8, 3)): 114_688,
    ("bwd_dkdv", 128, False, True, C(64, 128, 8, 2)): 107_264,
    ("bwd_dq", 128, False, True, C(128, 32, 4, 3)): 102_400,
    # The D=256 backward's larger tiles (2026-11-27): the audit (triton 3.9) found them over
    # sm86/89's limit, and dQ M128-N64-w8-s1 over sm80's; dQ M64-N64-w4-s2 compiled to
    # 196,608 bytes with triton 3.6 on the H100 (139,264-147,456 with 3.9), taken as its need.
    **{(kernel, 256, False, masked, cfg): need
       for kernel, cfg, need in (
           ("bwd_dkdv", C(64, 32, 4, 2), 102_912),
           ("bwd_dkdv", C(64, 64, 8, 2), 139_776),
           ("bwd_dq", C(64, 64, 4, 2), 196_608),
           ("bwd_dq", C(128, 64, 8, 1), 196_608),
       )
       for masked in (False, True)},
    # The Hopper D=256 dQ M128-N32-w8-s3 (2026-12-03; the same plain figure with triton 3.6
    # on the H200 and 3.9 in the audit): the block-mask builds are 8 KiB over sm90's limit.
    ("bwd_dq", 256, False, False, C(128, 32, 8, 3)): 229_400,
    ("bwd_dq", 256, False, True, C(128, 32, 8, 3)): 237_592,
}  # fmt: skip
# Dropout (HAS_DROPOUT) adds its Philox tile to a kernel's shared memory: the configs the
# audit found over sm80's or sm86/89's limit with it (triton 3.9, 2026-11-27, block-mask
# variant; applied with or without a mask). Keyed by (kernel, head-dim bucket, fp32?, config).
_SMEM_NEEDED_DROPOUT: dict[tuple[str, int, bool, KernelConfig], int] = {
    ("forward", 64, False, C(64, 128, 4, 3)): 106_496,
    ("forward", 64, False, C(128, 64, 4, 4)): 114_688,
    ("forward", 128, False, C(64, 64, 4, 3)): 106_496,
    ("forward", 128, False, C(128, 64, 8, 4)): 180_224,
    # D <= 32 (bucket 32) was outside the asv grid's audit until the full one (2026-12-02,
    # triton 3.9): 114,688 bytes, over sm86/89's limit, fp16 and bf16.
    ("forward", 32, False, C(128, 128, 4, 3)): 114_688,
    # The Hopper D=256 dQ (block-mask variant, triton 3.9, 2026-12-03), over sm90's limit.
    ("bwd_dq", 256, False, C(128, 32, 8, 3)): 237_592,
}  # fmt: skip


# Under the interpreter: small, unequal blocks so that CPU tests with short sequences still
# cross block boundaries on both axes.
_INTERPRETER: dict[str, KernelConfig] = {
    "forward": C(32, 16, 4, 1),
    "bwd_preprocess": C(32, 16, 4, 1),
    "bwd_dkdv": C(16, 32, 4, 1),
    "bwd_dq": C(32, 16, 4, 1),
    "bwd_dv": C(16, 32, 4, 1),
    "bwd_dk": C(16, 32, 4, 1),
}


def block_d(head_dim: int) -> int:
    """Head-dim tile: the next power of two, at least 16 (``tl.dot``'s minimum)."""
    return max(16, 1 << (head_dim - 1).bit_length())


def _bucket(head_dim_block: int) -> int:
    return max(32, head_dim_block)


def candidates(
    kernel: str,
    head_dim_block: int,
    dtype: torch.dtype,
    smem_limit: int | None = None,
    masked: bool = False,
    tma: bool = False,
    dropout: bool = False,
) -> list[KernelConfig]:
    """The shipped configs for one kernel, head-dim tile (16..256) and dtype, best first.

    ``smem_limit`` (the GPU's opt-in shared memory per block, bytes) drops the configs known
    to need more (:data:`_SMEM_NEEDED`); None keeps every config. ``masked``: the block-mask
    variant (a key_mask or attn_mask), which needs more shared memory for some configs.
    ``tma``: the Hopper path (fp16/bf16 only): :data:`_HOPPER_FORWARD` and
    :data:`_HOPPER_BACKWARD`. ``dropout``:
    the HAS_DROPOUT specialisation, which needs more shared memory for some forward configs.
    """
    fp32 = dtype == torch.float32
    bucket = _bucket(head_dim_block)
    if tma and (kernel == "bwd_preprocess" or fp32):
        raise ValueError(f"safeattn: the Hopper path has no {kernel} configs for {dtype}")
    if kernel in SPLIT_PARTS:
        # Hopper D=256 only (hopper.split_dkdv); no list elsewhere, the audit's jobs included
        listed = _HOPPER_SPLIT[kernel].get(bucket, []) if tma else []
    else:
        listed = (_HOPPER if tma else _FP32 if fp32 else _HALF)[kernel][bucket]

    def need(c: KernelConfig) -> int:
        plain = _SMEM_NEEDED.get((kernel, bucket, fp32, masked, c), 0)
        return max(plain, _SMEM_NEEDED_DROPOUT.get((kernel, bucket, fp32, c), 0) if dropout else 0)

    return [
        c
        for c in listed
        if keep(c, kernel, head_dim_block) and (smem_limit is None or need(c) <= smem_limit)
    ]


def keep(cfg: KernelConfig, kernel: str, head_dim_block: int) -> bool:
    """Static filter: register-file sanity for the fp32 accumulators of one program.

    The accumulator tile (rows × BLOCK_D fp32) spread over the program's threads must stay
    well under the 255 registers a thread can hold, or the kernel spills.
    """
    rows = cfg.block_n if kernel in ("bwd_dkdv", *SPLIT_PARTS) else cfg.block_m
    n_acc = 2 if kernel == "bwd_dkdv" else 1  # dK and dV (the split: one of them)
    regs_per_thread = n_acc * rows * head_dim_block // (cfg.num_warps * 32)
    return regs_per_thread <= 128


def interpreter_config(kernel: str) -> KernelConfig:
    """The single config used under ``TRITON_INTERPRET=1``."""
    return _INTERPRETER[kernel]


def largest_block(interpreted: bool) -> int:
    """The largest tile edge (rows or keys) of any config that can run: a sequence length
    that is a multiple of it leaves no partial tile under any of them (``launch.Meta.no_tail``).
    ``interpreted``: under ``TRITON_INTERPRET=1``, where only :func:`interpreter_config` runs."""
    if interpreted:
        listed = list(_INTERPRETER.values())
    else:
        listed = [c for table in (_HALF, _FP32, _HOPPER) for per_dim in table.values()
                  for cfgs in per_dim.values() for c in cfgs]  # fmt: skip
    return max(max(c.block_m, c.block_n) for c in listed)


def autotune_enabled() -> bool:
    """``SAFEATTN_AUTOTUNE=0`` switches timing off (first fitting candidate wins)."""
    return os.environ.get("SAFEATTN_AUTOTUNE", "1") != "0"


# Tuning: a candidate within this fraction of the fastest is tied with it, and the first
# tied one in candidates() order wins. Why: near-tied configs swap places from one process's
# timings to the next, and on an H200 each swap moved a benchmark between two runs of the
# same kernels (up to 1.12x in time; live dK/dV shared memory 56.8 vs 66 KiB), which the
# merge gate cannot tell from a regression. The cost: at most this fraction of speed.
TIE_TOLERANCE = 0.03


def pick(times_ms: list[float]) -> int:
    """Index of the config to launch, from the tuner's times (ms, in candidates() order):
    the first within ``TIE_TOLERANCE`` of the fastest. Non-finite times never win."""
    finite = [t for t in times_ms if math.isfinite(t)]
    if not finite:
        raise ValueError(f"safeattn: no finite tuning time among {times_ms}")
    limit = min(finite) * (1 + TIE_TOLERANCE)
    return next(i for i, t in enumerate(times_ms) if math.isfinite(t) and t <= limit)


def fits(shared_bytes: int, smem_limit: int) -> bool:
    """Does a compiled kernel's dynamic shared memory fit the device's opt-in limit?"""
    return shared_bytes <= smem_limit


def length_bucket(n: int) -> int:
    """Tune-key bucket of a length: next power of two, between 16 and 16384."""
    n = max(16, min(int(n), 16384))
    return 1 << (n - 1).bit_length()


def tune_key(
    kernel: str, dtype: torch.dtype, head_dim: int, seq_q: int, seq_k: int, flags: tuple
) -> tuple:
    """What a tuned choice is cached under: no raw lengths, only their buckets."""
    return (kernel, dtype, block_d(head_dim), length_bucket(seq_q), length_bucket(seq_k), flags)
