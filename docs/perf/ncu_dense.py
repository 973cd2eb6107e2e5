"""One forward + backward of safeattn on a dense SpeedSuite shape, bracketed for Nsight
Compute (``--profile-from-start off``): the kernels are compiled and tuned before the
bracket, so the profile holds exactly the timed launches (issue 13 asks for achieved
TFLOP/s, occupancy and stalls where a target is missed).

    ncu --profile-from-start off --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section LaunchStats \\
        python docs/perf/ncu_dense.py [--d 128] [--n 4096] [--causal]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import safeattn


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--causal", action="store_true")
    args = ap.parse_args()
    b, h = 16384 // args.n, 2048 // args.d
    q, k, v = (torch.randn(b, h, args.n, args.d, device="cuda", dtype=torch.bfloat16)
               .requires_grad_(True) for _ in range(3))  # fmt: skip
    do = torch.randn_like(q)
    for _ in range(2):  # compile and tune outside the bracket
        safeattn.attention(q, k, v, causal=args.causal).backward(do)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    safeattn.attention(q, k, v, causal=args.causal).backward(do)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f"profiled B={b} H={h} N={args.n} D={args.d} causal={args.causal} bf16")
    return 0


if __name__ == "__main__":
    sys.exit(main())
