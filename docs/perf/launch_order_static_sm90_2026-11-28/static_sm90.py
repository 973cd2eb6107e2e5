"""Static (no GPU): the Hopper-path builds of the live configs, cross-compiled for sm90 with the
Triton installed (the GPUs' 3.6 here) and the assembler in TRITON_PTXAS_PATH (Triton's own
if unset), for the safeattn package under TREE. One JSON line per build: registers, stack
frame, SASS instruction count and a hash of the instructions (addresses and comments
dropped, so two trees that differ only in comments or line numbers hash the same).

    TREE=/tmp/trees/942f8a9 TRITON_PTXAS_PATH=<cuda 13.0>/bin/ptxas python static_sm90.py
"""

import hashlib
import json
import os
import sys

sys.path.insert(0, os.environ["TREE"])
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from safeattn import audit
from safeattn.kernels.configs import KernelConfig as C

LIVE = [  # (kernel, D, config): the H200 table's choices for the dense shapes
    ("bwd_dkdv_tma", 64, C(32, 128, 4, 3)),
    ("bwd_dkdv_tma", 128, C(32, 64, 4, 3)),
    ("forward_tma", 128, C(128, 128, 8, 3)),
    ("bwd_dq_tma", 128, C(64, 64, 4, 2)),
]


def build(kernel, head_dim, cfg, dtype, causal):
    fn = audit._kernel_fn(kernel)
    cx = audit._constexprs(kernel, cfg, dtype, head_dim, "causal")
    cx["HAS_WINDOW_RIGHT"] = causal  # the audit's "causal" variant, or dense
    if "GQA" in cx:
        cx["GQA"] = False
    sig, consts, attrs = audit._signature(fn, dtype, "causal", cx, head_dim)
    return triton.compile(
        ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
    )


for kernel, head_dim, cfg in LIVE:
    for dtype in (torch.bfloat16, torch.float16):
        for causal in (False, True):
            c = build(kernel, head_dim, cfg, dtype, causal)
            regs, stack = audit._regs_and_stack(c.asm["cubin"])
            lines = c.asm["sass"].splitlines()
            code = [x.strip() for x in lines if "\t" in x and x.lstrip()[:1] not in "/."]
            row = dict(
                tree=os.path.basename(os.environ["TREE"]),
                ptxas=os.environ.get("TRITON_PTXAS_PATH", "triton's own"),
                kernel=kernel, d=head_dim, cfg=str(cfg), dtype=str(dtype)[6:], causal=causal,
                regs=regs, stack=stack, instructions=len(code),
                sass=hashlib.sha256("\n".join(code).encode()).hexdigest()[:12],
            )  # fmt: skip
            print(json.dumps(row), flush=True)
