"""Cross-compile the dense (non-causal, no mask) and causal forward / dQ kernels for sm90 on
a CPU and print registers, local memory, shared memory and the SASS instruction count
(the output of docs/perf/dense_guard_sass_2026-11-23.txt). Run from a checkout:
``PYTHONPATH=. python docs/perf/dense_guard_sass.py``."""

from __future__ import annotations

import re
import subprocess
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

import safeattn.audit as au
from safeattn.kernels.configs import KernelConfig

SHAPES = [
    ("forward", 64, KernelConfig(128, 64, 4, 3)),
    ("forward", 128, KernelConfig(128, 128, 8, 3)),
    ("forward", 128, KernelConfig(128, 64, 8, 3)),
    ("bwd_dq", 64, KernelConfig(128, 64, 4, 3)),
    ("bwd_dq", 128, KernelConfig(64, 64, 4, 3)),
]


def constexprs(kernel: str, cfg: KernelConfig, head_dim: int, variant: str) -> dict:
    """The audit's "causal" constexprs; "dense" turns the causal bound off."""
    cx = au._constexprs(kernel, cfg, torch.float16, head_dim, "causal")
    cx["HAS_WINDOW_RIGHT"] = variant == "causal"
    return cx


def main() -> None:
    for kernel, head_dim, cfg in SHAPES:
        for variant in ("dense", "causal"):
            fn = au._kernel_fn(kernel)
            cx = constexprs(kernel, cfg, head_dim, variant)
            sig, consts, attrs = au._signature(fn, torch.float16, "causal", cx, head_dim)
            compiled = triton.compile(
                ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs),
                target=GPUTarget("cuda", 90, 32),
                options={"num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
            )
            regs, local = au._regs_and_stack(compiled.asm["cubin"])
            with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
                f.write(compiled.asm["cubin"])
                f.flush()
                sass = subprocess.run(
                    [au._triton_bin("cuobjdump"), "-sass", f.name],
                    capture_output=True, text=True, check=True,
                ).stdout  # fmt: skip
            n = len(re.findall(r"/\*[0-9a-f]{4,}\*/ ", sass))
            print(
                f"{kernel:8s} D={head_dim:3d} {cfg} {variant:6s} regs={regs} local={local} "
                f"smem={compiled.metadata.shared} sass_instr={n}",
                flush=True,
            )


if __name__ == "__main__":
    main()
