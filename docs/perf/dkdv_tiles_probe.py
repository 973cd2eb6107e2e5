"""The dK/dV kernel on the Hopper path at D=128 with FlexAttention's backward tile (128 keys
per program, 8 warps: what Nsight Compute showed its fused kernel launching,
``ncu_bwd_flex.py``) beside the shipped M32-N64-w4 tiles: per config, the dK/dV kernel's
CUDA time in one backward (torch.profiler over 10 backwards, µs each), registers, spilled
bytes and shared memory of the build that ran. Each config is the only dK/dV candidate in
turn (no table, no cache); the other kernels keep their shipped choice; dQ on the caller's
stream (SAFEATTN_BWD_OVERLAP=0) so the profile times each kernel alone. A diagnostic.

    python docs/perf/dkdv_tiles_probe.py >> tiles.jsonl
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
os.environ.update(SAFEATTN_TUNING_CACHE="0", SAFEATTN_AUTOTUNE="1", SAFEATTN_BWD_OVERLAP="0")
CONFIGS = ["M32-N64-w4-s3", "M64-N128-w8-s2", "M64-N128-w8-s3", "M32-N128-w8-s3",
           "M64-N64-w4-s2", "M64-N64-w8-s2"]  # fmt: skip
SHAPES = [(1024, 1), (4096, 4)]  # (N, query heads per KV head); D=128, dense, bf16


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmarks._attention import attention_call, attention_inputs
    from safeattn.kernels import configs, launch

    shipped = configs.candidates
    pick = {"cfg": None}

    def candidates(kernel, bd, dtype, smem_limit=None, masked=False, tma=False, dropout=False):
        if kernel == "bwd_dkdv" and pick["cfg"] is not None:
            m, n, w, st = (int(x[1:]) for x in pick["cfg"].split("-"))
            return [configs.KernelConfig(m, n, w, st)]
        return shipped(kernel, bd, dtype, smem_limit, masked, tma, dropout)

    configs.candidates = candidates
    for n, gqa in SHAPES:
        q, k, v, g = attention_inputs("safeattn", "bfloat16", n, 128, gqa)
        for cfg in CONFIGS:
            pick["cfg"] = cfg
            launch.clear_choices()
            row = dict(n=n, gqa=gqa, config=cfg)
            try:
                out = attention_call("safeattn", False, n, gqa)(q, k, v)
                torch.autograd.grad(out, (q, k, v), g, retain_graph=True)
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        torch.autograd.grad(out, (q, k, v), g, retain_graph=True)
                    torch.cuda.synchronize()
                for e in prof.key_averages():
                    for name in ("_bwd_dkdv", "_bwd_dq", "_bwd_preprocess"):
                        if e.key.startswith(name) and e.device_time_total > 0:
                            row[name.strip("_") + "_us"] = round(e.device_time_total / 10, 1)
                res = launch.launched_kernels()["bwd_dkdv"]
                row.update(ran=res.config, registers=res.registers, spills=res.spills,
                           shared=res.shared_bytes)  # fmt: skip
            except Exception as exc:  # a config that does not build: say so, go on
                row["error"] = str(exc).splitlines()[0][:200]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
