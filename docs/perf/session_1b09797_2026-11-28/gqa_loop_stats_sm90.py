"""Static (no GPU): the Hopper-path dK/dV builds at D=128 (bf16) of the safeattn under TREE,
cross-compiled for sm90 with the Triton installed (the GPUs' 3.6) and the assembler in
TRITON_PTXAS_PATH (Triton's own, CUDA 12.8's, if unset: what the GPU machines use). One line
per build: registers, stack frame (spilled bytes per thread) and, per loop holding
tensor-core instructions, (length in SASS instructions, HGMMAs, local loads/stores), from
docs/perf/sass_loop_stats.py. GQA builds loop over a group of GROUP heads (default 4).

    TREE=/tmp/base SPECS="32,64,4,3,0,1;32,64,4,3,1,1" python gqa_loop_stats_sm90.py

SPECS: "BLOCK_M,BLOCK_N,warps,stages,causal,gqa" separated by ";".
"""

import os
import sys
import tempfile

sys.path.insert(0, os.environ["TREE"])
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import sass_loop_stats  # docs/perf, beside this folder
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from safeattn import audit
from safeattn.kernels.configs import KernelConfig


def build(cfg: KernelConfig, causal: bool, gqa: bool, group: int):
    fn = audit._kernel_fn("bwd_dkdv_tma")
    cx = audit._constexprs("bwd_dkdv_tma", cfg, torch.bfloat16, 128, "causal")
    cx["HAS_WINDOW_RIGHT"] = causal  # the audit's "causal" variant, or dense
    cx["GQA"] = gqa
    if "group" in cx:  # a constexpr in 1b09797's kernel, a runtime argument before
        cx["group"] = group
    sig, consts, attrs = audit._signature(fn, torch.bfloat16, "causal", cx, 128)
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    options = {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages}
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def main() -> None:
    group = int(os.environ.get("GROUP", "4"))
    print(f"# tree {os.environ['TREE']}, ptxas {os.environ.get('TRITON_PTXAS_PATH', 'triton')}")
    for spec in os.environ["SPECS"].split(";"):
        m, n, w, s, causal, gqa = map(int, spec.split(","))
        compiled = build(KernelConfig(m, n, w, s), bool(causal), bool(gqa), group)
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(compiled.asm["cubin"])
            f.flush()
            loops = sorted(sass_loop_stats.loops(sass_loop_stats.instructions(f.name)))
        regs, stack = audit._regs_and_stack(compiled.asm["cubin"])
        name = f"M{m}-N{n}-w{w}-s{s} causal={causal} gqa={gqa}"
        print(f"{name}: registers {regs}, stack {stack} B, loops (len, hgmma, ldl/stl) {loops}")


if __name__ == "__main__":
    main()
