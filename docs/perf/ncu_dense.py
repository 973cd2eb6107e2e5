"""One forward + backward of safeattn (or ``--impl cudnn``: SDPA's cuDNN backend, the peer
issue 13's ratios are taken against) on a dense SpeedSuite shape, bracketed for Nsight
Compute (``--profile-from-start off``): the kernels are compiled and tuned before the
bracket, so the profile holds exactly the timed launches (issue 13 asks for achieved
TFLOP/s, occupancy and stalls where a target is missed). ``--gqa 4``: four query heads per
K/V head (SpeedSuite's GQA rows; the causal one is the ModelStepSuite layer's shape).

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \\
        --section Occupancy --section WarpStateStats --section LaunchStats \\
        python docs/perf/ncu_dense.py [--d 128] [--n 4096] [--causal] [--gqa 4] [--impl cudnn]
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
    ap.add_argument("--gqa", type=int, default=1, help="query heads per K/V head")
    ap.add_argument("--impl", choices=("safeattn", "cudnn"), default="safeattn")
    args = ap.parse_args()
    b, h = 16384 // args.n, 2048 // args.d
    q = torch.randn(b, h, args.n, args.d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, h // args.gqa, args.n, args.d, device="cuda", dtype=torch.bfloat16)
            for _ in range(2))  # fmt: skip
    q, k, v = (t.requires_grad_(True) for t in (q, k, v))
    do = torch.randn_like(q)

    def step() -> None:
        if args.impl == "safeattn":
            out = safeattn.attention(q, k, v, causal=args.causal)
        else:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                out = torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, is_causal=args.causal, enable_gqa=args.gqa > 1
                )
        out.backward(do)

    for _ in range(2):  # compile and tune outside the bracket
        step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    step()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    print(f"profiled {args.impl} B={b} H={h} gqa={args.gqa} N={args.n} D={args.d} "
          f"causal={args.causal} bf16")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
