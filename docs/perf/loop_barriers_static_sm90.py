"""What a kernel's tile loop holds besides its matmuls, counted per iteration in its PTX:
CTA-wide barriers (``bar.sync``), mbarrier waits, ``cp.async`` waits, global loads, the
tensor-core instructions and their waits (``wgmma``), and exponentials. The loop counted is the
one holding the most ``wgmma.mma_async``. A diagnostic for issue 13's closing note.

Why: under Nsight Compute on the H200 the top stall of the D = 128 backward kernels is
``barrier`` (warps waiting at a CTA barrier for the program's other warps;
session_ncu_2026-12-03/). A barrier inside the loop keeps the program's two warpgroups in step,
so one cannot run its exponentials while the other keeps the tensor cores busy
(FlashAttention-3's ping-pong). The PTX comes from ``live_static_sm90.py --ir``, which
compiles a live build for sm90 exactly as the GPU call specialises it:

    python docs/perf/live_static_sm90.py dense --head-dim 128 --config bwd_dkdv=64,128,8,3 \\
        --config bwd_dq=128,64,8,4 --kernel _bwd_dkdv --kernel _bwd_dq --ir /tmp/ir
    python docs/perf/loop_barriers_static_sm90.py /tmp/ir/*.ptx
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

COUNTED = {
    "bar.sync": r"\bbar\.sync\b",
    "mbarrier wait": r"mbarrier\.try_wait",
    "cp.async wait": r"cp\.async\.wait_group",
    "ld.global": r"\bld\.global",
    "wgmma.wait": r"wgmma\.wait_group",
    "wgmma": r"wgmma\.mma_async",
    "ex2": r"ex2\.approx",
}
LABEL = re.compile(r"^(\$L__BB\d+_\d+):")
BACK_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);")


def loop_bodies(ptx: str) -> list[str]:
    """The PTX of each loop: from a label that a later branch jumps back to, to that branch."""
    lines = ptx.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := LABEL.match(line))}
    bodies = []
    for i, line in enumerate(lines):
        m = BACK_BRANCH.search(line)
        if m and m.group(1) in labels and labels[m.group(1)] < i:
            bodies.append("\n".join(lines[labels[m.group(1)] : i + 1]))
    return bodies


def main(paths: list[str]) -> None:
    for path in paths:
        bodies = loop_bodies(Path(path).read_text())
        body = max(bodies, key=lambda b: len(re.findall(COUNTED["wgmma"], b)), default="")
        counts = {name: len(re.findall(rx, body)) for name, rx in COUNTED.items()}
        print(json.dumps(dict(ptx=Path(path).name, per_iteration=counts)))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(sys.argv[1:])
