"""How long does the host take to issue one safeattn forward and one backward, and where does
that time go? (The swing probe of this folder found do_bench's figures above the GPU time
whenever the host fell behind.)

Per case: the issue time of each pass (``time.perf_counter`` around the call, the GPU idle
before it, no synchronisation after: what the host spends before it can go on), medians of
30 calls (``--calls``), for safeattn and SDPA's cuDNN backend; then cProfile over 50
safeattn calls of each pass (the backward in the calling thread:
``torch.autograd.set_multithreading_enabled``),
the functions with the most own time and the most cumulative time.

    PYTHONPATH=. python docs/perf/session_swing_2026-12-02/host_probe.py [--top 30] > host.txt
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

# benchmarks/ from this checkout, after PYTHONPATH: the tree under test's safeattn comes first.
sys.path.append(str(Path(__file__).resolve().parents[3]))

CASES = [  # (dtype, D, N, causal, B, H)
    ("bfloat16", 128, 1024, True, 16, 16),
    ("bfloat16", 128, 4096, False, 4, 16),
]


def _calls(case):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import safeattn

    dtype, d, n, causal, b, h = case
    kind = getattr(torch, dtype)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=kind).requires_grad_(True)
               for _ in range(3))  # fmt: skip
    do = torch.randn(b, h, n, d, device="cuda", dtype=kind)

    def ours():
        return safeattn.attention(q, k, v, causal=causal)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return {"safeattn": ours, "cudnn": cudnn}, (q, k, v), do


def _issue_ms(fn, calls: int = 30) -> float:
    import torch

    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def _profile(fn, calls: int, top: int) -> str:
    import torch

    prof = cProfile.Profile()
    for _ in range(calls):
        torch.cuda.synchronize()
        prof.enable()
        fn()
        prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--top", type=int, default=30, help="0: the issue times only, no cProfile")
    ap.add_argument("--calls", type=int, default=30, help="calls per issue-time median")
    args = ap.parse_args()
    import torch

    torch.autograd.set_multithreading_enabled(False)  # the backward in this thread (cProfile)
    import safeattn

    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {safeattn.__file__}")
    profiles = []
    for case in CASES:
        impls, leaves, do = _calls(case)
        for name, fwd in impls.items():
            out = fwd()
            out.backward(do)  # compile, tune
            kept = fwd()

            def bwd(kept=kept, leaves=leaves, do=do):
                for t in leaves:
                    t.grad = None
                kept.backward(do, retain_graph=True)

            f_ms, b_ms = _issue_ms(fwd, args.calls), _issue_ms(bwd, args.calls)
            print(f"{case}: {name:8s} host issue ms: forward {f_ms:.3f}  backward {b_ms:.3f}")
            if name == "safeattn" and args.top > 0:
                profiles.append((case, "forward", _profile(fwd, 50, args.top)))
                profiles.append((case, "backward", _profile(bwd, 50, args.top)))
    for case, pas, text in profiles:
        print(f"\n=== cProfile, safeattn {pas}, {case}, 50 calls ===\n{text}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
