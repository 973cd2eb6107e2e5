"""dQ beside dK/dV on a side stream (``SAFEATTN_BWD_OVERLAP=1``), dK/dV on a high-priority side
stream (``=2``) and one after the other (``=0``), alternating inside one process (the switch is read
at each backward call), on dense SpeedSuite shapes and MaskedSpeedSuite's workloads, each built as
its suite builds it. Each measurement is the median GPU time of
``benchmarks._gpu_measure.cuda_event_samples`` (the suites' timing: the call queued ahead of its
start event, so host time does not count) of ``torch.autograd.grad`` on one forward's graph;
FlexAttention's backward on the rows where safeattn trailed it (``--flex``) is timed the same way in
the same process.

    python docs/perf/bwd_overlap_ab.py [--flex] [--quick] [--settings 0,1,2] >> ab.jsonl
    python docs/perf/bwd_overlap_ab.py --table ab.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
DENSE = [(128, 1024, False, 1), (128, 1024, False, 4), (128, 1024, True, 1),
         (128, 4096, False, 1), (128, 4096, False, 4), (128, 4096, True, 4),
         (64, 1024, False, 1), (64, 4096, True, 1)]  # fmt: skip
FLEX_ROWS = {(128, 1024, False, 1), (128, 1024, False, 4), (128, 1024, True, 1),
             (128, 4096, False, 4)}  # fmt: skip
QUICK = [(128, 4096, False, 1), (128, 4096, False, 4), (128, 4096, True, 4), (128, 4096, True, 1),
         (64, 4096, True, 1)]  # fmt: skip
MASKED = [(128, "key_padding_causal"), (128, "bool_mask"), (128, "sliding_window"),
          (128, "varlen_docs"), (64, "key_padding_causal")]  # fmt: skip
REPS, SAMPLES = 3, 15
LABELS = {"0": "serial", "1": "overlap", "2": "kv_first"}


def grad_fn(call, inputs):
    import torch

    q, k, v, g = inputs
    out = call(q, k, v)
    fn = lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True)
    fn()
    torch.cuda.synchronize()
    return fn


def median_ms(fn) -> float:
    from benchmarks._gpu_measure import cuda_event_samples

    return statistics.median(cuda_event_samples(fn, SAMPLES))


def measure(shape: str, fn, settings: list[str]) -> None:
    """REPS rounds of ``settings`` in turn, one JSON line per measurement."""
    for rep in range(REPS):
        for setting in settings:
            os.environ["SAFEATTN_BWD_OVERLAP"] = setting
            label = LABELS[setting]
            print(json.dumps(dict(label=label, shape=shape, rep=rep, ms=round(median_ms(fn), 4))),
                  flush=True)  # fmt: skip


def main(dtype: str, flex: bool, quick: bool, settings: list[str]) -> None:
    import torch

    from benchmarks import _masks
    from benchmarks._attention import attention_call, attention_inputs

    for d, n, causal, gqa in QUICK if quick else DENSE:
        shape = f"D={d} N={n} {'causal' if causal else 'dense'} gqa={gqa}"
        fn = grad_fn(attention_call("safeattn", causal, n, gqa),
                     attention_inputs("safeattn", dtype, n, d, gqa))  # fmt: skip
        measure(shape, fn, settings)
        if flex and (d, n, causal, gqa) in FLEX_ROWS:
            fn = grad_fn(attention_call("flex", causal, n, gqa),
                         attention_inputs("flex", dtype, n, d, gqa))  # fmt: skip
            print(json.dumps(dict(label="flex", shape=shape, rep=0, ms=round(median_ms(fn), 4))),
                  flush=True)  # fmt: skip
        torch.cuda.empty_cache()
    for d, mask in MASKED[:1] if quick else MASKED:
        case = _masks.mask_case(mask, "safeattn", dtype, d)
        measure(f"D={d} {mask}", grad_fn(case.call, case.inputs), settings)
        del case
        torch.cuda.empty_cache()


def table(path: str) -> None:
    rows = [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
    by: dict = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by[r["shape"]][r["label"]].append(r["ms"])
    labels = [lb for lb in (*LABELS.values(), "flex") if any(lb in t for t in by.values())]
    print(f"{'shape':30s} " + " ".join(f"{lb + ' ms':>12s}" for lb in labels)
          + " " + " ".join(f"{lb + '/' + labels[0][:3]:>12s}" for lb in labels[1:])
          + "   (medians over rounds)")  # fmt: skip
    for shape, t in by.items():
        ms = [statistics.median(t[lb]) if t.get(lb) else float("nan") for lb in labels]
        print(f"{shape:30s} " + " ".join(f"{m:12.3f}" for m in ms)
              + " " + " ".join(f"{m / ms[0]:12.3f}" for m in ms[1:]))  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--flex", action="store_true", help="also FlexAttention on FLEX_ROWS")
    ap.add_argument("--quick", action="store_true", help="the N = 4096 dense rows, one masked")
    ap.add_argument("--settings", default="0,1", help="SAFEATTN_BWD_OVERLAP values, in turn")
    ap.add_argument("--table")
    args = ap.parse_args()
    if args.table:
        table(args.table)
    else:
        main(args.dtype, args.flex, args.quick, args.settings.split(","))
