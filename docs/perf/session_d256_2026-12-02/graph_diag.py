"""Why does capturing safeattn's causal forward + backward at N = 512 (B = 32, H = 16, D = 128,
bf16) in a CUDA graph fail with cudaErrorStreamCaptureImplicit, when N = 1024 captures? Each
launch of safeattn's kernels during the capture is logged (kernel, grid, whether Triton
compiled it then), with and without dQ on its side stream. A diagnostic.

    PYTHONPATH=. python docs/perf/session_d256_2026-12-02/graph_diag.py 512 [--serial]
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[3]))
if "--serial" in sys.argv:
    os.environ["SAFEATTN_BWD_OVERLAP"] = "0"

import redo_probe as rp  # beside this script: its folder is sys.path[0]
import torch
from triton.runtime.jit import JITFunction

from safeattn.kernels import launch

log: list[str] = []
compile_of = JITFunction._do_compile


def logged_compile(self, *args, **kwargs):
    log.append(f"  compile {self.__name__} capturing={torch.cuda.is_current_stream_capturing()}")
    return compile_of(self, *args, **kwargs)


run_of = launch._run


def logged_run(name, device, fn, grid, args, kwargs):
    log.append(f"  launch {name} grid={grid} capturing={torch.cuda.is_current_stream_capturing()}"
               f" stream={torch.cuda.current_stream().cuda_stream:#x}")  # fmt: skip
    return run_of(name, device, fn, grid, args, kwargs)


JITFunction._do_compile = logged_compile
launch._run = logged_run
n = int(sys.argv[1])
leaves, _, _, fwd_bwd = rp._passes("safeattn", 128, n, 1)
log.append("-- capture")
try:
    replay = rp._graphed(fwd_bwd, leaves)
    replay()
    torch.cuda.synchronize()
    log.append("captured and replayed")
except Exception:
    # the last error line (CUDA's messages end in blank lines and hints)
    log.append([line for line in traceback.format_exc().splitlines() if "Error" in line][-1])
start = max(i for i, line in enumerate(log) if line.startswith("-- capture"))
print(f"N={n} serial={'--serial' in sys.argv}", *log[start - 12 :], sep="\n")
