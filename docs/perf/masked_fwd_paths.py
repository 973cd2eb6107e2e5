"""The masked forward on the Hopper path against the portable one (a diagnostic): the gate
from 3c9ef46 to 072a446 on the H200 blocks bool_mask D=64 forward, 1.19x slower, its config
M128-N64-w4-s3 -> M128-N128-w8-s3; the first is the portable path's tuned entry (0.69 ms),
the second the Hopper path's (0.81 ms, its only other candidate 0.81 ms). One process per
path (``SAFEATTN_TMA=0`` or unset), each mask kind's forward as MaskedSpeedSuite calls it:
the GPU's time per call (the sum of its CUDA kernels' times under torch.profiler, 20 calls:
what the suite's timing measures), the wall time per call (``triton.testing.do_bench``'s
median: back-to-back calls, so the host's time where it exceeds the GPU's), the config and
where it came from, and the forward kernel's registers and spills.

    SAFEATTN_TMA=0 python docs/perf/masked_fwd_paths.py >> fwd.jsonl
    python docs/perf/masked_fwd_paths.py >> fwd.jsonl
    python docs/perf/masked_fwd_paths.py --table fwd.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
MASKS = ["bool_mask", "key_padding_causal", "sliding_window"]


def forward_ms(case, calls: int = 20) -> tuple[float, float]:
    """(GPU ms, wall ms) per call of ``case``'s forward, its inputs requiring grad as the
    suite times it."""
    import torch
    import triton
    from torch.profiler import ProfilerActivity, profile

    q, k, v, _ = case.inputs
    case.call(q, k, v)
    torch.cuda.synchronize()
    wall = triton.testing.do_bench(lambda: case.call(q, k, v), return_mode="median")
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            case.call(q, k, v)
        torch.cuda.synchronize()
    gpu_us = sum(e.device_time_total for e in prof.key_averages() if e.device_type.name == "CUDA")
    return gpu_us / calls / 1000, wall


def main(dtype: str) -> None:
    import torch

    from benchmarks import _masks
    from safeattn.kernels import launch

    for d in (64, 128):
        for mask in MASKS:
            case = _masks.mask_case(mask, "safeattn", dtype, d)
            gpu_ms, wall_ms = forward_ms(case)
            fwd = launch.launched_kernels()["forward"]
            row = dict(
                path="portable" if os.environ.get("SAFEATTN_TMA") == "0" else "auto",
                mask=mask, d=d, dtype=dtype, gpu_ms=round(gpu_ms, 4), wall_ms=round(wall_ms, 4),
                config=fwd.config,
                source=fwd.source, registers=fwd.registers, spills=fwd.spills,
            )  # fmt: skip
            print(json.dumps(row), flush=True)
            del case
            torch.cuda.empty_cache()


def table(path: str) -> None:
    rows = [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
    for r in sorted(rows, key=lambda r: (r["d"], r["mask"], r["path"])):
        print(f"D={r['d']:<3d} {r['mask']:19s} {r['path']:8s} GPU {r['gpu_ms']:.3f} ms, "
              f"wall {r['wall_ms']:.3f} ms  {r['config']}"
              f"({r['source']}) regs {r['registers']} spills {r['spills']} B")  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--table")
    args = ap.parse_args()
    if args.table:
        table(args.table)
    else:
        main(args.dtype)
