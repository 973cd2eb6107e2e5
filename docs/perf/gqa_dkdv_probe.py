"""GQA dK/dV probe (issue 13), one GPU, one tree per process (``PYTHONPATH=<tree>``): on the
dense GQA 4:1 SpeedSuite shapes (bf16, N=4096, D=64 and 128, causal or not; B = 16384 // N,
Hq = 2048 // D) every dK/dV candidate is tuned afresh with the tuner's spill filter off, so
each one's kernel time (the tuner's median) and live spill bytes are printed; then the
backward with the fastest, and SDPA's cuDNN backward in the same process (medians of
``triton.testing.do_bench``). The other kernels launch their first shipped config. One
multi-head row (gqa 1) is the control: its kernels are the same in both trees.

    PYTHONPATH=/tmp/base python docs/perf/gqa_dkdv_probe.py --label base >> gqa.jsonl
    PYTHONPATH=.          python docs/perf/gqa_dkdv_probe.py --label flat >> gqa.jsonl
    python docs/perf/gqa_dkdv_probe.py --table gqa.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import defaultdict

SHAPES = [(64, False, 4), (64, True, 4), (128, False, 4), (128, True, 4), (64, False, 1)]
# (BLOCK_M, BLOCK_N, warps, stages) timed beside the shipped dK/dV candidates
EXTRA = {64: [(64, 128, 8, 2)], 128: [(64, 64, 4, 3), (64, 64, 8, 2)]}


def measure(label: str, d: int, causal: bool, gqa: int, seen: list) -> dict:
    """One shape's row: every dK/dV candidate's time and spills, the backward, cuDNN's."""
    import torch
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import safeattn
    from safeattn.kernels import launch

    n = 4096
    b, hq = 16384 // n, 2048 // d
    gen = torch.Generator(device="cuda").manual_seed(d)
    q, k, v, do = (
        torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        for h in (hq, hq // gqa, hq // gqa, hq)
    )
    for t in (q, k, v):
        t.requires_grad_(True)
    launch.clear_choices()
    seen.clear()
    out = safeattn.attention(q, k, v, causal=causal)
    out.backward(do, retain_graph=True)
    torch.cuda.synchronize()
    dkdv = next(t for key, t in launch.tuning_timings().items() if key[0] == "bwd_dkdv")
    spills = next(s for s in seen if set(s) == {c for c, _ in dkdv})
    row = dict(label=label, gpu=torch.cuda.get_device_name(), d=d, causal=causal, gqa=gqa,
               path=safeattn.__file__,
               dkdv={c: [round(ms, 4), spills[c]] for c, ms in dkdv})  # fmt: skip
    grad = lambda o: lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True)
    row["bwd_ms"] = triton.testing.do_bench(grad(out), return_mode="median")
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        ref = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, enable_gqa=gqa > 1
        )
    row["cudnn_bwd_ms"] = triton.testing.do_bench(grad(ref), return_mode="median")
    return row


def probe(label: str) -> None:
    os.environ.update(SAFEATTN_TUNING_TABLE="0", SAFEATTN_TUNING_CACHE="0", SAFEATTN_AUTOTUNE="1")
    from safeattn.kernels import configs, tuning

    shipped, seen = configs.candidates, []

    def candidates(kernel, bd, dtype, smem_limit=None, masked=False, tma=False, dropout=False):
        listed = shipped(kernel, bd, dtype, smem_limit, masked, tma, dropout)
        if kernel != "bwd_dkdv":
            return listed[:1]
        extra = [configs.KernelConfig(*c) for c in EXTRA.get(bd, [])]
        return listed + [c for c in extra if c not in listed]

    def every_candidate(fitting, spills, dtype, head_dim_block):
        seen.append({str(c): spills.get(c) for c in fitting})
        return fitting

    configs.candidates, tuning.spill_free_first = candidates, every_candidate
    for d, causal, gqa in SHAPES:
        print(json.dumps(measure(label, d, causal, gqa, seen)), flush=True)


def table(path: str) -> None:
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    by = defaultdict(list)
    for r in rows:
        by[(r["d"], r["causal"], r["gqa"])].append(r)
    for shape, rs in by.items():
        print(f"== D={shape[0]} causal={shape[1]} gqa={shape[2]}")
        for r in rs:
            cells = "  ".join(f"{c} {ms:.3f}ms/{sp}B" for c, (ms, sp) in r["dkdv"].items())
            print(f"  {r['label']:<6} bwd {r['bwd_ms']:.3f} ms (cuDNN {r['cudnn_bwd_ms']:.3f}, "
                  f"{r['cudnn_bwd_ms'] / r['bwd_ms']:.2f}x)  dK/dV: {cells}")  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label")
    ap.add_argument("--table")
    args = ap.parse_args()
    if args.table:
        table(args.table)
    else:
        probe(args.label or "tree")
    sys.exit(0)
