"""The Hopper path against the portable forward, cuDNN and FlexAttention (issue 13's shapes).

Per shape: the forward of safeattn with ``SAFEATTN_TMA=0`` (portable) and ``=1`` (Hopper),
of SDPA's cuDNN backend and of compiled FlexAttention, and the forward + backward of each
(the switch chooses the path of the forward and of both backward kernels). Times are medians of
``triton.testing.do_bench`` (L2 flushed before each call), one process, the same inputs for
every implementation. Also: each launched kernel's config, registers and spills per path,
the largest difference between the two paths' outputs, and any other process on the GPU at
the start and the end (``nvidia-smi``).

    python docs/perf/hopper_ab.py [--json out.json] [--only LABEL-PART]
    python docs/perf/hopper_ab.py --table LOG...    # the table again from logs, no GPU
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

import torch
import triton

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

import safeattn
from benchmarks._attention import attention_call, compiled_flex, impl_context
from regress.metrics import attention_flops, tflops
from safeattn.kernels import launch

# (label, dtype, B, Hq, Hkv, N, D, causal, left padding of the key mask: None or fraction)
SHAPES = [
    ("D128 N8192", torch.bfloat16, 2, 16, 16, 8192, 128, False, None),
    ("D128 N8192 causal", torch.bfloat16, 2, 16, 16, 8192, 128, True, None),
    ("D128 N4096 fp16", torch.float16, 4, 16, 16, 4096, 128, False, None),
    ("D128 N2048 causal GQA 32:4 B8", torch.bfloat16, 8, 32, 4, 2048, 128, True, None),
    ("D256 N4096 causal", torch.bfloat16, 4, 8, 8, 4096, 256, True, None),
    ("D96 N4096", torch.bfloat16, 4, 16, 16, 4096, 96, False, None),
    ("D64 N4096", torch.bfloat16, 4, 32, 32, 4096, 64, False, None),
    ("D128 N4096 leftpad+causal", torch.bfloat16, 4, 16, 16, 4096, 128, True, 0.25),
]


def flops(b, hq, n, d, causal, backward=False):
    """The project's FLOP count (regress.metrics) of one forward, or forward + backward."""
    return attention_flops(b, hq, n, n, d, causal, "fwd_bwd" if backward else "forward")


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def measure(flex, label, dtype, b, hq, hkv, n, d, causal, pad) -> dict:
    """One shape's row: every implementation's times, the launched kernels, the paths' gap."""
    from torch.nn.attention.flex_attention import create_block_mask

    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(b, hq, n, d, device="cuda", dtype=dtype, generator=gen)
    k = torch.randn(b, hkv, n, d, device="cuda", dtype=dtype, generator=gen)
    v = torch.randn(b, hkv, n, d, device="cuda", dtype=dtype, generator=gen)
    do = torch.randn_like(q)
    for t in (q, k, v):
        t.requires_grad_(True)
    kw = {"causal": causal}
    starts = None
    if pad is not None:
        starts = (torch.arange(b, device="cuda") * int(pad * n)) // max(b - 1, 1)
        kw["key_mask"] = torch.arange(n, device="cuda")[None, :] >= starts[:, None]
    impls = {}
    for mode in ("0", "1"):

        def fa(mode=mode):
            os.environ["SAFEATTN_TMA"] = mode
            return safeattn.attention(q, k, v, **kw)

        impls[f"safeattn_{'tma' if mode == '1' else 'portable'}"] = fa
    if pad is None:  # the suites' own peer calls (benchmarks/_attention.py)
        sdpa_cudnn = attention_call("sdpa_cudnn", causal, n, hq // hkv)

        def cudnn():
            with impl_context("sdpa_cudnn"):
                return sdpa_cudnn(q, k, v)

        impls["cudnn"] = cudnn
        flex_call = attention_call("flex", causal, n, hq // hkv)
        impls["flex"] = lambda: flex_call(q, k, v)
    else:  # left padding + causal: no suite shape, its own block mask

        def mod(bb, hh, qi, ki):
            return (qi >= ki) & (ki >= starts[bb])

        bm = create_block_mask(mod, b, None, n, n, device="cuda")
        impls["flex"] = lambda: flex(q, k, v, block_mask=bm, enable_gqa=hq != hkv)
    outs, res = {}, {}
    row = {"shape": label, "dtype": str(dtype).split(".")[-1]}
    for name, fn in impls.items():
        out = fn()
        outs[name] = out.detach().float()
        out.backward(do)
        fwd = bench(fn)

        def step(fn=fn):
            for t in (q, k, v):
                t.grad = None
            fn().backward(do)

        both = bench(step)
        if name.startswith("safeattn"):
            res[name] = {kernel: f"{r.config} regs {r.registers} spills {r.spills} B"
                         for kernel, r in sorted(launch.launched_kernels().items())}  # fmt: skip
        row[name] = {
            "fwd_ms": fwd, "fwd_bwd_ms": both,
            "fwd_tflops": tflops(fwd, flops(b, hq, n, d, causal)),
            "fwd_bwd_tflops": tflops(both, flops(b, hq, n, d, causal, True)),
        }  # fmt: skip
        print(f"{label:<32}{name:<20} fwd {fwd:7.3f} ms  fwd+bwd {both:7.3f} ms", flush=True)
    diff = (outs["safeattn_tma"] - outs["safeattn_portable"]).abs()
    row["tma_vs_portable_max_abs"] = float(diff.nan_to_num(0).max())
    row["resources"] = res
    print(f"  paths differ by at most {row['tma_vs_portable_max_abs']:.3e}; {res}", flush=True)
    os.environ["SAFEATTN_TMA"] = "auto"
    return row


LINE = re.compile(r"^(?P<label>.+?)\s+(?P<impl>safeattn_\w+|cudnn|flex)\s+fwd\s+(?P<fwd>[\d.]+) ms"
                  r"\s+fwd\+bwd\s+(?P<both>[\d.]+) ms$")  # fmt: skip


def parse(paths: list[str]) -> dict[str, dict[str, tuple[float, float]]]:
    """{shape label: {impl: (fwd ms, fwd+bwd ms)}} from this script's timing lines in the
    given logs (a later log's line for the same shape and impl wins)."""
    times: dict[str, dict[str, tuple[float, float]]] = {}
    for path in paths:
        with open(path) as f:
            for m in filter(None, (LINE.match(line.rstrip("\n")) for line in f)):
                impl = times.setdefault(m["label"].strip(), {})
                impl[m["impl"]] = (float(m["fwd"]), float(m["both"]))
    return times


def table(times: dict[str, dict[str, tuple[float, float]]]) -> str:
    """The Markdown table of :func:`parse`'s timings (shapes with both safeattn paths)."""
    shapes = {shape[0]: shape for shape in SHAPES}
    lines = ["| shape | portable fwd | Hopper fwd (x portable) | cuDNN fwd (ratio) | "
             "Flex fwd (ratio) | portable fwd+bwd | Hopper fwd+bwd (x portable) | cuDNN (ratio) | "
             "Flex (ratio) |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for label, impls in times.items():
        if not {"safeattn_portable", "safeattn_tma"} <= impls.keys():
            continue
        _, _, b, hq, _, n, d, causal, _ = shapes[label]
        f_fwd, f_both = flops(b, hq, n, d, causal), flops(b, hq, n, d, causal, True)
        (p_fwd, p_both), (t_fwd, t_both) = impls["safeattn_portable"], impls["safeattn_tma"]
        cells = [label, f"{tflops(p_fwd, f_fwd):.0f}",
                 f"{tflops(t_fwd, f_fwd):.0f} ({p_fwd / t_fwd:.2f})"]  # fmt: skip
        for peer in ("cudnn", "flex"):
            c = impls.get(peer)
            cells.append(f"{tflops(c[0], f_fwd):.0f} ({c[0] / t_fwd:.2f})" if c else "-")
        cells += [
            f"{tflops(p_both, f_both):.0f}",
            f"{tflops(t_both, f_both):.0f} ({p_both / t_both:.2f})",
        ]
        for peer in ("cudnn", "flex"):
            c = impls.get(peer)
            cells.append(f"{tflops(c[1], f_both):.0f} ({c[1] / t_both:.2f})" if c else "-")
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("TFLOP/s; ratio = peer time / Hopper-path time (above 1: safeattn faster)")
    return "\n".join(lines)


def other_gpu_processes() -> str:
    """The other processes holding a CUDA context on the GPUs (``nvidia-smi``), for the log:
    a timing taken beside another process's kernels is noise (a test run cut by its time
    limit can leave its workers running)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,process_name,used_memory",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    others = [line.strip() for line in out.splitlines()
              if line.strip() and line.split(",")[0].strip() != str(os.getpid())]  # fmt: skip
    return "; ".join(others) or "none"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--only", help="measure only the shapes whose label contains this")
    ap.add_argument("--table", nargs="+", metavar="LOG",
                    help="no GPU: print the table of the timing lines in these logs")  # fmt: skip
    args = ap.parse_args()
    if args.table:
        print(table(parse(args.table)))
        return 0
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__} triton "
          f"{triton.__version__} cudnn {torch.backends.cudnn.version()}", flush=True)  # fmt: skip
    print(f"# other processes on the GPU at the start: {other_gpu_processes()}", flush=True)
    flex = compiled_flex()
    rows = [measure(flex, *shape) for shape in SHAPES if (args.only or "") in shape[0]]
    print(f"# other processes on the GPU at the end: {other_gpu_processes()}", flush=True)
    times = {r["shape"]: {k: (v["fwd_ms"], v["fwd_bwd_ms"]) for k, v in r.items()
                          if isinstance(v, dict) and "fwd_ms" in v} for r in rows}  # fmt: skip
    print("\n" + table(times))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
