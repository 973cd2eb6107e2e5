"""The -0.0 exclusion mark (backward._dkdv_step's MARK) per masked workload: safeattn's
backward kernel times (torch.profiler, µs per backward, ``../masked_bwd_kernels.py``'s
``kernels_of_backward``) on MaskedSpeedSuite's four workloads, for the tree this file sits
in. Run it from two trees in alternating processes (HEAD, and HEAD with MARK restricted to
the bool-mask build: ``mark_ab.sh``) and compare with ``--table``.

    python docs/perf/session_mark_2026-12-02/mark_ab.py --label head --d 128 >> ab.jsonl
    python docs/perf/session_mark_2026-12-02/mark_ab.py --table ab.jsonl
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "docs" / "perf"))

MASKS = ("key_padding_causal", "sliding_window", "varlen_docs", "bool_mask")


def run(label: str, d: int, dtype: str) -> None:
    import torch
    from masked_bwd_kernels import kernels_of_backward

    import safeattn
    from benchmarks import _masks

    for mask in MASKS:
        case = _masks.mask_case(mask, "safeattn", dtype, d)
        per, _ = kernels_of_backward(case, calls=20)
        row = dict(label=label, tree=str(Path(safeattn.__file__).parents[1]), mask=mask, d=d,
                   dtype=dtype, gpu=torch.cuda.get_device_name(),
                   dkdv_us=sum(us for name, us in per.items() if "dkdv" in name),
                   dq_us=sum(us for name, us in per.items() if "_dq" in name),
                   total_us=sum(per.values()), kernels_us=per)  # fmt: skip
        print(json.dumps(row), flush=True)
        del case
        torch.cuda.empty_cache()


def table(path: str) -> None:
    rows = [json.loads(ln) for ln in Path(path).read_text().splitlines() if ln.strip()]
    by = defaultdict(list)
    for r in rows:
        by[r["mask"], r["d"], r["label"]].append(r)
    labels = sorted({r["label"] for r in rows})
    print("| mask | D | " + " | ".join(f"{lb} dK/dV µs | {lb} total µs" for lb in labels)
          + f" | dK/dV {labels[-1]}/{labels[0]} | total {labels[-1]}/{labels[0]} |")
    print("|---|---|" + "---|---|" * len(labels) + "---|---|")
    for mask in MASKS:
        for d in sorted({r["d"] for r in rows}):
            cells, med = [], {}
            for lb in labels:
                rs = by.get((mask, d, lb), [])
                if not rs:
                    cells += ["-", "-"]
                    continue
                med[lb] = (statistics.median(r["dkdv_us"] for r in rs),
                           statistics.median(r["total_us"] for r in rs))
                cells += [" / ".join(f"{r['dkdv_us']:.0f}" for r in rs),
                          " / ".join(f"{r['total_us']:.0f}" for r in rs)]
            if len(med) == len(labels):
                a, b = med[labels[0]], med[labels[-1]]
                cells += [f"{b[0] / a[0]:.3f}", f"{b[1] / a[1]:.3f}"]
            else:
                cells += ["-", "-"]
            print(f"| {mask} | {d} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label")
    ap.add_argument("--d", type=int, default=128)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--table")
    args = ap.parse_args()
    if args.table:
        table(args.table)
    else:
        run(args.label, args.d, args.dtype)
