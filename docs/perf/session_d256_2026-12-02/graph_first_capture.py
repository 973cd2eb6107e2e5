"""Which CUDA-graph capture fails? Each argument, in order and in one process (impl:N), is
captured as ``redo_probe.py --graph`` captures it (bf16, causal, D = 128). Run at the end of
call 9 (2026-12-02): the first capture of each process failed with
cudaErrorStreamCaptureImplicit, whichever implementation it captured, sdpa_cudnn included.
Every later capture succeeded.

    PYTHONPATH=. python docs/perf/session_d256_2026-12-02/graph_first_capture.py \\
        safeattn:1024,safeattn:1024,safeattn:512
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.append(str(Path(__file__).resolve().parents[3]))

import redo_probe as rp  # beside this script: its folder is sys.path[0]

from benchmarks._attention import impl_context


def capture(impl: str, n: int) -> str:
    """The string ok, or the first line of the error the capture raised."""
    try:
        with impl_context(impl):
            leaves, _, _, fwd_bwd = rp._passes(impl, 128, n, 1)
            replay = rp._graphed(fwd_bwd, leaves)
            replay()
            torch.cuda.synchronize()
        return "ok"
    except Exception as exc:
        return next(line for line in str(exc).splitlines() if line.strip())[:90]


if __name__ == "__main__":
    for item in sys.argv[1].split(","):
        impl, n = item.split(":")
        print(impl, n, capture(impl, int(n)), flush=True)
