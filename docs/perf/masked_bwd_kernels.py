"""Where the masked backward's time goes, safeattn beside FlexAttention (a diagnostic, not a
suite): per-kernel CUDA time of one backward (torch.profiler over 10 calls, µs per call) on
MaskedSpeedSuite's workloads, built and called as the suite does (``benchmarks._masks``),
one GPU, one process. MaskedSpeedSuite at 072a446 put safeattn's D=128 backward at 0.83-0.85x
FlexAttention's on bool_mask and key_padding_causal, where the dense causal D=128 backward
is at 1.00-1.06x.

    python docs/perf/masked_bwd_kernels.py [--d 128] [--mask key_padding_causal ...] >> k.jsonl
    python docs/perf/masked_bwd_kernels.py --table k.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def kernels_of_backward(case, calls: int = 10) -> tuple[dict[str, float], list]:
    """({kernel name: µs per backward} over ``calls`` backwards of one forward's graph,
    [(kernel name, µs)] of the last backward's launches in order: a kernel launched twice per
    backward, as safeattn's guarded second pass is, shows both launches there)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    q, k, v, g = case.inputs
    out = case.call(q, k, v)
    out.backward(g, retain_graph=True)  # compiles and tunes
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            for t in (q, k, v):
                t.grad = None
            out.backward(g, retain_graph=True)
        torch.cuda.synchronize()
    per: dict[str, float] = defaultdict(float)
    for e in prof.key_averages():
        if e.device_type.name == "CUDA" and e.device_time_total > 0:
            per[e.key[:60]] += e.device_time_total / calls
    launches = sorted(
        (e for e in prof.events() if e.device_type.name == "CUDA" and e.device_time_total > 0),
        key=lambda e: e.time_range.start,
    )
    per_call = len(launches) // calls
    last = [(e.name[:40], round(e.device_time_total, 1)) for e in launches[-per_call:]]
    return dict(per), last


def main(d: int, masks: list[str], dtype: str) -> None:
    import torch

    from benchmarks import _masks
    from benchmarks._attention import compiled_flex

    flex = compiled_flex()
    for mask in masks:
        for impl in ("safeattn", "flex"):
            case = _masks.mask_case(mask, impl, dtype, d, flex=flex if impl == "flex" else None)
            row = dict(gpu=torch.cuda.get_device_name(), impl=impl, mask=mask, d=d, dtype=dtype)
            row["kernels_us"], row["last_call"] = kernels_of_backward(case)
            row["total_us"] = sum(row["kernels_us"].values())
            print(json.dumps(row), flush=True)
            del case
            torch.cuda.empty_cache()


def table(path: str) -> None:
    rows = [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
    for r in rows:
        print(f"== {r['mask']} D={r['d']} {r['dtype']} {r['impl']}: {r['total_us']:.0f} µs")
        for name, us in sorted(r["kernels_us"].items(), key=lambda kv: -kv[1]):
            print(f"   {us:9.1f}  {name}")
        if r.get("last_call"):
            print(
                "   one backward's launches: "
                + ", ".join(f"{n.split('_', 1)[-1][:24]} {us:.0f}" for n, us in r["last_call"])
            )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--mask", action="append")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--table")
    args = ap.parse_args()
    if args.table:
        table(args.table)
    else:
        main(args.d, args.mask or ["key_padding_causal", "bool_mask", "sliding_window"], args.dtype)
