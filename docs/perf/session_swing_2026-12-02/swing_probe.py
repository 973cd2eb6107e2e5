"""Where does the causal rows' swing come from (issue 13; docs/perf/session_mark_2026-12-02,
section 3: the D = 256 causal forward at 0.59-0.87 ms between and within processes)?

One process. For each trial the inputs are allocated anew after a pad allocation of another
size (so they land at other addresses) and the same shape is timed three ways:

- ``bench``: ``triton.testing.do_bench`` median, as ``docs/perf/tree_ab.py`` times (the
  figures that swung);
- ``events``: ``benchmarks._gpu_measure.cuda_event_samples`` median, as the asv suites time
  (the GPU sleeps before each call, so the host's issue time is not in it);
- ``kernels``: each kernel's own GPU duration under ``torch.profiler`` (medians over the
  profiled calls; ``name#i``: the i-th launch of that kernel in a call, so a first launch and
  its guarded redo stay apart), with the stream it ran on. The rows of 2026-12-02 were
  recorded before that split: their medians mix the two.

and under three launch orders (``schedule.sched_chunk``, monkeypatched): ``shipped``, ``1``
(one (b, h) pair after another) and ``all`` (every pair in one chunk). With ``--timeline``,
one backward's kernels are also written with their start and end (us from the first), to see
the gaps between the preprocess, dQ (side stream) and dK/dV.

    PYTHONPATH=. python docs/perf/session_swing_2026-12-02/swing_probe.py --trials 8 >> swing.jsonl
    python docs/perf/session_swing_2026-12-02/swing_probe.py --table swing.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docs/perf: tree_ab

from tree_ab import gpu_and_bench_ms

SHAPES = {  # name: (dtype, D, N, causal, B, H)
    "d256_causal": ("bfloat16", 256, 4096, True, 4, 8),
    "d128_causal": ("bfloat16", 128, 4096, True, 4, 16),
    "d128_dense": ("bfloat16", 128, 4096, False, 4, 16),
}
PADS_MB = [0, 1, 3, 7, 33, 129, 2, 65, 5, 17]
ORDERS = ("shipped", "1", "all")


def _inputs(shape, seed=0):
    import torch

    dtype, d, n, _, b, h = shape
    gen = torch.Generator(device="cuda").manual_seed(seed)
    kind = getattr(torch, dtype)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=kind, generator=gen)
               .requires_grad_(True) for _ in range(3))  # fmt: skip
    do = torch.randn(b, h, n, d, device="cuda", dtype=kind, generator=gen)
    return q, k, v, do


def _kernel_times(fn, calls: int = 10) -> dict[str, dict]:
    """{kernel name: {"ms": median GPU duration, "stream": id, "n": launches per call}}."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    by_name: dict[str, list] = defaultdict(list)
    for e in sorted(prof.events(), key=lambda e: e.time_range.start):
        if e.device_type.name == "CUDA" and "elementwise" not in e.name:
            by_name[e.name].append(e)
    out = {}
    for name, evs in by_name.items():
        # A kernel launched k times per call (a first launch and its guarded redo share the
        # name): the i-th launch of each call apart, as name#i.
        per_call = max(1, len(evs) // calls)
        for i in range(per_call):
            mine = evs[i::per_call]
            ms = [(e.time_range.end - e.time_range.start) / 1e3 for e in mine]
            out[f"{name[:40]}#{i}"] = {"ms": statistics.median(ms),
                                       "stream": mine[0].device_resource_id}  # fmt: skip
    return out


def _timeline(fn) -> list[dict]:
    """One call's kernels: name, stream, start and end in us from the first kernel's start."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    evs = sorted((e for e in prof.events() if e.device_type.name == "CUDA"),
                 key=lambda e: e.time_range.start)  # fmt: skip
    t0 = evs[0].time_range.start if evs else 0
    return [dict(name=e.name[:30], stream=e.device_resource_id,
                 start=round(e.time_range.start - t0, 1), end=round(e.time_range.end - t0, 1))
            for e in evs]  # fmt: skip


def _cudnn(q, k, v, do, causal: bool) -> dict:
    """SDPA's cuDNN backend on the same inputs, timed the same ways (kernels: none)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel


    def fwd():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    kept = fwd()

    def bwd():
        q.grad = k.grad = v.grad = None
        kept.backward(do, retain_graph=True)

    row = {}
    for pas, fn in (("fwd", fwd), ("bwd", bwd)):
        row[f"{pas}_events"], row[f"{pas}_bench"] = gpu_and_bench_ms(fn, (q, k, v), 15)
        row[f"{pas}_kernels"] = {}
    return row


def _set_order(order: str) -> None:
    from safeattn.kernels import schedule

    if not hasattr(schedule, "_shipped_sched_chunk"):
        schedule._shipped_sched_chunk = schedule.sched_chunk
    shipped = schedule._shipped_sched_chunk
    if order == "shipped":
        schedule.sched_chunk = shipped
    elif order == "1":
        schedule.sched_chunk = lambda cfg, n_blocks, n_bh, *a, **k: 1
    else:
        schedule.sched_chunk = lambda cfg, n_blocks, n_bh, *a, **k: n_bh


def _measure_shape(trial: int, pad_mb: int, name: str, timeline: bool) -> None:
    """Print one row per launch order, then cuDNN's, for one shape's fresh inputs."""

    import safeattn

    shape = SHAPES[name]
    q, k, v, do = _inputs(shape)
    causal = shape[3]

    def fwd():
        return safeattn.attention(q, k, v, causal=causal)

    fwd().backward(do)  # compile, tune
    kept = fwd()

    def bwd():
        q.grad = k.grad = v.grad = None
        kept.backward(do, retain_graph=True)

    for order in ORDERS:
        _set_order(order)
        row = dict(trial=trial, pad_mb=pad_mb, shape=name, order=order, q_ptr=q.data_ptr(),
                   k_ptr=k.data_ptr(), v_ptr=v.data_ptr(), wall=time.time())  # fmt: skip
        for pas, fn in (("fwd", fwd), ("bwd", bwd)):
            row[f"{pas}_events"], row[f"{pas}_bench"] = gpu_and_bench_ms(fn, (q, k, v), 15)
            row[f"{pas}_kernels"] = _kernel_times(fn)
            if timeline and trial == 0 and order == "shipped" and pas == "bwd":
                row["bwd_timeline"] = _timeline(fn)
        row["wall_end"] = time.time()
        print(json.dumps(row), flush=True)
    _set_order("shipped")
    row = dict(trial=trial, pad_mb=pad_mb, shape=name, order="cudnn", wall=time.time())
    row.update(_cudnn(q, k, v, do, causal))
    print(json.dumps(row), flush=True)


def measure(trials: int, names: list[str], timeline: bool) -> None:
    import torch

    pads = []
    for trial in range(trials):
        pad_mb = PADS_MB[trial % len(PADS_MB)]
        pads.append(torch.empty(pad_mb * 2**20 + 4096 * trial, dtype=torch.uint8, device="cuda"))
        for name in names:
            _measure_shape(trial, pad_mb, name, timeline)
            torch.cuda.empty_cache()


def table(paths: list[str]) -> None:
    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines()
            if line.startswith("{")]  # fmt: skip
    for name in SHAPES:
        sel = [r for r in rows if r["shape"] == name]
        if not sel:
            continue
        print(f"\n== {name}: ms (fwd main kernel = the longest forward kernel)")
        print(f"{'trial':>5} {'order':>8} {'fwd bench':>9} {'fwd evt':>8} {'fwd krn':>8} "
              f"{'bwd bench':>9} {'bwd evt':>8}  bwd kernels")  # fmt: skip
        for r in sel:
            fk = max((v["ms"] for v in r["fwd_kernels"].values()), default=float("nan"))
            bk = " ".join(f"{n.split('_', 1)[-1][:8]}={v['ms']:.3f}"
                          for n, v in sorted(r["bwd_kernels"].items())
                          if v["ms"] > 0.02)  # fmt: skip
            print(f"{r['trial']:>5} {r['order']:>8} {r['fwd_bench']:9.3f} {r['fwd_events']:8.3f} "
                  f"{fk:8.3f} {r['bwd_bench']:9.3f} {r['bwd_events']:8.3f}  {bk}")  # fmt: skip
    for r in rows:
        if "bwd_timeline" in r:
            print(f"\n== one backward, {r['shape']} (us from the first kernel's start)")
            for e in r["bwd_timeline"]:
                print(f"  stream {e['stream']!s:>4} {e['start']:9.1f} {e['end']:9.1f} "
                      f"{e['end'] - e['start']:8.1f}  {e['name']}")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=6)
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--timeline", action="store_true", help="one backward's kernel timeline")
    ap.add_argument("--table", nargs="*", help="print the table of these jsonl files")
    args = ap.parse_args()
    if args.table:
        table(args.table)
    else:
        measure(args.trials, args.shapes, args.timeline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
