"""Why did gqa_dkdv_probe.py time the new tree's causal GQA backward slower (2.03 ms against
1.80) when its dK/dV candidates were all faster? One process per tree (``PYTHONPATH=<tree>``):
bf16, D=128, N=4096, B=4, Hq=16, Hkv=4, causal. With the tree's committed table (what the
SpeedSuite runs), then with ``--config`` forcing the dK/dV config: the whole backward's median
(``triton.testing.do_bench``) and each kernel's CUDA time in one backward (torch.profiler over
10 backwards), the guarded redo launches included.

    PYTHONPATH=/tmp/base python causal_gqa_check.py --label base [--config M64-N64-w4-s2]
"""

import argparse
import json
import os
from collections import defaultdict


def main(label: str, config: str | None) -> None:
    if config:
        os.environ.update(SAFEATTN_TUNING_TABLE="0", SAFEATTN_TUNING_CACHE="0")
    import torch
    import triton
    from torch.profiler import ProfilerActivity, profile

    import safeattn
    from safeattn.kernels import configs

    if config:
        shipped = configs.candidates
        m, n, w, st = (int(x[1:]) for x in config.split("-"))
        forced = configs.KernelConfig(m, n, w, st)

        def candidates(kernel, *a, **kw):
            listed = shipped(kernel, *a, **kw)
            return [forced] if kernel == "bwd_dkdv" else listed[:1]

        configs.candidates = candidates
    n, d, b, hq, hkv = 4096, 128, 4, 16, 4
    gen = torch.Generator(device="cuda").manual_seed(d)
    q, k, v, do = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
                   for h in (hq, hkv, hkv, hq))  # fmt: skip
    for t in (q, k, v):
        t.requires_grad_(True)
    out = safeattn.attention(q, k, v, causal=True)
    grad = lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
    grad()
    torch.cuda.synchronize()
    ms = [triton.testing.do_bench(grad, return_mode="median") for _ in range(3)]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            grad()
        torch.cuda.synchronize()
    kernels = defaultdict(float)
    for e in prof.events():
        if e.device_type.name == "CUDA":
            kernels[e.name[:40]] += e.device_time / 10
    from safeattn.kernels import launch

    print(json.dumps(dict(label=label, config=config, bwd_ms=[round(x, 4) for x in ms],
                          launched={k: [r.config, r.registers, r.spills, r.source]
                                    for k, r in launch.launched_kernels().items()},
                          kernels_us={k: round(v, 1) for k, v in kernels.items()})),
          flush=True)  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", default="tree")
    ap.add_argument("--config")
    args = ap.parse_args()
    main(args.label, args.config)
