"""One backward of safeattn and one of FlexAttention on a dense SpeedSuite shape where
safeattn's backward trails FlexAttention's (SpeedSuite at 7972023: D=128 N=1024 0.95-0.96x,
N=4096 GQA 4 0.94-0.95x), bracketed for Nsight Compute (``--profile-from-start off``): both
are compiled and tuned before the bracket, so the profile holds exactly one backward of each
(safeattn's preprocess, dQ and dK/dV; FlexAttention's preprocess and its one fused kernel),
with their tiles (LaunchStats: block size, registers, shared memory, grid), occupancy and
stalls side by side.

    ncu --profile-from-start off --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section LaunchStats \\
        python docs/perf/ncu_bwd_flex.py [--n 1024] [--gqa 1] [--causal]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))


def main() -> int:
    import torch

    from benchmarks._attention import attention_call, attention_inputs

    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--gqa", type=int, default=1)
    ap.add_argument("--causal", action="store_true")
    args = ap.parse_args()
    graphs = {}
    for impl in ("safeattn", "flex"):
        q, k, v, g = attention_inputs(impl, "bfloat16", args.n, args.d, args.gqa)
        out = attention_call(impl, args.causal, args.n, args.gqa)(q, k, v)
        for _ in range(2):  # compile and tune outside the bracket
            torch.autograd.grad(out, (q, k, v), g, retain_graph=True)
        graphs[impl] = (out, (q, k, v), g)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for impl, (out, leaves, g) in graphs.items():
        torch.cuda.nvtx.range_push(impl)
        torch.autograd.grad(out, leaves, g, retain_graph=True)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.cudart().cudaProfilerStop()
    q = graphs["safeattn"][1][0]
    print(f"profiled safeattn then flex: B={q.shape[0]} Hq={q.shape[1]} gqa={args.gqa} "
          f"N={args.n} D={args.d} causal={args.causal} bf16")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
