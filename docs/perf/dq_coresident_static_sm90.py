"""Static sm90 (cross-compiled, no GPU): the Hopper path's dK/dV and dQ builds at D=128 bf16,
as the static audit builds them (``safeattn.audit``; argv[1] its variant, e.g. plain):
registers, stack, shared memory; then which dQ configs can share an SM with dK/dV programs
(228 KB of shared memory with 1 KB reserved per program, 64K registers allocated per warp in
256-register units). Why: with dQ beside dK/dV (passes.backward's side stream) the two
overlap only where an SM has room for both, and the shipped dQ (M128-N64-w8-s4) leaves none.

    TRITON_PTXAS_PATH=<CUDA 13 ptxas> python docs/perf/dq_coresident_static_sm90.py plain
"""

import itertools
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from safeattn import audit
from safeattn.kernels.configs import KernelConfig as C


def build(kname, cfg, variant):
    fn = audit._kernel_fn(kname)
    cx = audit._constexprs(kname, cfg, torch.bfloat16, 128, variant)
    sig, consts, attrs = audit._signature(fn, torch.bfloat16, variant, cx, 128)
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    k = triton.compile(
        src,
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
    )
    regs, stack = audit._regs_and_stack(k.asm["cubin"])
    return regs, stack, k.metadata.shared


print("# ptxas", os.environ.get("TRITON_PTXAS_PATH", "triton's"), "variant", sys.argv[1])
rows = []
for kname, cfgs in (
    ("bwd_dkdv_tma", [C(32, 64, 4, 3), C(32, 64, 4, 4)]),
    (
        "bwd_dq_tma",
        [
            C(128, 64, 8, 4),
            C(128, 64, 8, 3),
            C(64, 64, 4, 2),
            C(64, 64, 4, 3),
            C(64, 32, 4, 3),
            C(128, 32, 4, 3),
            C(128, 64, 8, 2),
        ],
    ),
):
    for cfg in cfgs:
        try:
            r, s, sh = build(kname, cfg, sys.argv[1])
            rows.append((kname, cfg, r, s, sh))
            print(f"{kname:13s} {cfg}: regs {r} stack {s} smem {sh / 1024:.1f} KB", flush=True)
        except Exception as e:
            print(f"{kname:13s} {cfg}: ERROR {type(e).__name__}: {str(e)[:160]}", flush=True)

SMEM, REGS, RESERVED = 228 * 1024, 65536, 1024  # sm90: per SM; 1 KB reserved per CTA


def regs_of(r, warps):  # allocation: per warp, 256-register granularity
    return warps * (((r * 32) + 255) // 256 * 256)


print("# co-residency on one SM: dK/dV programs + dQ programs (smem, registers)")
for dk in [x for x in rows if x[0] == "bwd_dkdv_tma"]:
    for dq in [x for x in rows if x[0] == "bwd_dq_tma"]:
        fits = []
        for a, b in itertools.product(range(0, 3), range(0, 3)):
            if a + b == 0:
                continue
            smem = a * (dk[4] + RESERVED) + b * (dq[4] + RESERVED)
            regs = a * regs_of(dk[2], dk[1].num_warps) + b * regs_of(dq[2], dq[1].num_warps)
            if smem <= SMEM and regs <= REGS:
                fits.append(f"{a}+{b}")
        print(f"dkdv {dk[1]} + dq {dq[1]}: fits {' '.join(fits)}")
