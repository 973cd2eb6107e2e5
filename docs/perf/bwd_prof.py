"""Where the backward's time goes (a diagnostic, not a suite): per-kernel CUDA time
(torch.profiler, 10 calls), wall time per call (50 calls, one sync at the end) and the CPU
time to issue one backward, for one workload of dkdv_variant_ab.py and one safeattn package
(``base``: the copy under .dev/base, ``new``: the tree). Prints one JSON line.

    mkdir -p .dev/base && git archive main safeattn | tar -x -C .dev/base
    PYTHONPATH=$PWD python docs/perf/bwd_prof.py new 128 sliding_window   # on a GPU

Used for docs/perf/dkdv_h100_2026-11-25.md, section 6.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dkdv_variant_ab as ab


def main(variant: str, d: str, kind: str) -> None:
    ab.setup(variant, int(d))
    import torch
    from torch.profiler import ProfilerActivity, profile

    import safeattn

    res = {"variant": variant, "D": int(d), "kind": kind, "file": safeattn.__file__}
    c = ab.case(kind, "safeattn", int(d))
    q, k, v, g = c.inputs
    ab.fwd_bwd(c)  # compiles and tunes
    out = c.call(q, k, v)

    def bwd():
        for t in (q, k, v):
            t.grad = None
        out.backward(g, retain_graph=True)

    for _ in range(20):
        bwd()
    torch.cuda.synchronize()
    n = 50
    t0 = time.perf_counter()
    for _ in range(n):
        bwd()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    res["cpu_issue_ms"] = (t1 - t0) / n * 1e3
    res["wall_ms"] = (t2 - t0) / n * 1e3
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            bwd()
        torch.cuda.synchronize()
    gpu = {}
    for e in prof.key_averages():
        us = getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0)
        if us > 0:
            gpu[e.key[:60]] = round(us / 10, 1)
    res["gpu_us_per_call"] = dict(sorted(gpu.items(), key=lambda x: -x[1])[:12])
    cpu = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)[:12]
    res["cpu_top_us_per_call"] = {e.key[:60]: round(e.self_cpu_time_total / 10, 1) for e in cpu}
    print(json.dumps(res))


if __name__ == "__main__":
    main(*sys.argv[1:4])
