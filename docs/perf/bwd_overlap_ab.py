"""dQ beside dK/dV on a side stream (``SAFEATTN_BWD_OVERLAP=1``) against one after the other
(``=0``), alternating inside one process (the switch is read at each backward call), on dense
SpeedSuite shapes and MaskedSpeedSuite's workloads, each built as its suite builds it. Each
measurement is the median GPU time of ``benchmarks._gpu_measure.cuda_event_samples`` (the
suites' timing: the call queued ahead of its start event, so host time does not count) of
``torch.autograd.grad`` on one forward's graph; FlexAttention's backward on the rows where
safeattn trailed it (``--flex``) is timed the same way in the same process.

    python docs/perf/bwd_overlap_ab.py [--flex] >> ab.jsonl
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
MASKED = [(128, "key_padding_causal"), (128, "bool_mask"), (128, "sliding_window"),
          (128, "varlen_docs"), (64, "key_padding_causal")]  # fmt: skip
REPS, SAMPLES = 3, 15


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


def measure(shape: str, fn) -> None:
    """REPS rounds of serial then overlap, one JSON line per measurement."""
    for rep in range(REPS):
        for setting in ("0", "1"):
            os.environ["SAFEATTN_BWD_OVERLAP"] = setting
            label = "overlap" if setting == "1" else "serial"
            print(json.dumps(dict(label=label, shape=shape, rep=rep, ms=round(median_ms(fn), 4))),
                  flush=True)  # fmt: skip


def main(dtype: str, flex: bool) -> None:
    import torch

    from benchmarks import _masks
    from benchmarks._attention import attention_call, attention_inputs

    for d, n, causal, gqa in DENSE:
        shape = f"D={d} N={n} {'causal' if causal else 'dense'} gqa={gqa}"
        measure(shape, grad_fn(attention_call("safeattn", causal, n, gqa),
                               attention_inputs("safeattn", dtype, n, d, gqa)))  # fmt: skip
        if flex and (d, n, causal, gqa) in FLEX_ROWS:
            fn = grad_fn(attention_call("flex", causal, n, gqa),
                         attention_inputs("flex", dtype, n, d, gqa))  # fmt: skip
            print(json.dumps(dict(label="flex", shape=shape, rep=0, ms=round(median_ms(fn), 4))),
                  flush=True)  # fmt: skip
        torch.cuda.empty_cache()
    for d, mask in MASKED:
        case = _masks.mask_case(mask, "safeattn", dtype, d)
        measure(f"D={d} {mask}", grad_fn(case.call, case.inputs))
        del case
        torch.cuda.empty_cache()


def table(path: str) -> None:
    rows = [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
    by: dict = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by[r["shape"]][r["label"]].append(r["ms"])
    print(f"{'shape':30s} {'serial ms':>10s} {'overlap ms':>10s} {'ovl/ser':>8s} "
          f"{'flex ms':>8s} {'flex/ser':>8s} {'flex/ovl':>8s}   (medians over rounds)")  # fmt: skip
    for shape, t in by.items():
        s, o, f = (statistics.median(t[k]) if t.get(k) else float("nan")
                   for k in ("serial", "overlap", "flex"))  # fmt: skip
        print(f"{shape:30s} {s:10.3f} {o:10.3f} {o / s:8.3f} {f:8.3f} {f / s:8.3f} {f / o:8.3f}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--flex", action="store_true", help="also FlexAttention on FLEX_ROWS")
    ap.add_argument("--table")
    args = ap.parse_args()
    if args.table:
        table(args.table)
    else:
        main(args.dtype, args.flex)
