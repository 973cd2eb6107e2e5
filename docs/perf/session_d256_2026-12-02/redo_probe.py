"""What do the guarded second launches cost on the GPU, and what does an eager caller see?

1. ``--redo``: under causal attention every kernel launches twice: the second launch
   (``launch.launch_guarded_redo``) returns at once in each program unless the first flagged
   it, which only NaN/Inf inputs do. For finite inputs the outputs are the same without it, so
   skipping it measures what it costs. Per shape, forward and backward GPU time
   (``cuda_event_samples``, 25 samples) with the redo and without, in alternating rounds in one
   process, beside cuDNN's. The per-kernel times of one forward + backward come from
   torch.profiler, in launch order.
2. ``--eager``: forward + backward issued back to back, as an eager training loop issues them
   (``triton.testing.do_bench``: the host's issue time is in it whenever the host falls
   behind), against the GPU time alone. For safeattn and its peers. A diagnostic: the suites
   time GPU time only.
3. ``--graph``: the remedy README's CUDA-graph notes give an eager caller whose host falls
   behind: the same forward + backward captured once with ``torch.cuda.graph`` (PyTorch's
   whole-network recipe, as tests/test_cuda_graphs.py captures it) and replayed back to back,
   beside the eager figure, at the short lengths where the host is the bound.

    PYTHONPATH=. python docs/perf/session_d256_2026-12-02/redo_probe.py --redo >> redo.jsonl
    PYTHONPATH=. python docs/perf/session_d256_2026-12-02/redo_probe.py --eager >> eager.jsonl
    python docs/perf/session_d256_2026-12-02/redo_probe.py --table redo.jsonl eager.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[3]))

REDO_SHAPES = [  # (head_dim, seq_len, gqa), bf16, causal; B and H as the suites' (gpu_problem)
    (128, 4096, 1), (128, 4096, 4), (128, 1024, 1), (256, 4096, 1),
]  # fmt: skip
EAGER_SHAPES = [(128, 1024, 1), (128, 4096, 1), (128, 4096, 4)]
EAGER_IMPLS = ["safeattn", "sdpa_cudnn", "sdpa_flash", "flex"]
GRAPH_SHAPES = [(128, 512, 1), (128, 1024, 1)]


def _passes(impl: str, d: int, n: int, gqa: int):
    """(q, k, v), forward(), backward() and fwd_bwd() closures for one bf16 causal shape."""
    from benchmarks._attention import attention_call, attention_inputs

    q, k, v, g = attention_inputs(impl, "bfloat16", n, d, gqa)
    call = attention_call(impl, True, n, gqa)
    kept = call(q, k, v)
    kept.backward(g, retain_graph=True)  # compile, tune

    def fwd():
        return call(q, k, v)

    def bwd():
        q.grad = k.grad = v.grad = None
        kept.backward(g, retain_graph=True)

    def fwd_bwd():
        q.grad = k.grad = v.grad = None
        call(q, k, v).backward(g)

    return (q, k, v), fwd, bwd, fwd_bwd


def _gpu_ms(fn, leaves) -> float:
    from benchmarks._gpu_measure import cuda_event_samples

    return round(statistics.median(cuda_event_samples(fn, 25, grad_to_none=leaves)), 4)


def redo(rounds: int) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from benchmarks._attention import impl_context
    from safeattn.kernels import launch

    shipped = launch.launch_guarded_redo
    for d, n, gqa in REDO_SHAPES:
        leaves, fwd, bwd, _ = _passes("safeattn", d, n, gqa)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fwd().backward(torch.ones_like(leaves[0]))
            torch.cuda.synchronize()
        kernels = [(e.name.split("_0d")[0][:24], round(e.device_time_total, 1))
                   for e in prof.events() if e.device_time_total > 0]  # fmt: skip
        times = defaultdict(list)
        for _ in range(rounds):
            for mode in ("redo", "skip"):
                launch.launch_guarded_redo = shipped if mode == "redo" else (lambda *a, **k: None)
                try:
                    times[f"{mode}_fwd"].append(_gpu_ms(fwd, leaves))
                    times[f"{mode}_bwd"].append(_gpu_ms(bwd, leaves))
                finally:
                    launch.launch_guarded_redo = shipped
        with impl_context("sdpa_cudnn"):  # its forward and backward both on cuDNN
            c_leaves, c_fwd, c_bwd, _ = _passes("sdpa_cudnn", d, n, gqa)
            cudnn = {"cudnn_fwd": _gpu_ms(c_fwd, c_leaves), "cudnn_bwd": _gpu_ms(c_bwd, c_leaves)}
        row = dict(probe="redo", d=d, n=n, gqa=gqa, kernels_us=kernels, **cudnn,
                   **{key: round(statistics.median(v), 4) for key, v in times.items()},
                   rounds={key: v for key, v in times.items()})  # fmt: skip
        print(json.dumps(row), flush=True)


def eager() -> None:
    import triton

    from benchmarks._attention import impl_context

    for d, n, gqa in EAGER_SHAPES:
        for impl in EAGER_IMPLS:
            row = dict(probe="eager", impl=impl, d=d, n=n, gqa=gqa)
            try:
                with impl_context(impl):
                    leaves, _, _, fwd_bwd = _passes(impl, d, n, gqa)
                    row["gpu_ms"] = _gpu_ms(fwd_bwd, leaves)
                    row["eager_ms"] = round(
                        triton.testing.do_bench(fwd_bwd, warmup=25, rep=300, return_mode="median"),
                        4,
                    )
            except Exception as exc:  # a peer that cannot run the shape: say so, go on
                row["error"] = str(exc).splitlines()[0][:200]
            print(json.dumps(row), flush=True)


def _graphed(fwd_bwd, leaves):
    """``fwd_bwd`` captured once in a CUDA graph after a warm-up on a side stream (compiling
    and tuning cannot happen inside a capture); returns the graph's ``replay``."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fwd_bwd()
    torch.cuda.current_stream().wait_stream(side)
    for t in leaves:
        t.grad = None  # the captured backward allocates them from the graph's pool
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fwd_bwd()
    return graph.replay


def graph() -> None:
    import triton

    from benchmarks._attention import impl_context

    for d, n, gqa in GRAPH_SHAPES:
        for impl in ("safeattn", "sdpa_cudnn", "flex"):
            row = dict(probe="graph", impl=impl, d=d, n=n, gqa=gqa)
            try:
                with impl_context(impl):
                    leaves, _, _, fwd_bwd = _passes(impl, d, n, gqa)
                    row["gpu_ms"] = _gpu_ms(fwd_bwd, leaves)
                    row["eager_ms"] = round(triton.testing.do_bench(
                        fwd_bwd, warmup=25, rep=300, return_mode="median"), 4)  # fmt: skip
                    replay = _graphed(fwd_bwd, leaves)
                    row["graph_ms"] = round(triton.testing.do_bench(
                        replay, warmup=25, rep=300, return_mode="median"), 4)  # fmt: skip
            except Exception as exc:  # a peer that cannot be captured: say so, go on
                row["error"] = str(exc).splitlines()[0][:200]
            print(json.dumps(row), flush=True)


def table(paths: list[str]) -> None:
    rows = [json.loads(line) for p in paths for line in Path(p).read_text().splitlines() if line]
    print("guarded second launches, bf16 causal; GPU ms (medians over rounds); x = cuDNN / ours")
    print(f"{'D':>4} {'N':>5} {'GQA':>3}  {'fwd':>6} {'no redo':>7} {'x':>5} {'x no':>5}"
          f"  {'bwd':>6} {'no redo':>7} {'x':>5} {'x no':>5}")  # fmt: skip
    for r in (r for r in rows if r["probe"] == "redo"):
        print(f"{r['d']:>4} {r['n']:>5} {r['gqa']:>3}  {r['redo_fwd']:6.3f} {r['skip_fwd']:7.3f} "
              f"{r['cudnn_fwd'] / r['redo_fwd']:5.3f} {r['cudnn_fwd'] / r['skip_fwd']:5.3f}  "
              f"{r['redo_bwd']:6.3f} {r['skip_bwd']:7.3f} {r['cudnn_bwd'] / r['redo_bwd']:5.3f} "
              f"{r['cudnn_bwd'] / r['skip_bwd']:5.3f}")  # fmt: skip
    print("\nforward + backward issued back to back (eager) against GPU time, bf16 causal, ms")
    for r in (r for r in rows if r["probe"] == "eager"):
        what = r.get("error") or (f"gpu {r['gpu_ms']:.3f}  eager {r['eager_ms']:.3f}  "
                                  f"eager/gpu {r['eager_ms'] / r['gpu_ms']:.2f}")  # fmt: skip
        print(f"D={r['d']} N={r['n']} GQA={r['gqa']} {r['impl']:<11} {what}")
    print(
        "\nforward + backward: GPU time, eager back to back, CUDA-graph replays back to back, "
        "bf16 causal, ms"
    )
    for r in (r for r in rows if r["probe"] == "graph"):
        what = r.get("error") or (f"gpu {r['gpu_ms']:.3f}  eager {r['eager_ms']:.3f}  "
                                  f"graph {r['graph_ms']:.3f}")  # fmt: skip
        print(f"D={r['d']} N={r['n']} GQA={r['gqa']} {r['impl']:<11} {what}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redo", action="store_true")
    ap.add_argument("--eager", action="store_true")
    ap.add_argument("--graph", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--table", nargs="+")
    args = ap.parse_args()
    if args.table:
        table(args.table)
    if args.redo:
        redo(args.rounds)
    if args.eager:
        eager()
    if args.graph:
        graph()
