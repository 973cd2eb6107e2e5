"""One backward build's registers, spill bytes and shared memory, cross-compiled for sm90 with
the Triton installed (the GPUs' 3.6 here; TRITON_PTXAS_PATH: CUDA 13.0's ptxas), no GPU. One
JSON line. TREE: a checkout whose ``safeattn`` is compiled; the constants are the audit's
"causal" variant (``safeattn.audit._constexprs``), "dense" drops the right window, and
CONST=value pairs override them (HD=256: the head dim, default 128):

    python static_sm90.py /work/main bwd_dkdv_tma 64,64,4,2 causal GQA=0 NO_TAIL=1
"""

import json
import os
import sys
import time

sys.path.insert(0, sys.argv[1])
os.environ.setdefault("TRITON_PTXAS_PATH", "/usr/local/cuda-13.0/bin/ptxas")

import torch  # after the tree is on the path
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from safeattn import audit
from safeattn.kernels.configs import KernelConfig


def main(tree: str, kernel: str, tile: str, variant: str, pairs: list[str]) -> None:
    m, n, w, st = map(int, tile.split(","))
    head_dim, extra = 128, {}
    for pair in pairs:
        name, value = pair.split("=")
        if name == "HD":
            head_dim = int(value)
        else:
            extra[name] = int(value) if value.isdigit() else value
    cfg = KernelConfig(m, n, w, st)
    fn = audit._kernel_fn(kernel)
    cx = audit._constexprs(kernel, cfg, torch.bfloat16, head_dim, "causal")
    if variant == "dense":
        cx["HAS_WINDOW_RIGHT"] = False
    cx.update(extra)
    sig, consts, attrs = audit._signature(fn, torch.bfloat16, "causal", cx, head_dim)
    start = time.time()
    compiled = triton.compile(
        ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
        target=GPUTarget("cuda", 90, 32),
        options={"num_warps": w, "num_stages": st},
    )
    regs, stack = audit._regs_and_stack(compiled.asm["cubin"])
    row = dict(tree=tree[-8:], kernel=kernel, cfg=str(cfg), variant=variant, hd=head_dim,
               extra=extra, shared=compiled.metadata.shared, regs=regs, spills=stack,
               secs=round(time.time() - start, 1))  # fmt: skip
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
