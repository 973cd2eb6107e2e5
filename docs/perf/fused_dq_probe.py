"""Is dQ cheaper as atomics inside the dK/dV loop than as its own kernel? (issue 13's backward)

safeattn's backward runs 7 matmuls per (query block, key block) pair: the dK/dV kernel's
QK^T, dO V^T, P^T dO and dS^T Q, and the dQ kernel's QK^T, dO V^T and dS K again. cuDNN and
FlashAttention-2/3 run 5: dQ's dS K sits in the dK/dV loop and is added into an fp32 buffer
with atomics, then converted. On the H200 (D = 128 N = 4096 causal bf16, B = 4, H = 16;
docs/perf/session_redo_span_2026-12-02) our two kernels reach 569-579 TFLOP/s each (dQ
725 us, dK/dV 950 us), cuDNN's backward 488 TFLOP/s over its 5 matmuls, so the gap is the
recomputation, not the kernels' efficiency. What the 5-matmul form costs in Triton is the
open question: the atomics (B·H·N·D fp32 adds per key block a row sees) and the conversion.

This probe answers it before any library change: a minimal dense backward, no masks beyond
causal, no NaN guard, no GQA, D = 128, in two forms:
- ``split``: the same loop without the dQ product (what our dK/dV kernel computes), timed
  alone, and with safeattn's whole backward beside it;
- ``atomic``: the loop plus ``dS K`` added into an fp32 dQ buffer (``tl.atomic_add``,
  relaxed), then the buffer converted to the input dtype; buffer zeroing and conversion are
  inside the timed call.
Both use safeattn's forward for O and the LSE, and safeattn's preprocess for delta (outside
the timed call, as both forms need them). cuDNN's backward is timed in the same process.

    python docs/perf/fused_dq_probe.py > fused_dq.jsonl        # GPU: every config, JSON rows
    python docs/perf/fused_dq_probe.py --table fused_dq.jsonl
    TRITON_INTERPRET=1 python docs/perf/fused_dq_probe.py --check  # CPU: gradients vs fp64
    python docs/perf/fused_dq_probe.py --static      # CPU: each config cross-compiled for sm90

What it cannot say: what the NaN guard and the masks cost on top (the atomics cannot be
redone by a guarded second launch, so dQ would need its guard inline) and what becomes of
``deterministic=True`` (atomics add in any order; that mode would keep today's dQ kernel).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.append(str(Path(__file__).resolve().parents[2]))

LOG2E = 1.4426950408889634
# (BLOCK_M query rows a step, BLOCK_N keys a program, warps, stages)
CONFIGS = [(64, 128, 8, 2), (64, 128, 8, 1), (32, 128, 8, 2), (64, 64, 4, 2), (64, 64, 4, 3),
           (32, 64, 4, 3), (128, 128, 8, 1)]  # fmt: skip
SHAPES = [(4096, True), (4096, False), (1024, True)]  # (N, causal), B = 16384 // N, H = 16


@triton.jit
def _bwd_kv(
    Q, K, V, dO, Lse2, Delta, dK, dV, dQacc, qk_scale, sm_scale, seq,
    CAUSAL: tl.constexpr, ATOMIC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, D: tl.constexpr,
):  # fmt: skip
    """Grid (seq // BLOCK_N, B * H), contiguous (B, H, seq, D) tensors, seq a multiple of both
    blocks. One program: a block of keys, every query block that sees it; dK, dV written once,
    dQ added into the fp32 ``dQacc`` when ATOMIC. Lse2 is the log2-domain LSE (safeattn's)."""
    pid_n = tl.program_id(0)
    bh = tl.program_id(1).to(tl.int64)
    base = bh * seq * D
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, D)
    k = tl.load(K + base + offs_n[:, None] * D + offs_d[None, :])
    v = tl.load(V + base + offs_n[:, None] * D + offs_d[None, :])
    dk = tl.zeros((BLOCK_N, D), dtype=tl.float32)
    dv = tl.zeros((BLOCK_N, D), dtype=tl.float32)
    start = (pid_n * BLOCK_N) // BLOCK_M * BLOCK_M if CAUSAL else 0
    for m0 in tl.range(start, seq, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        q = tl.load(Q + base + offs_m[:, None] * D + offs_d[None, :])
        do = tl.load(dO + base + offs_m[:, None] * D + offs_d[None, :])
        lse = tl.load(Lse2 + bh * seq + offs_m)
        delta = tl.load(Delta + bh * seq + offs_m)
        p_t = tl.math.exp2(tl.dot(k, tl.trans(q)) * qk_scale - lse[None, :])  # (N, M)
        if CAUSAL:
            p_t = tl.where(offs_m[None, :] >= offs_n[:, None], p_t, 0.0)
        dv = tl.dot(p_t.to(do.dtype), do, dv)
        dp_t = tl.dot(v, tl.trans(do))
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk)
        if ATOMIC:
            dq = tl.dot(tl.trans(ds_t), k) * sm_scale  # (M, D)
            tl.atomic_add(dQacc + base + offs_m[:, None] * D + offs_d[None, :], dq, sem="relaxed")
    tl.store(dK + base + offs_n[:, None] * D + offs_d[None, :], (dk * sm_scale).to(k.dtype))
    tl.store(dV + base + offs_n[:, None] * D + offs_d[None, :], dv.to(v.dtype))


def saved(q, k, v, do, causal: bool):
    """(lse2, delta) from safeattn's own forward and preprocess: the inputs both forms need."""
    import safeattn

    out, lse = safeattn.attention(q, k, v, causal=causal, return_lse=True)
    lse2 = (lse.float() * LOG2E).contiguous()
    delta = (out.float() * do.float()).sum(-1).contiguous()
    return lse2, delta


def backward(q, k, v, do, lse2, delta, causal: bool, cfg, atomic: bool):
    """(dq or None, dk, dv): the probe's backward with one config."""
    block_m, block_n, warps, stages = cfg
    b, h, n, d = q.shape
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    dq_acc = torch.zeros(q.shape, device=q.device, dtype=torch.float32) if atomic else q
    scale = 1.0 / math.sqrt(d)
    _bwd_kv[(n // block_n, b * h)](
        q, k, v, do, lse2, delta, dk, dv, dq_acc, scale * LOG2E, scale, n,
        CAUSAL=causal, ATOMIC=atomic, BLOCK_M=block_m, BLOCK_N=block_n, D=d,
        num_warps=warps, num_stages=stages,
    )  # fmt: skip
    return (dq_acc.to(q.dtype) if atomic else None), dk, dv


def check() -> None:
    """CPU (TRITON_INTERPRET=1): both forms' gradients against fp64 autograd."""
    torch.manual_seed(0)
    b, h, n, d = 1, 2, 64, 128
    for causal in (True, False):
        q, k, v, do = (torch.randn(b, h, n, d) for _ in range(4))
        ref = [t.double().requires_grad_() for t in (q, k, v)]
        s = ref[0] @ ref[1].transpose(-1, -2) / math.sqrt(d)
        if causal:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
        (torch.softmax(s, -1) @ ref[2]).backward(do.double())
        lse2, delta = saved(q, k, v, do, causal)
        for atomic in (False, True):
            dq, dk, dv = backward(q, k, v, do, lse2, delta, causal, (32, 32, 4, 1), atomic)
            pairs = [("dk", dk, ref[1].grad), ("dv", dv, ref[2].grad)]
            pairs += [("dq", dq, ref[0].grad)] if atomic else []
            for name, got, want in pairs:
                err = (got.double() - want).abs().max().item()
                assert err < 1e-4, f"causal={causal} atomic={atomic} {name}: {err:.2e}"
            print(f"causal={causal} atomic={atomic}: dq/dk/dv within 1e-4 of fp64")


def static() -> None:
    """CPU: each config of both forms compiled for sm90 (bf16, causal): shared memory,
    registers and spilled bytes per thread, read as the static audit reads them."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from safeattn.audit import _regs_and_stack

    sig = {name: "*bf16" for name in ("Q", "K", "V", "dO", "dK", "dV")}
    sig |= {"Lse2": "*fp32", "Delta": "*fp32", "dQacc": "*fp32", "qk_scale": "fp32",
            "sm_scale": "fp32", "seq": "i32"}  # fmt: skip
    for cfg in CONFIGS:
        block_m, block_n, warps, stages = cfg
        for atomic in (False, True):
            consts = dict(CAUSAL=True, ATOMIC=atomic, BLOCK_M=block_m, BLOCK_N=block_n, D=128)
            src = ASTSource(fn=_bwd_kv, signature={**sig, **{c: "constexpr" for c in consts}},
                            constexprs=consts)  # fmt: skip
            name = "M{}-N{}-w{}-s{}".format(*cfg) + ("/atomic" if atomic else "/split")
            try:
                kernel = triton.compile(
                    src,
                    target=GPUTarget("cuda", 90, 128),
                    options=dict(num_warps=warps, num_stages=stages),
                )
                regs, stack = _regs_and_stack(kernel.asm["cubin"])
                print(
                    f"{name:24s} shared {kernel.metadata.shared:7d} B  registers {regs:3d}  "
                    f"spills {stack:5d} B"
                )
            except Exception as exc:  # a config that does not compile: say so, go on
                print(f"{name:24s} {str(exc).splitlines()[0][:120]}")


def measure_shape(n: int, causal: bool) -> dict:
    """GPU: one shape's row: GPU-time medians of both forms per config, safeattn's whole
    backward (its preprocess included; the probe's delta is computed outside) and cuDNN's."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import safeattn
    from benchmarks._gpu_measure import cuda_event_samples

    def ms(fn, leaves=()):
        return round(statistics.median(cuda_event_samples(fn, 25, grad_to_none=leaves)), 4)

    b, h, d = 16384 // n, 16, 128
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (
        torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=gen)
        for _ in range(4)
    )
    lse2, delta = saved(q, k, v, do, causal)
    flops = 4 * b * h * n * n * d * (0.5 if causal else 1.0)  # one forward's 2 matmuls
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = safeattn.attention(*leaves, causal=causal)
    ours = ms(lambda: out.backward(do, retain_graph=True), leaves)
    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
        c_out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
        cudnn = ms(lambda: c_out.backward(do, retain_graph=True), leaves)
    row = dict(n=n, causal=causal, b=b, h=h, d=d, safeattn_bwd_ms=ours, cudnn_bwd_ms=cudnn)
    for cfg in CONFIGS:
        name = "M{}-N{}-w{}-s{}".format(*cfg)
        for atomic in (False, True):
            key = f"{name}/{'atomic' if atomic else 'split'}"
            run = lambda cfg=cfg, atomic=atomic: backward(
                q, k, v, do, lse2, delta, causal, cfg, atomic
            )
            try:
                run()
                t = ms(run)
                # matmuls: split 4, atomic 5, each half of a forward's 2
                row[key] = dict(ms=t, tflops=round(flops * (2.5 if atomic else 2.0) / t / 1e9))
            except Exception as exc:  # a config that does not fit: say so, go on
                row[key] = dict(error=str(exc).splitlines()[0][:160])
    if causal and n == 4096:  # the atomic form's gradients at the real size, against ours
        dq, dk, dv = backward(q, k, v, do, lse2, delta, causal, CONFIGS[0], True)
        for t in leaves:
            t.grad = None
        out.backward(do, retain_graph=True)
        row["max_abs_diff_vs_safeattn"] = {
            nm: (a.float() - t.grad.float()).abs().max().item()
            for nm, a, t in zip(("dq", "dk", "dv"), (dq, dk, dv), leaves, strict=True)
        }
    return row


def measure() -> None:
    """GPU: every shape's row as one JSON line on stdout."""
    for n, causal in SHAPES:
        print(json.dumps(measure_shape(n, causal)), flush=True)


def table(paths: list[str]) -> None:
    for path in paths:
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            head = f"N={row['n']} causal={row['causal']}"
            print(f"{head}: safeattn {row['safeattn_bwd_ms']} ms, cuDNN {row['cudnn_bwd_ms']} ms")
            for key, val in row.items():
                if isinstance(val, dict) and ("ms" in val or "error" in val):
                    ok = "ms" in val
                    fig = f"{val['ms']:.3f} ms {val['tflops']} TFLOP/s" if ok else val["error"]
                    print(f"  {key:24s} {fig}")
            if "max_abs_diff_vs_safeattn" in row:
                print(f"  vs safeattn: {row['max_abs_diff_vs_safeattn']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="CPU interpreter: gradients vs fp64")
    ap.add_argument("--static", action="store_true", help="CPU: sm90 resources per config")
    ap.add_argument("--table", nargs="+")
    args = ap.parse_args()
    if args.table:
        table(args.table)
    elif args.check:
        check()
    elif args.static:
        static()
    else:
        measure()


if __name__ == "__main__":
    main()
