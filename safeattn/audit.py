"""Static resource audit: for each supported architecture, cross-compile every kernel ×
config shipped to it × dtype × head-dim bucket (no GPU needed) and report shared memory,
registers and spills against that architecture's limits (``safeattn.gpu_limits``).

Triton compiles for a target without a device (``GPUTarget``); its wheel carries ptxas and
cuobjdump, which give the register count and the per-thread stack (spill) bytes of the cubin.
Arguments are specialised the way a launch on contiguous, 16-byte-aligned tensors
specialises them (pointers and strides divisible by 16, unit strides as constants), so the
figures are those of the kernels that really run.

    python -m safeattn.audit                 # everything, table on stdout
    python -m safeattn.audit --arch sm86 --json audit.json
    python -m safeattn.audit --record        # compile afresh, write safeattn/audit_cache.json
    python -m safeattn.audit --no-cache      # compile, reading and writing no cache

The rows are cached per key (kernel sources, config tables, architecture list, Triton
version: ``safeattn.audit_cache``): a run whose key was audited before, here or in the
committed file, reads the rows instead of compiling them. :func:`audit` itself always
compiles; :func:`cached` goes through the cache.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .blockmask import BLOCK as _BLOCKMASK_TILE
from .gpu_limits import ARCHS, ArchLimits
from .kernels import configs, hopper
from .kernels.configs import KernelConfig

# Audited feature variants: "causal" exercises the fully-allowed and the diagonal paths of the
# analytic ranges; "masked" is the block-mask path (safeattn.blockmask tile lists, which every
# key_mask / attn_mask call takes) with every mask load (key mask, additive float mask,
# two-sided window); "softcap" is "masked" plus logit soft-capping (HAS_SOFTCAP), the heaviest
# combination: the cap adds arithmetic on the score tile (tanh, and its derivative in the
# backward) and registers to hold it, no loads. "dbias" is "masked" plus the dBias stores of a
# trainable bias (HAS_DBIAS), dQ kernels only; "dropout" is "masked" plus dropout's Philox mask
# (HAS_DROPOUT) in all three kernels.
VARIANTS: tuple[str, ...] = ("causal", "masked", "softcap", "dbias", "dropout")
_MASKED_VARIANTS = ("masked", "softcap", "dbias", "dropout")  # the block-mask path's variants
# The shipped kernels and their Hopper path (USE_TMA), the split dK/dV's halves included.
_TMA_KERNELS = ("forward_tma", "bwd_dkdv_tma", "bwd_dq_tma", "bwd_dv_tma", "bwd_dk_tma")
KERNELS: tuple[str, ...] = (*configs.KERNELS, *_TMA_KERNELS)
_DTYPE_NAMES = {torch.float16: "float16", torch.bfloat16: "bfloat16", torch.float32: "float32"}
_TRITON_TYPES = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


@dataclass(frozen=True)
class AuditRow:
    kernel: str
    arch: str
    dtype: str
    head_dim: int  # head-dim tile (bucket): 16, 32, 64, 128, 256
    variant: str
    config: str
    shared_bytes: int
    registers: int
    spills: int  # stack bytes per thread: register spills (cuobjdump's STACK + LOCAL)
    smem_limit: int
    fits: bool
    error: str = ""  # why it did not compile (a compiler crash is a finding, not a crash here)


def _kernel_fn(kernel: str):
    from .kernels import backward, forward

    base = kernel.removesuffix("_tma")
    return {"forward": forward._attn_fwd, "bwd_preprocess": backward._bwd_preprocess,
            "bwd_dkdv": backward._bwd_dkdv, "bwd_dq": backward._bwd_dq,
            }["bwd_dkdv" if base in configs.SPLIT_PARTS else base]  # fmt: skip


_POINTERS = {"Q", "K", "V", "Out", "dOut", "dK", "dV", "dQ"}
_FP32_POINTERS = {"Lse2", "Delta"}
_DESCRIPTORS = dict.fromkeys(("DescQ", "DescO", "DescdO", "DescdQ", "DescQh", "DescdOh"), "block_m")
_DESCRIPTORS.update(dict.fromkeys(("DescK", "DescV", "DescdK", "DescdV"), "block_n"))


def _representative_value(name: str, head_dim: int) -> int:
    """A launch-like value for an integer argument (contiguous (B, H, N, D) tensors)."""
    if name.endswith("d") and name.startswith("stride"):
        return 1  # unit stride along D (and along keys of a key mask)
    if name in ("stride_kmn", "stride_amn", "stride_dbn", "stride_lm"):
        return 1
    if name.startswith("stride"):
        return 1024 * head_dim if name.endswith(("b", "h")) else head_dim
    if name in ("heads_q", "heads_kv"):
        return 16
    if name == "group":
        return 2
    if name == "head_dim":
        # A launch passes the real head dim, which Triton specialises when it is a multiple
        # of 16 (every bucket is): that is what lets the D-masked loads vectorise.
        return head_dim
    return 1000  # lengths and window sizes: do_not_specialize at launch


def _signature(fn, dtype: torch.dtype, variant: str, constexprs: dict, head_dim: int):
    """Signature, constants and attrs for ASTSource, mirroring launch-time specialisation.
    The descriptors are [1, 1, rows, D] with USE_TMA (rows: the config's BLOCK_M or BLOCK_N;
    DescQh, DescdOh: BLOCK_M // 2 where ``hopper.half_partial``), else None, as ``passes``."""
    signature, consts, attrs = {}, dict(constexprs), {}
    do_not_spec = {p.name for p in fn.params if p.do_not_specialize}
    for i, p in enumerate(fn.params):
        name = p.name
        if p.is_constexpr:
            signature[name] = "constexpr"
            continue
        if name in _DESCRIPTORS:
            rows, half = constexprs.get(_DESCRIPTORS[name].upper()), name.endswith("h")
            tma = constexprs.get("USE_TMA", False)
            if tma and (not half or hopper.half_partial(tma, constexprs["SPARSE"], rows)):
                rows = rows // 2 if half else rows
                signature[name] = f"tensordesc<{_TRITON_TYPES[dtype]}[1, 1, {rows}, {head_dim}]>"
            else:
                signature[name], consts[name] = "constexpr", None
            continue
        if name in _POINTERS:
            signature[name] = "*" + _TRITON_TYPES[dtype]
        elif name in _FP32_POINTERS:
            signature[name] = "*fp32"
        elif name in ("Leaked", "Seed"):
            signature[name] = "*i32" if name == "Leaked" else "*i64"
        elif name == "KeyMask":
            signature[name] = "*u8"
        elif name in ("AttnMask", "DBias"):  # DBias: the mask's dtype
            masked = variant in _MASKED_VARIANTS
            signature[name] = "*" + (_TRITON_TYPES[dtype] if masked else "u8")
        elif name.startswith("CuSeq"):
            signature[name] = "*i32"
        elif name in ("FullNum", "FullIdx", "PartNum", "PartIdx"):
            # tile lists (int32) on the masked path; q itself as a placeholder otherwise
            signature[name] = "*i32" if variant in _MASKED_VARIANTS else "*" + _TRITON_TYPES[dtype]
        elif name in ("qk_scale", "sm_scale", "softcap", "dropout_p"):
            signature[name] = "fp32"
            continue
        else:
            value = _representative_value(name, head_dim)
            if name not in do_not_spec and value == 1:
                signature[name] = "constexpr"
                consts[name] = 1
                continue
            signature[name] = "i32"
            if name not in do_not_spec and value % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
            continue
        attrs[(i,)] = [["tt.divisibility", 16]]  # 16-byte aligned pointers
    return signature, consts, attrs


def _constexprs(kernel: str, cfg: KernelConfig, dtype: torch.dtype, head_dim: int, variant: str,
                capability: int = 90):  # fmt: skip
    masked, base = variant in _MASKED_VARIANTS, kernel.removesuffix("_tma")  # _tma: same kernel
    half = dtype != torch.float32  # fp16/bf16
    if base == "bwd_preprocess":
        return dict(IS_VARLEN=False, BLOCK_M=cfg.block_m, BLOCK_D=head_dim)
    return dict(
        IS_VARLEN=False,
        BOTTOM_RIGHT=masked,
        HAS_WINDOW_LEFT=masked,
        HAS_WINDOW_RIGHT=True,
        HAS_KEY_MASK=masked,
        MASK_KIND=2 if masked else 0,
        HAS_SOFTCAP=variant == "softcap",
        SPARSE=masked,
        SPARSE_Q=_BLOCKMASK_TILE if masked else cfg.block_m,
        SPARSE_K=_BLOCKMASK_TILE if masked else cfg.block_n,
        BLOCK_M=cfg.block_m,
        BLOCK_N=cfg.block_n,
        BLOCK_D=head_dim,
        EVEN_D=True,
        DOT_PRECISION="tf32" if half else "ieee",
        UPCAST_DOT=0,
        # the dK/dV kernel's GQA loop (GROUP: the group argument's value; fp32 has none:
        # passes._per_query_head); the guarded second launches (GUARD=True) are the same tiles
        **({"GQA": half, "GROUP": _representative_value("group", head_dim) if half else 1,
            "FOLD_DELTA": hopper.fold_delta(kernel in _TMA_KERNELS, head_dim),
            "PAIR_STATS": hopper.pairs(capability, cfg)}
           if base in ("bwd_dkdv", *configs.SPLIT_PARTS) else {}),
        **({"PART": configs.SPLIT_PARTS[base]} if base in configs.SPLIT_PARTS else {}),
        **({"HAS_DBIAS": variant == "dbias"} if base == "bwd_dq" else {}),
        HAS_DROPOUT=variant == "dropout",
        USE_TMA=kernel in _TMA_KERNELS,
    )


def _triton_bin(tool: str) -> str:
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", tool)


def _regs_and_stack(cubin: bytes) -> tuple[int, int]:
    """(registers, stack bytes) per thread from ``cuobjdump -res-usage``. Spills go to the
    stack frame (``STACK:``; the driver's LOCAL_SIZE_BYTES); ``LOCAL:`` alone read 0."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run(
            [_triton_bin("cuobjdump"), "-res-usage", f.name],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    regs = re.search(r"REG:(\d+)", text)
    stack = [re.search(rf"{field}:(\d+)", text) for field in ("STACK", "LOCAL")]
    if regs is None or None in stack:
        return -1, -1
    return int(regs.group(1)), sum(int(m.group(1)) for m in stack)


def audit_one(
    kernel: str, arch: ArchLimits, dtype: torch.dtype, head_dim: int, variant: str,
    cfg: KernelConfig,
) -> AuditRow:  # fmt: skip
    """Cross-compile one kernel/config for one architecture and measure it."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = _kernel_fn(kernel)
    cx = _constexprs(kernel, cfg, dtype, head_dim, variant, arch.capability)
    signature, consts, attrs = _signature(fn, dtype, variant, cx, head_dim)
    src = ASTSource(fn=fn, signature=signature, constexprs=consts, attrs=attrs)
    row = dict(kernel=kernel, arch=arch.name, dtype=_DTYPE_NAMES[dtype], head_dim=head_dim,
               variant=variant, config=str(cfg), smem_limit=arch.smem_optin_bytes)  # fmt: skip
    try:
        opts = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
        compiled = triton.compile(src, target=GPUTarget("cuda", arch.capability, 32), options=opts)
    except Exception as exc:  # e.g. ptxas crashing on one config: report it as a row
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return AuditRow(**row, shared_bytes=-1, registers=-1, spills=-1, fits=False,
                        error=first[:200])  # fmt: skip
    shared = int(compiled.metadata.shared)
    regs, stack = _regs_and_stack(compiled.asm["cubin"])
    fits = shared <= arch.smem_optin_bytes and 0 <= regs <= arch.max_regs_per_thread
    return AuditRow(**row, shared_bytes=shared, registers=regs, spills=stack, fits=fits)


def _jobs(archs, kernels, dtypes, head_dims, variants, configs_override=None):
    for kernel in kernels:
        for dtype in dtypes:
            for hd in head_dims:
                for variant in variants if kernel != "bwd_preprocess" else ("causal",):
                    if variant == "dbias" and kernel.removesuffix("_tma") != "bwd_dq":
                        continue  # only the dQ kernel has HAS_DBIAS
                    for arch in archs:
                        limits = ARCHS[arch]
                        tma = kernel in _TMA_KERNELS
                        if tma and not hopper.applies(divmod(limits.capability, 10), dtype):
                            continue
                        cfgs = configs_override or configs.candidates(
                            kernel.removesuffix("_tma"), hd, dtype, limits.smem_optin_bytes,
                            variant in _MASKED_VARIANTS, tma=tma, dropout=variant == "dropout",
                        )  # fmt: skip
                        for cfg in cfgs:
                            yield (kernel, limits, dtype, hd, variant, cfg)


def _run_job(job) -> AuditRow:
    return audit_one(*job)


def audit(
    archs: Iterable[str] | None = None,
    kernels: Iterable[str] | None = None,
    dtypes: Iterable[torch.dtype] | None = None,
    head_dims: Iterable[int] | None = None,
    variants: Iterable[str] | None = None,
    workers: int | None = None,
    progress: bool | Callable[[str], None] = False,
    configs_override: list[KernelConfig] | None = None,
) -> list[AuditRow]:
    """Audit every combination (defaults: everything shipped). Returns one row per
    kernel × arch × dtype × head-dim tile × variant × config. Compiles run in ``workers``
    processes (default: CPU count); Triton's on-disk cache makes repeated audits cheap.
    ``configs_override`` audits the given configs instead of the shipped ones (tests).
    ``progress``: True prints a line every 10 compiles to stderr; a callable gets the line
    instead (the asv suite forwards it to its progress file)."""
    jobs = list(_jobs(list(archs or ARCHS), list(kernels or KERNELS),
                      list(dtypes or configs.DTYPES), list(head_dims or configs.HEAD_DIM_BUCKETS),
                      list(variants or VARIANTS), configs_override))  # fmt: skip
    workers = workers or cpu_count()
    rows: list[AuditRow] = []
    # Under TRITON_INTERPRET=1 the kernels are interpreter objects that cannot be compiled:
    # compile in fresh worker processes that import them with the interpreter off.
    interpreting = os.environ.get("TRITON_INTERPRET") == "1"
    if workers == 1 and not interpreting:
        for i, job in enumerate(jobs, 1):
            rows.append(_run_job(job))
            if progress and (i % 10 == 0 or i == len(jobs)):
                _report(progress, f"[audit] {i}/{len(jobs)} compiled")
        return rows
    ctx = __import__("multiprocessing").get_context("spawn")
    saved = os.environ.get("TRITON_INTERPRET")
    if interpreting:
        os.environ["TRITON_INTERPRET"] = "0"  # inherited by the spawned workers
    try:
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
            for i, row in enumerate(pool.map(_run_job, jobs), 1):
                rows.append(row)
                if progress and (i % 10 == 0 or i == len(jobs)):
                    _report(progress, f"[audit] {i}/{len(jobs)} compiled")
    finally:
        if interpreting:
            os.environ["TRITON_INTERPRET"] = saved or "1"
    return rows


def cpu_count() -> int:
    """Cores this process may run on (a container's CPU set, not the host's count)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def cached(
    archs: Iterable[str] | None = None,
    kernels: Iterable[str] | None = None,
    dtypes: Iterable[torch.dtype] | None = None,
    head_dims: Iterable[int] | None = None,
    workers: int | None = None,
    progress: bool | Callable[[str], None] = False,
) -> tuple[list[AuditRow], str]:
    """:func:`audit` of every variant, through the audit cache (``safeattn.audit_cache``):
    slices already audited under this package's key are read, the rest compiled (and kept).
    Returns the rows and, in words, where they came from."""
    from . import audit_cache

    by_name = {v: k for k, v in _DTYPE_NAMES.items()}

    def compile_slices(a, k, d, h):
        rows = audit(a, k, [by_name[x] for x in d], h, workers=workers, progress=progress)
        return [asdict(r) for r in rows]

    rows, source = audit_cache.cached_audit(
        compile_slices,
        Path(__file__).resolve().parent,
        archs or list(ARCHS),
        kernels or list(KERNELS),
        [_DTYPE_NAMES[d] for d in dtypes or configs.DTYPES],
        head_dims or list(configs.HEAD_DIM_BUCKETS),
        report=(lambda line: _report(progress, line)) if progress else None,
    )
    return [AuditRow(**r) for r in rows], source


def _report(progress: bool | Callable[[str], None], line: str) -> None:
    if callable(progress):
        progress(line)
    else:
        print(line, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """CLI: print the audit table; exit 1 if any shipped config does not fit its arch."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--arch", action="append", choices=list(ARCHS), help="repeatable; default all")
    ap.add_argument("--kernel", action="append", choices=list(KERNELS))
    ap.add_argument("--dtype", action="append", choices=list(_DTYPE_NAMES.values()))
    ap.add_argument("--head-dim", action="append", type=int, choices=configs.HEAD_DIM_BUCKETS)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--json", help="also write the rows to this file")
    cache = ap.add_mutually_exclusive_group()
    cache.add_argument(
        "--record", action="store_true",
        help="compile afresh and write the rows as the committed cache's entry for this key",
    )  # fmt: skip
    cache.add_argument("--no-cache", action="store_true", help="compile; read and write no cache")
    args = ap.parse_args(argv)
    dtypes = [getattr(torch, d) for d in args.dtype] if args.dtype else None
    selection = (args.arch, args.kernel, dtypes, args.head_dim)
    if args.record or args.no_cache:
        rows = audit(*selection, workers=args.workers, progress=True)
        source = f"{len(rows)} rows compiled"
    else:
        rows, source = cached(*selection, workers=args.workers, progress=True)
    print(f"[audit] {source}", file=sys.stderr)
    if args.record:
        from . import audit_cache

        key = audit_cache.audit_key(Path(__file__).resolve().parent)
        slices = {
            (k, a, _DTYPE_NAMES[d], h)
            for k in args.kernel or KERNELS
            for a in args.arch or ARCHS
            for d in dtypes or configs.DTYPES
            for h in args.head_dim or configs.HEAD_DIM_BUCKETS
        }
        path = audit_cache.record(key, [asdict(r) for r in rows], slices)
        print(f"[audit] recorded {len(rows)} rows under key {key['key'][:12]} "
              f"(triton {key['triton']}) in {path}", file=sys.stderr)  # fmt: skip
    print(f"{'kernel':<15}{'arch':<6}{'dtype':<10}{'D':>4} {'variant':<8}{'config':<16}"
          f"{'shared':>8}{'limit':>8}{'regs':>6}{'stack':>6}  fits")  # fmt: skip
    for r in rows:
        print(f"{r.kernel:<15}{r.arch:<6}{r.dtype:<10}{r.head_dim:>4} {r.variant:<8}{r.config:<16}"
              f"{r.shared_bytes:>8}{r.smem_limit:>8}{r.registers:>6}{r.spills:>6}  "
              f"{'yes' if r.fits else 'NO'}{'  ' + r.error if r.error else ''}")  # fmt: skip
    bad = [r for r in rows if not r.fits]
    print(f"{len(rows)} rows, {len(bad)} over a limit", file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([asdict(r) for r in rows], f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
