"""The forward's ALL_FULL build (``forward._fwd_rows``: a dense call whose lengths are multiples
of every tile compiles the full key loop only) against the general build, config by config on
the Hopper path at D=128, bf16, dense, SpeedSuite's shapes, with SDPA's cuDNN backend beside.
Per (shape, config, build): the forward's median GPU time (``cuda_event_samples``, 30 calls,
as SpeedSuite times it: inputs requiring grad), and the registers, spilled bytes and shared
memory of the build that ran. Each config is in turn the only candidate (no table, no cache).
A diagnostic: one JSON line per row. It ran at 66296ff (results:
session_full_dkdv_2026-11-29/fwd_all_full.jsonl); the forward's ALL_FULL build was taken out
again after it (slower), so at later commits both of its builds are the general one.

    python docs/perf/fwd_full_probe.py > fwd_full.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
os.environ.update(SAFEATTN_TUNING_CACHE="0", SAFEATTN_AUTOTUNE="1")
CONFIGS = ["M128-N128-w8-s2", "M128-N128-w8-s3", "M128-N64-w8-s3", "M128-N64-w4-s3"]
SHAPES = [(1024, 1), (4096, 1), (4096, 4)]  # (N, query heads per KV head)


def main(names: list[str]) -> None:
    import torch

    from benchmarks._attention import attention_call, attention_inputs
    from benchmarks._gpu_measure import cuda_event_samples
    from safeattn.kernels import configs, launch

    shipped, largest = configs.candidates, configs.largest_block
    pick: dict = {"cfg": None, "full": True}

    def candidates(name, bd, dtype, smem_limit=None, masked=False, tma=False, dropout=False):
        if name == "forward" and pick["cfg"] is not None:
            m, n, w, st = (int(x[1:]) for x in pick["cfg"].split("-"))
            return [configs.KernelConfig(m, n, w, st)]
        return shipped(name, bd, dtype, smem_limit, masked, tma, dropout)

    configs.candidates = candidates
    # the general build: no length is a multiple of this
    configs.largest_block = lambda interpreted: largest(interpreted) if pick["full"] else 1 << 40

    def median_ms(fn, args: tuple) -> float:
        return round(statistics.median(cuda_event_samples(lambda: fn(*args), 30)), 4)

    for n, gqa in SHAPES:
        q, k, v, _ = attention_inputs("safeattn", "bfloat16", n, 128, gqa)
        if gqa == 1:
            cudnn = attention_call("sdpa_cudnn", False, n, gqa)
            cudnn(q, k, v)
            ms = median_ms(cudnn, (q, k, v))
            print(json.dumps(dict(n=n, gqa=gqa, impl="sdpa_cudnn", ms=ms)), flush=True)
        for cfg in names:
            for full in (False, True):
                pick.update(cfg=cfg, full=full)
                launch.clear_choices()
                row = dict(n=n, gqa=gqa, impl="safeattn", config=cfg, all_full=full)
                try:
                    fn = attention_call("safeattn", False, n, gqa)
                    fn(q, k, v)
                    torch.cuda.synchronize()
                    res = launch.launched_kernels()["forward"]
                    row.update(ran=res.config, registers=res.registers, spills=res.spills,
                               shared=res.shared_bytes, ms=median_ms(fn, (q, k, v)))  # fmt: skip
                except Exception as exc:  # a config that does not build: say so, go on
                    row["error"] = str(exc).splitlines()[0][:200]
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", help="comma-separated, e.g. M128-N128-w8-s2 (default: CONFIGS)")
    args = ap.parse_args()
    main(args.configs.split(",") if args.configs else CONFIGS)
