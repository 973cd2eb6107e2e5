"""Probe: can a five-matmul backward (dQ accumulated by atomics inside the dK/dV loop) beat
safeattn's seven-matmul one on sm90 with triton 3.6? (issue 13, the backward targets.)

Why: safeattn's backward recomputes S and dP in a separate dQ kernel, 7 matmuls of work
against the 5 of cuDNN and FlashAttention-3, so at equal per-matmul speed it cannot pass
5/7 = 0.71x cuDNN; the D=128 N=4096 target is 0.85x. FlashAttention-2/3 add dQ's partial
sums into an fp32 buffer with atomics instead (FA3: TMA bulk reductions). Triton 3.6 has both:
``tl.atomic_add`` on pointers (one RED per element) and a tensor descriptor's ``atomic_add``
(a TMA ``cp.reduce.async.bulk`` of the whole tile).

A minimal kernel (dense, causal top-left or not, TMA loads, no safety logic) is timed
beside safeattn's backward, SDPA's cuDNN backend and FlexAttention on the same inputs in one
process; its gradients are checked against safeattn's. The timed probe call is the fp32
buffer's zeroing, the kernel and the fp32 -> dtype conversion; delta (rowsum dO * O) is
computed once outside it and its cost printed beside (safeattn's own preprocess is timed in
its backward).

    python docs/perf/atomic_dq_probe_h200_2026-11-28/atomic_dq_probe.py > probe.jsonl
    python docs/perf/atomic_dq_probe_h200_2026-11-28/atomic_dq_probe.py --table probe.jsonl
    ncu --profile-from-start off --section SpeedOfLight --section Occupancy \\
        --section WarpStateStats --section MemoryWorkloadAnalysis \\
        python docs/perf/atomic_dq_probe_h200_2026-11-28/atomic_dq_probe.py --ncu
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", ".."))

import safeattn

LOG2E = 1.4426950408889634


@triton.jit
def _tile(desc, b, h, row):
    t = desc.load([b, h, row, 0])
    return t.reshape(t.shape[2], t.shape[3])


@triton.jit
def _loop(dk, dv, k, v, DescQ, DescdO, DescdQ, dq_base, lse_base, delta_base, b, h, offs_n,
          lo, hi, qk_scale, MASKED: tl.constexpr, ATOMIC: tl.constexpr, ROTATE: tl.constexpr,
          BM: tl.constexpr, D: tl.constexpr):  # fmt: skip
    nblk = (hi - lo) // BM
    first = 0
    if ROTATE:  # key blocks start at different query blocks: fewer same-address reductions
        first = tl.program_id(0) % tl.maximum(nblk, 1)
    offs_m0 = tl.arange(0, BM)
    offs_d = tl.arange(0, D)
    for i in tl.range(0, nblk):
        j = i + first
        j = tl.where(j >= nblk, j - nblk, j)
        start_m = lo + j * BM
        q = _tile(DescQ, b, h, start_m)
        do = _tile(DescdO, b, h, start_m)
        offs_m = start_m + offs_m0
        lse2 = tl.load(lse_base + offs_m)
        delta = tl.load(delta_base + offs_m)
        sT = tl.dot(k, tl.trans(q)) * qk_scale
        if MASKED:
            sT = tl.where(offs_m[None, :] >= offs_n[:, None], sT, float("-inf"))
        pT = tl.math.exp2(sT - lse2[None, :])
        dv = tl.dot(pT.to(do.dtype), do, dv)
        acc = tl.broadcast_to(-delta[None, :], (k.shape[0], BM))
        dsT = pT * tl.dot(v, tl.trans(do), acc)
        ds16 = dsT.to(q.dtype)
        dk = tl.dot(ds16, q, dk)
        dq = tl.dot(tl.trans(ds16), k)
        if ATOMIC == 1:
            DescdQ.atomic_add([b, h, start_m, 0], dq.reshape(1, 1, BM, D))
        else:
            tl.atomic_add(dq_base + offs_m[:, None] * D + offs_d[None, :], dq, sem="relaxed")
    return dk, dv


@triton.jit
def _probe_bwd(DQ, DescQ, DescK, DescV, DescdO, DescdK, DescdV, DescdQ, Lse2, Delta,
               qk_scale, sm_scale, H, N,
               BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, CAUSAL: tl.constexpr,
               ATOMIC: tl.constexpr, ROTATE: tl.constexpr):  # fmt: skip
    pid_n = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    n_start = pid_n * BN
    k = _tile(DescK, b, h, n_start)
    v = _tile(DescV, b, h, n_start)
    offs_n = n_start + tl.arange(0, BN)
    dk = tl.zeros([BN, D], tl.float32)
    dv = tl.zeros([BN, D], tl.float32)
    lse_base = Lse2 + bh.to(tl.int64) * N
    delta_base = Delta + bh.to(tl.int64) * N
    dq_base = DQ + bh.to(tl.int64) * N * D
    args = (k, v, DescQ, DescdO, DescdQ, dq_base, lse_base, delta_base, b, h, offs_n)
    if CAUSAL:  # the diagonal's masked blocks, then the full ones below it
        dk, dv = _loop(dk, dv, *args, n_start, n_start + BN, qk_scale, True, ATOMIC, False, BM, D)
        dk, dv = _loop(dk, dv, *args, n_start + BN, N, qk_scale, False, ATOMIC, False, BM, D)
    else:
        dk, dv = _loop(dk, dv, *args, 0, N, qk_scale, False, ATOMIC, ROTATE, BM, D)
    DescdK.store([b, h, n_start, 0], (dk * sm_scale).to(k.dtype).reshape(1, 1, BN, D))
    DescdV.store([b, h, n_start, 0], dv.to(k.dtype).reshape(1, 1, BN, D))


def _desc(t, rows, d):
    return TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 1, rows, d])


# (BM, BN, warps, stages)
# (BM, BN, warps, stages). Cross-compiled for sm90 here first (triton 3.6, CUDA 13.0's ptxas,
# bf16, D=128): these build without spilling, or (64, 64, 4, 2) and (64, 128, 8, 2) with a
# 24-40 B stack; (32, 128, 4, 2), (64, 128, 8, 1) and (128, 128, 8, 1) spilled 150-1050 B.
CONFIGS = [(32, 64, 4, 3), (32, 64, 4, 4), (32, 64, 4, 2), (32, 128, 8, 2), (32, 128, 8, 3),
           (64, 64, 4, 2), (64, 128, 8, 2)]  # fmt: skip
RED_CONFIGS = [(32, 64, 4, 3), (32, 128, 8, 2)]  # the per-element atomics, for comparison


def probe_call(q, k, v, do, lse2, delta, causal, cfg, atomic, rotate):
    """dq, dk, dv of the probe kernel and the compiled kernel (registers, spills)."""
    bm, bn, w, s = cfg
    b, h, n, d = q.shape
    dq32 = torch.zeros(q.shape, device=q.device, dtype=torch.float32)
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    descs = [_desc(q, bm, d), _desc(k, bn, d), _desc(v, bn, d), _desc(do, bm, d),
             _desc(dk, bn, d), _desc(dv, bn, d), _desc(dq32, bm, d)]  # fmt: skip
    scale = d**-0.5
    kern = _probe_bwd[(n // bn, b * h)](
        dq32, *descs, lse2, delta, scale * LOG2E, scale, h, n, BM=bm, BN=bn, D=d,
        CAUSAL=causal, ATOMIC=atomic, ROTATE=rotate, num_warps=w, num_stages=s,
    )  # fmt: skip
    return (dq32 * scale).to(q.dtype), dk, dv, kern


def _rel(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30)).item()


def measure(dtype_name: str, d: int, n: int, causal: bool, with_flex: bool) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    bench = lambda fn: triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
    dtype = getattr(torch, dtype_name)
    b, h = 16384 // n, 2048 // d
    gen = torch.Generator(device="cuda").manual_seed(n + d)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=gen)
               .requires_grad_(True) for _ in range(3))  # fmt: skip
    do = torch.randn(b, h, n, d, device="cuda", dtype=dtype, generator=gen)
    base = dict(gpu=torch.cuda.get_device_name(), dtype=dtype_name, d=d, n=n, causal=causal)

    def emit(**row):
        print(json.dumps({**base, **row}), flush=True)

    peers = {"safeattn": lambda: safeattn.attention(q, k, v, causal=causal)}

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    peers["cudnn"] = cudnn
    if with_flex:
        import torch._functorch.config as functorch_config
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        functorch_config.donated_buffer = False  # backward with retain_graph=True
        flex = torch.compile(flex_attention)
        bmask = None
        if causal:
            bmask = create_block_mask(lambda b_, h_, qi, ki: qi >= ki, None, None, n, n)
        peers["flex"] = lambda: flex(q, k, v, block_mask=bmask)
    ref = None
    for name, fn in peers.items():
        out = fn()
        out.backward(do)
        if name == "safeattn":
            ref = (q.grad.clone(), k.grad.clone(), v.grad.clone())
        kept = fn()

        def bwd(kept=kept):
            q.grad = k.grad = v.grad = None
            kept.backward(do, retain_graph=True)

        emit(impl=name, bwd_ms=bench(bwd))
    with torch.no_grad():
        out, lse = safeattn.attention(q, k, v, causal=causal, return_lse=True)
        lse2 = (lse * LOG2E).contiguous()
        delta = (do.float() * out.float()).sum(-1).contiguous()
        emit(impl="delta_torch", bwd_ms=bench(lambda: (do.float() * out.float()).sum(-1)))
        qd, kd, vd, dod = (t.detach() for t in (q, k, v, do))
        for cfg in CONFIGS:
            for atomic, rotate in ((1, False), (1, True), (0, False)):
                if ((causal or n < 4096) and rotate) or (not atomic and cfg not in RED_CONFIGS):
                    continue
                name = f"probe-{'tma' if atomic else 'red'}{'-rot' if rotate else ''}-M{cfg[0]}-N{cfg[1]}-w{cfg[2]}-s{cfg[3]}"  # noqa: E501
                try:
                    dq, dk, dv, kern = probe_call(qd, kd, vd, dod, lse2, delta, causal, cfg,
                                                  atomic, rotate)  # fmt: skip
                    err = [_rel(a, r) for a, r in zip((dq, dk, dv), ref, strict=True)]
                    ms = bench(lambda cfg=cfg, a=atomic, r=rotate: probe_call(
                        qd, kd, vd, dod, lse2, delta, causal, cfg, a, r))  # fmt: skip
                    emit(impl=name, bwd_ms=ms, rel_err=[round(e, 5) for e in err],
                         regs=kern.n_regs, spills=kern.n_spills)  # fmt: skip
                except Exception as exc:  # a probe reports every failure and goes on
                    emit(impl=name, error=f"{type(exc).__name__}: {str(exc)[:300]}")
                torch.cuda.empty_cache()


def profile(configs: list[tuple]) -> None:
    """Under ``ncu --profile-from-start off``: safeattn's backward and the probe kernel at each
    of ``configs`` (TMA reductions) once, bf16 D=128 N=4096 dense, all compiled and tuned
    before the profiled bracket."""
    q, k, v, do = (torch.randn(4, 16, 4096, 128, device="cuda", dtype=torch.bfloat16)
                   for _ in range(4))  # fmt: skip
    q.requires_grad_(True)
    k.requires_grad_(True)
    v.requires_grad_(True)
    out, lse = safeattn.attention(q, k, v, return_lse=True)
    out.backward(do, retain_graph=True)  # compiles and tunes; the bracket replays it
    with torch.no_grad():
        lse2 = (lse * LOG2E).contiguous()
        delta = (do.float() * out.float()).sum(-1).contiguous()
    qd, kd, vd = q.detach(), k.detach(), v.detach()
    for cfg in configs:
        probe_call(qd, kd, vd, do, lse2, delta, False, cfg, 1, False)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    out.backward(do, retain_graph=True)
    for cfg in configs:
        probe_call(qd, kd, vd, do, lse2, delta, False, cfg, 1, False)
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


def table(path: str) -> None:
    with open(path) as f:
        rows = [json.loads(line) for line in f if line.startswith("{")]
    shapes = sorted({(r["dtype"], r["d"], r["n"], r["causal"]) for r in rows})
    for shape in shapes:
        sel = [r for r in rows if (r["dtype"], r["d"], r["n"], r["causal"]) == shape]
        cud = next((r["bwd_ms"] for r in sel if r["impl"] == "cudnn"), None)
        print(f"== {shape}")
        for r in sorted(sel, key=lambda r: r.get("bwd_ms", 1e9)):
            if "error" in r:
                print(f"  {r['impl']:<34} ERROR {r['error'][:150]}")
                continue
            x = f"{cud / r['bwd_ms']:.3f}x cudnn" if cud else ""
            extra = ""
            if "regs" in r:
                extra = f" err={r['rel_err']} regs={r['regs']} spills={r['spills']}"
            print(f"  {r['impl']:<34} {r['bwd_ms']:8.3f} ms {x}{extra}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--table")
    ap.add_argument("--no-flex", action="store_true")
    ap.add_argument("--ncu", action="store_true", help="profile() instead of the timings")
    args = ap.parse_args()
    if args.ncu:
        profile([(64, 128, 8, 2), (32, 64, 4, 3)])
        return 0
    if args.table:
        table(args.table)
        return 0
    for shape in [("bfloat16", 128, 4096, False), ("bfloat16", 128, 4096, True),
                  ("bfloat16", 128, 1024, False)]:  # fmt: skip
        measure(*shape, with_flex=not args.no_flex)
    return 0


if __name__ == "__main__":
    sys.exit(main())
