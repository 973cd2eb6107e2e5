"""Probe: does triton 3.6's Hopper warp specialization (``tl.range(..., warp_specialize=True)``)
make a FlashAttention forward faster on sm90? (issue 13, deliverable 1.)

A minimal TMA forward (no masks, no safety logic: the tutorial's inner loop with the scale
folded into the exponent's FMA) is timed with and without warp specialization, beside
safeattn's forward and SDPA's cuDNN backend, on the same inputs in one process. Static
finding first (triton 3.6 cross-compiled for sm90, CPU, 2026-11-28): with num_warps=4 and
BLOCK_M=128 the pass splits the program into a producer and two 4-warp consumer groups
(12 warps, FlashAttention-3's layout); with num_warps=8 it does nothing; on safeattn's own
kernel it aborts (unstructured control flow from the early returns).

    for impl in cudnn safeattn probe-M128-N128-w8-s3 ...; do   # one process each: a
      timeout 90 python docs/perf/ws_forward_probe.py --only $impl >> ws.jsonl  # hang ends
    done
    python docs/perf/ws_forward_probe.py --table ws.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from torch.nn.attention import SDPBackend, sdpa_kernel

import safeattn

LOG2E = 1.4426950408889634


@triton.jit
def _probe_fwd(DescQ, DescK, DescV, Out, qk_scale, N,
               BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, WS: tl.constexpr):  # fmt: skip
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    row0 = bh * N + pid_m * BM
    q = DescQ.load([row0, 0])
    acc = tl.zeros([BM, D], tl.float32)
    m_i = tl.full([BM], float("-inf"), tl.float32)
    l_i = tl.zeros([BM], tl.float32)
    for start_n in tl.range(0, N, BN, warp_specialize=WS):
        k = DescK.load([bh * N + start_n, 0])
        v = DescV.load([bh * N + start_n, 0])
        s = tl.dot(q, tl.trans(k))
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s * qk_scale - m_safe[:, None])
        alpha = tl.math.exp2(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        acc = tl.dot(p.to(v.dtype), v, acc)
        m_i = m_new
    out = acc / l_i[:, None]
    offs_m = row0 + tl.arange(0, BM)
    offs_d = tl.arange(0, D)
    tl.store(Out + offs_m[:, None].to(tl.int64) * D + offs_d[None, :], out.to(Out.dtype.element_ty))


def probe(q, k, v, bm, bn, warps, stages, ws):
    b, h, n, d = q.shape
    flat = [t.reshape(b * h * n, d) for t in (q, k, v)]
    dq = TensorDescriptor(flat[0], list(flat[0].shape), list(flat[0].stride()), [bm, d])
    dk = TensorDescriptor(flat[1], list(flat[1].shape), list(flat[1].stride()), [bn, d])
    dv = TensorDescriptor(flat[2], list(flat[2].shape), list(flat[2].stride()), [bn, d])
    out = torch.empty_like(q)
    scale = LOG2E / math.sqrt(d)

    def run():
        _probe_fwd[(n // bm, b * h)](dq, dk, dv, out, scale, n, BM=bm, BN=bn, D=d, WS=ws,
                                     num_warps=warps, num_stages=stages)  # fmt: skip
        return out

    return run


VARIANTS = {  # label: (BLOCK_M, BLOCK_N, num_warps, num_stages, warp_specialize)
    "probe-M128-N128-w8-s3": (128, 128, 8, 3, False),
    "probe-M128-N128-w4-s2-WS": (128, 128, 4, 2, True),
    "probe-M128-N64-w4-s3-WS": (128, 64, 4, 3, True),
    "probe-M128-N64-w4-s2-WS": (128, 64, 4, 2, True),
    "probe-M128-N128-w4-s2": (128, 128, 4, 2, False),
}
IMPLS = ("cudnn", "safeattn", *VARIANTS)


def impl_fn(name: str, q, k, v):
    if name == "safeattn":
        return lambda: safeattn.attention(q, k, v)
    if name == "cudnn":

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v)

        return cudnn
    return probe(q, k, v, *VARIANTS[name])


def measure(name: str, n: int) -> dict:
    b, h, d = 16384 // n, 16, 128
    gen = torch.Generator(device="cuda").manual_seed(n)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
               for _ in range(3))  # fmt: skip
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v).float()
    fn = impl_fn(name, q, k, v)
    out = fn()
    torch.cuda.synchronize()
    err = ((out.float() - ref).norm() / ref.norm()).item()
    ms = triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median")
    flops = 4 * b * h * n * n * d
    return dict(gpu=torch.cuda.get_device_name(), n=n, impl=name, ms=ms,
                tflops=flops / ms / 1e9, rel_err=err)  # fmt: skip


def table(path: str) -> None:
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.startswith("{")]
    print(f"{rows[0]['gpu'] if rows else '-'}, bf16, D=128, B*N=16384, H=16, non-causal")
    for n in sorted({r["n"] for r in rows}):
        base = next((r["ms"] for r in rows if r["n"] == n and r["impl"] == "cudnn"), None)
        for r in rows:
            if r["n"] == n:
                ratio = f"{base / r['ms']:.3f}" if base else "-"
                print(f"N={n} {r['impl']:28s} {r['ms']:7.3f} ms {r['tflops']:6.1f} TFLOP/s "
                      f"x cudnn {ratio}  err {r['rel_err']:.1e}")  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", choices=IMPLS, help="one implementation (the driver isolates each)")
    ap.add_argument("--n", type=int, nargs="+", default=[4096, 8192])
    ap.add_argument("--table", help="print the table of a JSON-lines file of earlier runs")
    args = ap.parse_args()
    if args.table:
        table(args.table)
        return 0
    triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8,
                                                                device="cuda"))  # fmt: skip
    for name in [args.only] if args.only else IMPLS:
        for n in args.n:
            print(json.dumps(measure(name, n)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
