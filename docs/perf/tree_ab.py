"""A/B of two safeattn trees on one GPU: run once per tree (``PYTHONPATH=<tree>``), in
alternating processes, then ``--table`` compares them. Forward and backward times of the
dense SpeedSuite shapes at D=128 and D=64 (B = 16384 // N, Hq = 2048 // D, bf16 and fp16,
causal and not), beside SDPA's cuDNN backend measured in the same process. Medians of
GPU time, as the asv suites time (``benchmarks._gpu_measure.cuda_event_samples``: L2 flushed
and the GPU asleep before each call, so the host's issue time is not in it): 25 samples.
``triton.testing.do_bench``'s median is kept beside it (``*_bench_ms``): it timed the host
as well whenever the host fell behind, and so swung between and within processes
(safeattn's host takes 0.4 ms to issue a forward and 1.2 ms a backward on an H200;
docs/perf/session_swing_2026-12-02). Until 2026-12-02 the ``*_ms`` fields were do_bench's.

Both trees launch the same configs: the first process tunes what the committed table lacks and
persists it in the tuning cache (safeattn.kernels.tuning), which the later ones read.

    PYTHONPATH=/tmp/base python docs/perf/tree_ab.py --label base >> ab.jsonl
    PYTHONPATH=.          python docs/perf/tree_ab.py --label new  >> ab.jsonl
    python docs/perf/tree_ab.py --label new --d256 >> d256.jsonl   # D=256 N=4096 instead
    python docs/perf/tree_ab.py --table ab.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

# benchmarks/ from this checkout, after PYTHONPATH: the tree under test's safeattn comes first.
sys.path.append(str(Path(__file__).resolve().parents[2]))

SHAPES = [  # (dtype, head_dim, seq_len, causal)
    ("bfloat16", 128, 4096, False),
    ("bfloat16", 128, 4096, True),
    ("bfloat16", 128, 8192, False),
    ("float16", 128, 4096, False),
    ("float16", 128, 4096, True),
    ("bfloat16", 64, 4096, False),
    ("bfloat16", 64, 4096, True),
]


def gpu_and_bench_ms(call, leaves, samples: int = 25) -> tuple[float, float]:
    """(GPU time, do_bench) medians of ``call`` in ms: the suites' ``cuda_event_samples``
    (``samples`` of them, ``leaves``' gradients reset) and ``triton.testing.do_bench``."""
    import triton

    from benchmarks._gpu_measure import cuda_event_samples

    gpu = statistics.median(cuda_event_samples(call, samples, grad_to_none=leaves))
    return gpu, triton.testing.do_bench(call, warmup=25, rep=200, return_mode="median")


def measure_shape(label: str, dtype_name: str, d: int, n: int, causal: bool) -> dict:
    """One shape's row: safeattn and cuDNN, forward and backward medians (ms)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import safeattn
    from safeattn.kernels import launch

    sdpa = torch.nn.functional.scaled_dot_product_attention
    dtype = getattr(torch, dtype_name)
    b, h = 16384 // n, 2048 // d
    gen = torch.Generator(device="cuda").manual_seed(n + d)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=gen)
               .requires_grad_(True) for _ in range(3))  # fmt: skip
    do = torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=gen)
    row = dict(label=label, gpu=torch.cuda.get_device_name(), dtype=dtype_name, d=d, n=n,
               causal=causal, safeattn_path=safeattn.__file__)  # fmt: skip

    def ours():
        return safeattn.attention(q, k, v, causal=causal)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return sdpa(q, k, v, is_causal=causal)

    for name, fn in (("safeattn", ours), ("cudnn", cudnn)):
        out = fn()
        out.backward(do)  # compile, tune
        kept = fn()

        def bwd(kept=kept):
            q.grad = k.grad = v.grad = None
            kept.backward(do, retain_graph=True)

        for pas, call in (("fwd", fn), ("bwd", bwd)):
            row[f"{name}_{pas}_ms"], row[f"{name}_{pas}_bench_ms"] = gpu_and_bench_ms(
                call, (q, k, v))
        if name == "safeattn":
            row["kernels"] = [f"{kname} {r.config} regs={r.registers} spills={r.spills}B"
                              for kname, r in launch.launched_kernels().items()]  # fmt: skip
    return row


# Issue 13's D=256 row (D=256 N=4096 causal: B = 4, Hq = 8), which SpeedSuite does not hold.
D256_SHAPES = [("bfloat16", 256, 4096, True), ("float16", 256, 4096, True),
               ("bfloat16", 256, 4096, False)]  # fmt: skip


def measure(label: str, shapes: list[tuple] = SHAPES) -> None:
    for shape in shapes:
        print(json.dumps(measure_shape(label, *shape)), flush=True)


def table(paths: list[str]) -> None:
    rows = []
    for path in paths:
        with open(path) as f:
            rows += [json.loads(line) for line in f if line.startswith("{")]
    by = defaultdict(lambda: defaultdict(list))
    for r in rows:
        key = (r["dtype"], r["d"], r["n"], r["causal"])
        for f in ("safeattn_fwd_ms", "safeattn_bwd_ms", "cudnn_fwd_ms", "cudnn_bwd_ms"):
            by[key][(r["label"], f)].append(r[f])
    labels = sorted({r["label"] for r in rows})
    print(f"GPU: {rows[0]['gpu'] if rows else '-'}; medians over processes, ms; "
          "ratio = cuDNN time / safeattn time")  # fmt: skip
    head = "shape".ljust(28) + "".join(f"{lab + ' fwd':>12}{'x cudnn':>9}" for lab in labels)
    head += "".join(f"{lab + ' bwd':>12}{'x cudnn':>9}" for lab in labels)
    print(head)
    for key, vals in by.items():
        line = f"{key[0]} D={key[1]} N={key[2]}{' causal' if key[3] else ''}".ljust(28)
        for pas in ("fwd", "bwd"):
            for lab in labels:
                ours = statistics.median(vals[(lab, f"safeattn_{pas}_ms")])
                peer = statistics.median(vals[(lab, f"cudnn_{pas}_ms")])
                line += f"{ours:12.3f}{peer / ours:9.3f}"
        print(line)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--label")
    ap.add_argument("--table", nargs="+")
    ap.add_argument("--d256", action="store_true", help="the D=256 shapes instead")
    args = ap.parse_args()
    if args.table:
        table(args.table)
    else:
        measure(args.label, D256_SHAPES if args.d256 else SHAPES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
