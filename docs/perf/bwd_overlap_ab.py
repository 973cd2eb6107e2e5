"""dQ beside dK/dV on a side stream (``SAFEATTN_BWD_OVERLAP=1``) against one after the other
(``=0``), one process per setting, alternating. The switch is commit 379b77e's, reverted by
the next commit because its GPU session ran out of device time before measuring anything:
cherry-pick 379b77e first, or both settings measure the same code. Per setting: the
backward's median ms (``triton.testing.do_bench`` of ``torch.autograd.grad`` on one
forward's graph) on dense
SpeedSuite shapes and MaskedSpeedSuite's workloads, each built as its suite builds it.

    for r in 1 2; do for o in 0 1; do
      SAFEATTN_BWD_OVERLAP=$o python docs/perf/bwd_overlap_ab.py >> ab.jsonl; done; done
    python docs/perf/bwd_overlap_ab.py --table ab.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
DENSE = [(128, 1024, False, 1), (128, 1024, False, 4), (128, 1024, True, 1),
         (128, 4096, False, 1), (128, 4096, False, 4), (128, 4096, True, 4),
         (64, 1024, False, 1), (64, 4096, True, 1)]  # fmt: skip
MASKED = [(128, "key_padding_causal"), (128, "bool_mask"), (128, "sliding_window"),
          (128, "varlen_docs"), (64, "key_padding_causal")]  # fmt: skip


def backward_ms(call, inputs) -> float:
    import torch
    import triton

    q, k, v, g = inputs
    out = call(q, k, v)
    grad = lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True)
    grad()
    torch.cuda.synchronize()
    return triton.testing.do_bench(grad, return_mode="median")


def main(dtype: str) -> None:
    import torch

    from benchmarks import _masks
    from benchmarks._attention import attention_call, attention_inputs

    label = "overlap" if os.environ.get("SAFEATTN_BWD_OVERLAP") == "1" else "serial"
    for d, n, causal, gqa in DENSE:
        ms = backward_ms(attention_call("safeattn", causal, n, gqa),
                         attention_inputs("safeattn", dtype, n, d, gqa))  # fmt: skip
        shape = f"D={d} N={n} {'causal' if causal else 'dense'} gqa={gqa}"
        print(json.dumps(dict(label=label, shape=shape, ms=round(ms, 4))), flush=True)
        torch.cuda.empty_cache()
    for d, mask in MASKED:
        case = _masks.mask_case(mask, "safeattn", dtype, d)
        ms = backward_ms(case.call, case.inputs)
        print(json.dumps(dict(label=label, shape=f"D={d} {mask}", ms=round(ms, 4))), flush=True)
        del case
        torch.cuda.empty_cache()


def table(path: str) -> None:
    rows = [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
    by: dict = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by[r["shape"]][r["label"]].append(r["ms"])
    print(f"{'shape':34s} serial ms        overlap ms       overlap/serial")
    for shape, t in by.items():
        s, o = t.get("serial", []), t.get("overlap", [])
        ratio = f"{min(o) / min(s):.3f}" if s and o else "-"
        print(f"{shape:34s} {' '.join(f'{x:.3f}' for x in s):16s} "
              f"{' '.join(f'{x:.3f}' for x in o):16s} {ratio}")  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--table")
    args = ap.parse_args()
    if args.table:
        table(args.table)
    else:
        main(args.dtype)
