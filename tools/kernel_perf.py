"""Quick forward/backward TFLOP/s table: safeattn beside SDPA-flash, SDPA-cuDNN and
FlexAttention, measured in the same process (GPU only; not an asv suite).

    python tools/kernel_perf.py [--json out.json] [--d 64 128] [--n 1024 4096 16384]

bf16, B·N = 16384 tokens, H·D = 2048 (DESIGN.md's grid). Median of CUDA-event timings
(``triton.testing.do_bench``); warm-up and autotuning happen before the timed region.
Nothing is imported at module level beyond the standard library: asv imports every module
of this folder when it discovers benchmarks, in environments that may lack torch.
Backward is timed as ``torch.autograd.grad`` of a kept forward graph.
"""

from __future__ import annotations

import argparse
import json
import sys


def _peers():
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sdpa = torch.nn.functional.scaled_dot_product_attention

    def backend(b):
        def run(q, k, v, causal):
            with sdpa_kernel(b):
                return sdpa(q, k, v, is_causal=causal)

        return run

    import torch._dynamo as dynamo

    # Dynamo's default recompile limit (8) silently drops FlexAttention to an eager path.
    dynamo.config.cache_size_limit = 1024
    # The compiled backward donates its buffers unless told not to, which forbids the
    # retain_graph=True that timing the backward alone needs.
    import torch._functorch.config as functorch_config

    functorch_config.donated_buffer = False
    if hasattr(dynamo.config, "recompile_limit"):
        dynamo.config.recompile_limit = 1024
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    flex_c = torch.compile(flex_attention, dynamic=False)
    masks: dict = {}

    def flex(q, k, v, causal):
        if not causal:
            return flex_c(q, k, v)
        key = (q.shape[-2], k.shape[-2])
        if key not in masks:
            masks[key] = create_block_mask(
                lambda b, h, i, j: j <= i, None, None, q.shape[-2], k.shape[-2], device="cuda"
            )
        return flex_c(q, k, v, block_mask=masks[key])

    return {
        "sdpa_flash": backend(SDPBackend.FLASH_ATTENTION),
        "sdpa_cudnn": backend(SDPBackend.CUDNN_ATTENTION),
        "flex": flex,
    }


def measure(fn, q, k, v, causal: bool) -> tuple[float, float]:
    """(forward ms, backward ms), medians."""
    import torch
    from triton.testing import do_bench

    out = fn(q, k, v, causal)  # warm-up / autotune / compile
    do = torch.randn_like(out)
    torch.autograd.grad(out, (q, k, v), do)
    fwd = do_bench(lambda: fn(q, k, v, causal), warmup=25, rep=100, return_mode="median")
    out = fn(q, k, v, causal)
    bwd = do_bench(
        lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True),
        warmup=25,
        rep=100,
        return_mode="median",
    )
    return fwd, bwd


def main(argv: list[str] | None = None) -> int:
    import torch

    import safeattn
    from regress.metrics import attention_flops, tflops

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--d", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--n", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--impls", nargs="+", default=["safeattn", "sdpa_flash", "sdpa_cudnn", "flex"])
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    impls = {"safeattn": lambda q, k, v, c: safeattn.attention(q, k, v, causal=c)}
    impls.update(_peers())
    rows = []
    for d in args.d:
        for n in args.n:
            for causal in (False, True):
                b, h = 16384 // n, 2048 // d
                g = torch.Generator(device="cuda").manual_seed(0)
                q, k, v = (
                    torch.randn(
                        b, h, n, d, device="cuda", dtype=torch.bfloat16, generator=g
                    ).requires_grad_()
                    for _ in range(3)
                )
                for name in args.impls:
                    try:
                        f, bw = measure(impls[name], q, k, v, causal)
                    except Exception as e:  # a peer that can't run a shape is reported
                        print(f"[perf] {name} d={d} n={n} causal={causal}: {e!r}"[:300])
                        f = bw = float("nan")
                    fl = attention_flops(b, h, n, n, d, causal, "forward")
                    row = dict(impl=name, d=d, n=n, causal=causal, fwd_ms=f, bwd_ms=bw,
                               fwd_tflops=tflops(f, fl),
                               bwd_tflops=tflops(bw, attention_flops(b, h, n, n, d, causal,
                                                                     "backward")))  # fmt: skip
                    rows.append(row)
                    print(f"[perf] {name:10s} d={d:3d} n={n:5d} causal={causal!s:5s} "
                          f"fwd {row['fwd_tflops']:6.1f}  bwd {row['bwd_tflops']:6.1f} TFLOP/s",
                          flush=True)  # fmt: skip
    if args.json:
        from safeattn.kernels import launch

        chosen = {str(k): str(v) for k, v in launch.chosen_configs().items()}
        with open(args.json, "w") as f:
            json.dump(dict(gpu=torch.cuda.get_device_name(), rows=rows, chosen=chosen), f, indent=1)
    print("\nTFLOP/s fwd / bwd (bf16, B*N=16k, H*D=2048) on", torch.cuda.get_device_name())
    print(f"{'d':>4}{'n':>6}{'causal':>7}  " + "".join(f"{i:>17}" for i in args.impls))
    for d in args.d:
        for n in args.n:
            for causal in (False, True):
                cells = []
                for name in args.impls:
                    r = next(x for x in rows if (x["impl"], x["d"], x["n"], x["causal"])
                             == (name, d, n, causal))  # fmt: skip
                    cells.append(f"{r['fwd_tflops']:7.0f} /{r['bwd_tflops']:6.0f}  ")
                print(f"{d:>4}{n:>6}{causal!s:>7}  " + "".join(f"{c:>17}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
