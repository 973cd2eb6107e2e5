"""Static sm90 (cross-compiled, no GPU): what the dense D=128 Hopper backward kernels' tile loops
hold besides their matmuls: CTA-wide barriers (``bar.sync``), mbarrier waits, ``cp.async``
waits, global loads, and the tensor-core waits (``wgmma.wait_group``), counted in the PTX of the
loop's body; registers and spills beside them. A diagnostic for issue 13's closing note.

Why: under Nsight Compute on the H200 the top stall of both backward kernels is ``barrier``
(warps waiting at a CTA barrier for the program's other warps; session_ncu_2026-12-03/). A
barrier inside the loop keeps the program's two warpgroups in step, so one cannot run its
exponentials while the other keeps the tensor cores busy (FlashAttention-3's ping-pong). This
shows where those barriers come from: the builds are the ones the dense SpeedSuite calls launch
(``NO_TAIL``, no mask, GQA off), the configs the H200's tuner chose there (LiveResourcesSuite).

    python docs/perf/loop_barriers_static_sm90.py [bwd_dkdv_tma:M64-N128-w8-s3 ...]

Run it with the GPU's triton (3.6) for the builds that ran; the counts are per loop iteration
of the innermost tile loop (the one holding the most ``wgmma.mma_async``).
"""

from __future__ import annotations

import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from safeattn import audit
from safeattn.kernels.configs import KernelConfig

DEFAULT = ["bwd_dkdv_tma:M64-N128-w8-s3", "bwd_dq_tma:M128-N64-w8-s4", "bwd_dq_tma:M64-N64-w4-s2"]
COUNTED = {
    "bar.sync": r"\bbar\.sync\b",
    "mbarrier wait": r"mbarrier\.try_wait",
    "cp.async wait": r"cp\.async\.wait_group",
    "ld.global": r"\bld\.global",
    "wgmma.wait": r"wgmma\.wait_group",
    "wgmma": r"wgmma\.mma_async",
    "ex2": r"ex2\.approx",
}


def build(spec: str):
    """Compile one ``kernel:config`` as the dense D=128 bf16 call launches it."""
    kname, cfg = spec.split(":")
    m, n, w, s = (int(x[1:]) for x in cfg.split("-"))
    cfg = KernelConfig(m, n, w, s)
    fn = audit._kernel_fn(kname)
    cx = audit._constexprs(kname, cfg, torch.bfloat16, 128, "causal")
    cx.update(HAS_WINDOW_RIGHT=False, BOTTOM_RIGHT=False, NO_TAIL=True)
    if "dkdv" in kname:
        cx.update(GQA=False, GROUP=1)
    sig, consts, attrs = audit._signature(fn, torch.bfloat16, "causal", cx, 128)
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(
        src, target=GPUTarget("cuda", 90, 32), options={"num_warps": w, "num_stages": s}
    )


def loop_bodies(ptx: str) -> list[str]:
    """The PTX of each natural loop: from a label that a later branch jumps back to, to that
    branch."""
    lines = ptx.splitlines()
    labels = {
        m.group(1): i
        for i, line in enumerate(lines)
        if (m := re.match(r"^(\$L__BB\d+_\d+):", line))
    }
    bodies = []
    for i, line in enumerate(lines):
        m = re.search(r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);", line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            bodies.append("\n".join(lines[labels[m.group(1)] : i + 1]))
    return bodies


def main(specs: list[str]) -> None:
    print(f"# triton {triton.__version__}, sm90, bf16, D=128, dense NO_TAIL builds")
    for spec in specs:
        k = build(spec)
        regs, stack = audit._regs_and_stack(k.asm["cubin"])
        body = max(loop_bodies(k.asm["ptx"]), key=lambda b: len(re.findall(COUNTED["wgmma"], b)))
        counts = {name: len(re.findall(rx, body)) for name, rx in COUNTED.items()}
        print(json.dumps(dict(build=spec, registers=regs, spilled=stack, shared=k.metadata.shared,
                              per_iteration=counts)))  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT)
