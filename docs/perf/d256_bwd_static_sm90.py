"""Static (no GPU): registers, spills and shared memory of the D=256 backward kernels' Hopper-path
builds (bf16, causal, dK/dV without GQA), cross-compiled for sm90 with the Triton installed (the
GPUs' 3.6 here), one JSON line per config. Run from the repository root:

    python docs/perf/d256_bwd_static_sm90.py > d256_bwd_static_sm90.jsonl
"""

import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from safeattn import audit
from safeattn.gpu_limits import ARCHS
from safeattn.kernels.configs import KernelConfig as C


def comp(kernel, cfg, hd=256, variant="causal", extra=None):
    fn = audit._kernel_fn(kernel)
    cx = audit._constexprs(kernel, cfg, torch.bfloat16, hd, variant)
    if extra:
        cx.update(extra)
    sig, consts, attrs = audit._signature(fn, torch.bfloat16, variant, cx, hd)
    t = time.time()
    c = triton.compile(
        ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
        target=GPUTarget("cuda", ARCHS["sm90"].capability, 32),
        options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
    )
    regs, stack = audit._regs_and_stack(c.asm["cubin"])
    return dict(
        kernel=kernel,
        cfg=str(cfg),
        gqa=cx.get("GQA"),
        shared=c.metadata.shared,
        regs=regs,
        spills=stack,
        secs=round(time.time() - t, 1),
    )


DKDV = [
    (64, 64, 8, 2),
    (64, 32, 4, 2),
    (32, 64, 4, 2),
    (32, 64, 8, 2),
    (16, 64, 4, 2),
    (16, 64, 8, 2),
    (32, 128, 8, 2),
    (16, 128, 8, 2),
    (64, 64, 4, 2),
    (32, 32, 4, 2),
    (16, 64, 8, 3),
    (16, 64, 8, 1),
    (32, 64, 8, 1),
    (32, 64, 8, 3),
    (64, 64, 8, 1),
    (16, 32, 4, 2),
    (32, 32, 8, 2),
    (16, 128, 8, 1),
    (16, 32, 8, 2),
]
DQ = [
    (64, 64, 4, 2),
    (64, 32, 4, 2),
    (32, 64, 4, 2),
    (64, 64, 8, 2),
    (128, 64, 8, 2),
    (128, 32, 8, 2),
    (32, 32, 4, 2),
    (64, 128, 8, 2),
    (64, 64, 8, 3),
    (128, 32, 8, 3),
    (64, 32, 4, 3),
    (128, 64, 8, 1),
    (64, 32, 8, 2),
]
JOBS = [("bwd_dkdv_tma", c, {"GQA": False}) for c in DKDV] + [("bwd_dq_tma", c, None) for c in DQ]
JOBS += [("bwd_dkdv_tma", c, {"GQA": True}) for c in ((16, 64, 8, 2), (64, 64, 8, 2))]
for kernel, (m, n, w, s), extra in JOBS:
    try:
        print(json.dumps(comp(kernel, C(m, n, w, s), extra=extra)), flush=True)
    except Exception as e:  # one config's compiler failure must not end the sweep
        first = str(e).splitlines()[0][:200] if str(e) else repr(e)
        print(json.dumps(dict(kernel=kernel, cfg=f"M{m}-N{n}-w{w}-s{s}", error=first)), flush=True)
