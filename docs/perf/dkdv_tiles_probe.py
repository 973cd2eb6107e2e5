"""One backward kernel's tiles on the Hopper path at D=128 (``--head-dim``), each config in
turn the only candidate for that kernel (no table, no cache; the other kernels keep their
shipped choice). Per config: the kernel's CUDA time in one backward (torch.profiler over 10
backwards, dQ on the caller's stream so each kernel is timed alone), the registers, spilled
bytes and shared memory of the build that ran, and (``--whole``) the whole backward's median
GPU time (``benchmarks._gpu_measure.cuda_event_samples``) with dQ beside dK/dV and without.
A diagnostic.

The default is the dK/dV kernel with FlexAttention's backward tile (128 keys per program,
8 warps: what Nsight Compute showed its fused kernel launching, ``ncu_bwd_flex.py``) beside
the shipped M32-N64-w4 tiles (run at b0a04d0, session_7972023_2026-11-29/dkdv_tiles.jsonl).
``--kernel bwd_dq --whole`` asks whether a dQ tile that shares an SM with dK/dV programs
(less shared memory than the shipped M128-N64-w8-s4's 198 KB) pays once the two overlap: the
tuner times each kernel alone and cannot see that.

    python docs/perf/dkdv_tiles_probe.py >> tiles.jsonl
    python docs/perf/dkdv_tiles_probe.py --kernel bwd_dq --whole \\
        --configs M128-N64-w8-s4,M128-N64-w8-s3,M64-N64-w4-s2,M64-N32-w4-s3 >> dq.jsonl

These calls' lengths are multiples of every tile: they run the backward kernels' NO_TAIL
builds (``launch.Meta.no_tail``; before it, the dense dK/dV kernel's ALL_FULL build).
``--causal`` times the causal calls instead; ``--label`` names the source tree in each row
(the probe runs the ``safeattn`` beside it, so an older checkout's copy times that one).

At D = 256 the Hopper path runs dK/dV as two launches of the same kernel (dV, then dK:
``hopper.split_dkdv``); ``--kernel bwd_dv`` or ``bwd_dk`` sweeps one of them, and each row then
holds both launches' times in order (``dkdv_parts_us``: dV, dK). ``--shapes 4096:1`` keeps
only those (N, group) shapes:

    python docs/perf/dkdv_tiles_probe.py --head-dim 256 --causal --kernel bwd_dk \
        --shapes 4096:1 --configs M32-N128-w8-s2,M64-N128-w8-s2 >> d256_dk.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
os.environ.update(SAFEATTN_TUNING_CACHE="0", SAFEATTN_AUTOTUNE="1", SAFEATTN_BWD_OVERLAP="0")
CONFIGS = ["M32-N64-w4-s3", "M64-N128-w8-s2", "M64-N128-w8-s3", "M32-N128-w8-s3",
           "M64-N64-w4-s2", "M64-N64-w8-s2"]  # fmt: skip
SHAPES = [(1024, 1), (4096, 1), (4096, 4)]  # (N, query heads per KV head); D=128, dense, bf16


def whole_ms(fn, overlap: bool) -> float:
    from benchmarks._gpu_measure import cuda_event_samples

    os.environ["SAFEATTN_BWD_OVERLAP"] = "1" if overlap else "0"
    try:
        return round(statistics.median(cuda_event_samples(fn, 15)), 4)
    finally:
        os.environ["SAFEATTN_BWD_OVERLAP"] = "0"


def _grad_of(out, leaves, g):
    import torch

    return lambda: torch.autograd.grad(out, leaves, g, retain_graph=True)


def _part_times(prof, runs: int) -> list[float]:
    """Median time (us) of each ``_bwd_dkdv`` launch of a backward, in launch order, over
    ``runs`` backwards: [dV, dK] where the kernel runs as two launches, else [dK/dV]."""
    times = [e.device_time_total for e in prof.events()
             if e.name.startswith("_bwd_dkdv") and e.device_time_total > 0]  # fmt: skip
    per = len(times) // runs
    if per == 0 or len(times) % runs:
        return []
    return [round(statistics.median(times[i::per]), 1) for i in range(per)]


def main(kernel: str, names: list[str], whole: bool, causal: bool, label: str,
         head_dim: int = 128, shapes: list[tuple[int, int]] | None = None) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmarks._attention import attention_call, attention_inputs
    from safeattn.kernels import configs, launch

    shipped = configs.candidates
    pick = {"cfg": None}

    def candidates(name, bd, dtype, smem_limit=None, masked=False, tma=False, dropout=False):
        if name == kernel and pick["cfg"] is not None:
            m, n, w, st = (int(x[1:]) for x in pick["cfg"].split("-"))
            return [configs.KernelConfig(m, n, w, st)]
        return shipped(name, bd, dtype, smem_limit, masked, tma, dropout)

    configs.candidates = candidates
    for n, gqa in shapes or SHAPES:
        q, k, v, g = attention_inputs("safeattn", "bfloat16", n, head_dim, gqa)
        for cfg in names:
            pick["cfg"] = cfg
            launch.clear_choices()
            row = dict(tree=label, kernel=kernel, causal=causal, d=head_dim, n=n, gqa=gqa,
                       config=cfg)
            try:
                out = attention_call("safeattn", causal, n, gqa)(q, k, v)
                grad = _grad_of(out, (q, k, v), g)
                grad()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(10):
                        grad()
                    torch.cuda.synchronize()
                for e in prof.key_averages():
                    for name in ("_bwd_dkdv", "_bwd_dq", "_bwd_preprocess"):
                        if e.key.startswith(name) and e.device_time_total > 0:
                            row[name.strip("_") + "_us"] = round(e.device_time_total / 10, 1)
                row["dkdv_parts_us"] = _part_times(prof, 10)
                res = launch.launched_kernels()[kernel]
                row.update(ran=res.config, registers=res.registers, spills=res.spills,
                           shared=res.shared_bytes)  # fmt: skip
                if whole:
                    row.update(serial_ms=whole_ms(grad, False), overlap_ms=whole_ms(grad, True))
            except Exception as exc:  # a config that does not build: say so, go on
                row["error"] = str(exc).splitlines()[0][:200]
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    kernels = ["bwd_dkdv", "bwd_dq", "bwd_dv", "bwd_dk"]
    ap.add_argument("--kernel", choices=kernels, default="bwd_dkdv")
    ap.add_argument("--configs", help="comma-separated, e.g. M64-N64-w4-s2 (default: CONFIGS)")
    ap.add_argument("--whole", action="store_true", help="also the whole backward, both ways")
    ap.add_argument("--causal", action="store_true", help="causal calls (default: dense)")
    ap.add_argument("--label", default="", help="a name for the source tree, in each row")
    ap.add_argument("--head-dim", type=int, default=128, help="D (B and H: the SpeedSuite's)")
    ap.add_argument("--shapes", help="comma-separated N:group, e.g. 4096:1 (default: SHAPES)")
    args = ap.parse_args()
    names = args.configs.split(",") if args.configs else CONFIGS
    shapes = ([tuple(int(x) for x in s.split(":")) for s in args.shapes.split(",")]
              if args.shapes else None)  # fmt: skip
    main(args.kernel, names, args.whole, args.causal, args.label, args.head_dim, shapes)
