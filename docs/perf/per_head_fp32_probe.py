"""fp32 GQA dK/dV per query head (``passes._per_query_head``) against the group summed in the
kernel, in one process: backward time, peak memory and dK/dV error against fp64.

    python docs/perf/per_head_fp32_probe.py           # CUDA; one line per shape and mode

Each mode runs on the same inputs; "in_kernel" patches ``_per_query_head`` to False (the
GQA build the fp32 path ran before). Errors are max |safeattn - fp64 reference| and the
same for PyTorch's fp32 math (``safeattn.reference`` in fp32), whose ratio the tests bound.
"""

from __future__ import annotations

import os
import statistics
import sys

import torch

sys.path.insert(0, os.getcwd())  # run from the repository root
import safeattn
from safeattn import reference
from safeattn.kernels import passes

# (name, B, Hq, Hkv, Nq, Nk, D, kwargs): the soft-capping test's case, and a causal layer.
SHAPES = [
    ("softcap_plain", 2, 8, 2, 700, 1000, 128, {"softcap": 3.0}),
    ("causal_gqa4", 2, 16, 4, 2048, 2048, 128, {"causal": True}),
]


def run(name, b, hq, hkv, nq, nk, d, kw, mode):
    g = torch.Generator().manual_seed(31)
    q = (torch.randn(b, hq, nq, d, generator=g) * 1.5 / d**0.25).cuda()
    k = (torch.randn(b, hkv, nk, d, generator=g) * 1.5 / d**0.25).cuda()
    v = torch.randn(b, hkv, nk, d, generator=g).cuda()
    do = torch.randn(b, hq, nq, d, generator=g).cuda()
    qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
    out = safeattn.attention(qs, ks, vs, **kw)
    times = []
    for _ in range(7):
        for t in (qs, ks, vs):
            t.grad = None
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        start, end = torch.cuda.Event(True), torch.cuda.Event(True)
        start.record()
        out.backward(do, retain_graph=True)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    peak = torch.cuda.max_memory_allocated() - base
    grads = {"dk": ks.grad, "dv": vs.grad}
    ref = [t.double().requires_grad_() for t in (q, k, v)]
    reference.attention(*ref, **kw).backward(do.double())
    f32 = [t.clone().requires_grad_() for t in (q, k, v)]
    reference.attention(*f32, **kw).backward(do)
    errs = {
        n: ((grads[n].double() - r.grad).abs().max().item(),
            (f.grad.double() - r.grad).abs().max().item())
        for n, r, f in (("dk", ref[1], f32[1]), ("dv", ref[2], f32[2]))
    }  # fmt: skip
    err = "  ".join(f"{n} {a:.3e} (torch {t:.3e}, {a / t:.2f}x)" for n, (a, t) in errs.items())
    print(f"{name:<14} {mode:<10} bwd {statistics.median(times[2:]):8.3f} ms  "
          f"peak +{peak / 2**20:8.1f} MiB  {err}", flush=True)  # fmt: skip


def main() -> None:
    real = passes._per_query_head
    for shape in SHAPES:
        for mode in ("per_head", "in_kernel"):
            passes._per_query_head = real if mode == "per_head" else (lambda group, dtype: False)
            run(*shape, mode)
    passes._per_query_head = real


if __name__ == "__main__":
    main()
