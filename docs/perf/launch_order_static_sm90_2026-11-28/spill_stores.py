"""Static (no GPU): `ptxas -v` on the dense D=64 dK/dV (Hopper path, bf16, M32-N128-w4-s3) PTX
of the safeattn package under TREE, with CUDA 13.0's ptxas (PTXAS13) and Triton's bundled
one: stack frame and spill stores per assembler.

    TREE=/tmp/trees/942f8a9 PTXAS13=<cuda 13.0>/bin/ptxas python spill_stores.py
"""

import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.environ["TREE"])
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from safeattn import audit
from safeattn.kernels.configs import KernelConfig

cfg, kernel = KernelConfig(32, 128, 4, 3), "bwd_dkdv_tma"
fn = audit._kernel_fn(kernel)
cx = audit._constexprs(kernel, cfg, torch.bfloat16, 64, "causal")
cx.update(HAS_WINDOW_RIGHT=False, GQA=False)  # dense, no GQA loop: the live build's variant
sig, consts, attrs = audit._signature(fn, torch.bfloat16, "causal", cx, 64)
c = triton.compile(
    ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
    target=GPUTarget("cuda", 90, 32),
    options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
)
ptx = tempfile.mktemp(suffix=".ptx")
with open(ptx, "w") as f:
    f.write(c.asm["ptx"])
for ptxas in (os.environ["PTXAS13"], audit._triton_bin("ptxas")):
    r = subprocess.run([ptxas, "-v", "--gpu-name=sm_90a", ptx, "-o", ptx + ".o"],
                       capture_output=True, text=True)  # fmt: skip
    info = [x.strip() for x in r.stderr.splitlines() if "spill" in x or "registers" in x]
    print(os.path.basename(os.environ["TREE"]), ptxas, info)
