"""Training-step time of the Llama-style decoder, eager and under ``torch.compile`` (GPU).

    python -m tools.compiled_step [--impl safeattn|sdpa|flex ...]
        [--mode eager|compiled ...] [--seq-len N ...] [--padding none|left ...]
        [--samples S] [--static] [--prewarm N] [--budget-s S] [--json PATH]

A measurement script, not an asv suite (asv imports every module here, so nothing beyond
the standard library is imported at module level). What it times is
``speed.ModelStepSuite``'s training step (``benchmarks/_llama.py``: 4 layers, hidden 2048,
16 query / 4 KV heads of 128, SwiGLU, rotary, vocabulary 8192, bf16, B=4; forward, float32
cross-entropy over the non-padding labels, backward, no optimizer), padding ``none`` or
``left`` (``workloads.model_padding``), seq_len 2048 and 4096, for:

- ``safeattn`` and ``sdpa`` (PyTorch's default SDPA backend choice), each ``eager``
  (``_llama.train_step``) and ``compiled``: the step's loss function (the whole model and
  its mask, built from the batch's padding mask inside it) under
  ``torch.compile(fullgraph=True)`` (Inductor), ``.backward()`` running AOTAutograd's
  compiled backward. The padding mask is a new tensor every step, as in train_step.
- ``flex``: FlexAttention compiled (``_attention.compiled_flex``), the rest of the step eager,
  as ModelStepSuite runs it (mode ``eager``).

Compiling: by default the sequence dimension of the batch is marked dynamic
(``torch._dynamo.maybe_mark_dynamic``), so each (impl, padding) compiles once for both
lengths; ``--static`` compiles every shape on its own (``dynamic=False``: twice the
compiles). Graph breaks: ``torch._dynamo.explain`` of the safeattn loss function (without
fullgraph, so breaks are counted rather than raised), per padding, before anything else
(explain resets Dynamo's caches).

Timing, as ModelStepSuite: two untimed steps (compile, autotune; a compile inside the timed
steps fails the entry), then ``_gpu_measure.cuda_event_samples`` (one CUDA-event pair per step,
L2 flushed, parameter gradients reset to None outside the timed region); the table shows
the median. Peak bytes: ``torch.cuda.max_memory_allocated()`` during one more step, less
what was allocated before it. An entry that fails shows its reason instead of numbers.
``--prewarm N`` first compiles the safeattn and FlexAttention kernels of the model step in
N processes (``tools/prewarm.py``); ``--budget-s`` starts no entry after that many
seconds, so the table still prints under a command time limit.

Output: one progress line per entry on stderr, a markdown table last on stdout;
``--json PATH`` also writes every row (with its samples) and the environment.
(Left whole at ~400 lines: one command whose grid, step variants, timing and report read
top to bottom; no piece is used elsewhere.)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any

IMPLS = ("safeattn", "sdpa", "flex")
MODES = ("eager", "compiled")
SEQ_LENS = (2048, 4096)
PADDINGS = ("none", "left")
# flex's attention is compiled already (and its step stays eager, as in ModelStepSuite).
COMPILABLE = ("safeattn", "sdpa")
# Graph breaks are counted for these impls' compiled loss (explain costs a traced forward).
EXPLAINED = ("safeattn",)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.compiled_step", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--impl", choices=IMPLS, action="append", help="default: all")
    parser.add_argument("--mode", choices=MODES, action="append", help="default: both")
    parser.add_argument("--seq-len", type=int, action="append", help="default: 2048 4096")
    parser.add_argument("--padding", choices=PADDINGS, action="append", help="default: both")
    parser.add_argument("--samples", type=int, default=20, help="timed steps per entry")
    parser.add_argument(
        "--static",
        action="store_true",
        help="compile every shape on its own (no dynamic sequence dim)",
    )
    parser.add_argument(
        "--prewarm",
        type=int,
        default=0,
        metavar="N",
        help="compile the model step's kernels in N processes first",
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=0.0,
        help="start no entry after this many seconds (0: no limit)",
    )
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    args.impl = tuple(dict.fromkeys(args.impl or IMPLS))
    args.mode = tuple(dict.fromkeys(args.mode or MODES))
    args.seq_len = tuple(dict.fromkeys(args.seq_len or SEQ_LENS))
    args.padding = tuple(dict.fromkeys(args.padding or PADDINGS))
    if args.samples < 1:
        parser.error("--samples must be at least 1")
    if any(n < 1 for n in args.seq_len):
        parser.error("--seq-len must be positive")
    return args


def grid(args: argparse.Namespace) -> list[tuple[str, str, int, str]]:
    """(impl, mode, seq_len, padding) in run order: eager before compiled (so the compiled
    entries find safeattn's kernels tuned), flex last (its compiles are the longest), and a
    compiled function's lengths one after the other (the second reuses its graph)."""
    order = []
    for mode in MODES:
        for impl in IMPLS:
            if impl not in args.impl or mode not in args.mode:
                continue
            if mode == "compiled" and impl not in COMPILABLE:
                continue  # flex: compiled attention, eager step, listed as "eager"
            order += [(impl, mode, n, pad) for pad in args.padding for n in args.seq_len]
    return sorted(order, key=lambda combo: combo[0] == "flex")  # stable: flex last


def model_loss(impl: str, cfg: Any = None) -> Callable:
    """``loss(params, batch) -> float32 scalar``: the decoder's loss with ``impl``'s
    attention, the mask built inside from ``batch.keep`` (what the compiled mode compiles;
    the eager mode runs the same through ``_llama.train_step``). ``cfg``: a
    ``workloads.ModelConfig``, default the suite's model."""
    from benchmarks import _llama

    def loss(params, batch):
        ids = batch.input_ids
        attend = _llama.attention_for(impl, batch.keep, ids.shape[1], ids.device)
        return _llama.loss(params, cfg, batch, attend)

    return loss


def _with_new_mask(batch):
    """The batch with a new padding-mask tensor, as a training loop's next batch has."""
    from benchmarks import _llama

    keep = None if batch.keep is None else batch.keep.clone()
    return _llama.Batch(batch.input_ids, batch.labels, batch.positions, keep)


def mark_seq_dynamic(batch) -> None:
    """Let Dynamo treat the sequence length (dim 1 of every (B, N) batch tensor) as
    symbolic, so one graph serves every length (no error if it specialises anyway)."""
    import torch

    for t in (batch.input_ids, batch.labels, batch.positions, batch.keep):
        if t is not None:
            torch._dynamo.maybe_mark_dynamic(t, 1)


def count_graph_breaks(impl: str, padding: str, seq_len: int) -> dict:
    """``{"graph_breaks": n, "reasons": [...]}`` of ``torch._dynamo.explain`` on the
    compiled mode's loss function (one traced forward, on the GPU)."""
    import torch

    from benchmarks import _llama
    from benchmarks._truth import workloads

    cfg = workloads.MODEL
    params = _llama.init_params(cfg, "cuda", "bfloat16")
    batch = _llama.make_batch(cfg, workloads.model_padding(padding, seq_len), seq_len, "cuda")
    explained = torch._dynamo.explain(model_loss(impl))(params, batch)
    reasons = [str(getattr(r, "reason", r)).splitlines()[0] for r in explained.break_reasons]
    return {"graph_breaks": int(explained.graph_break_count), "reasons": reasons}


def _raise_recompile_limit() -> None:
    """Every compiled loss shares one code object, whose Dynamo cache holds one graph per
    (impl, padding), and per length with --static: up to 8, Dynamo's default limit, past
    which it would silently run the step eagerly (DESIGN.md, known pitfalls)."""
    import torch._dynamo.config as dynamo_config

    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(dynamo_config, name):
            setattr(dynamo_config, name, max(getattr(dynamo_config, name), 64))


class Steps:
    """The compiled loss functions, one per (impl, padding), made on first use and kept
    for the next length (one torch.compile wrapper each)."""

    def __init__(self, static: bool):
        self.static = static
        self.compiled: dict[tuple[str, str], Callable] = {}

    def step(self, impl: str, mode: str, padding: str, params, batch) -> Callable:
        """``step() -> loss``: one training step without the optimizer."""
        from benchmarks import _llama
        from benchmarks._truth import workloads

        cfg = workloads.MODEL
        if mode == "eager":
            return lambda: _llama.train_step(params, cfg, batch, impl)
        import torch

        if (impl, padding) not in self.compiled:
            _raise_recompile_limit()
            self.compiled[impl, padding] = torch.compile(
                model_loss(impl, cfg), fullgraph=True, dynamic=False if self.static else None
            )
        loss_fn = self.compiled[impl, padding]

        def compiled_step():
            fresh = _with_new_mask(batch)
            if not self.static:
                mark_seq_dynamic(fresh)
            value = loss_fn(params, fresh)
            value.backward()
            return value.detach()

        return compiled_step


def measure(steps: Steps, impl: str, mode: str, seq_len: int, padding: str, samples: int):
    """{"step_ms": [ms, ...], "peak_bytes": n} of one entry on cuda:0."""
    import torch

    from benchmarks import _llama
    from benchmarks._gpu_measure import (
        check_no_compile,
        cuda_event_samples,
        dynamo_graphs,
        step_peak_bytes,
    )
    from benchmarks._truth import workloads

    cfg = workloads.MODEL
    params = _llama.init_params(cfg, "cuda", "bfloat16")
    batch = _llama.make_batch(cfg, workloads.model_padding(padding, seq_len), seq_len, "cuda")
    weights = list(params.values())
    step = steps.step(impl, mode, padding, params, batch)
    for _ in range(2):  # untimed: compiles, autotunes
        loss = step()
        if not torch.isfinite(loss):
            raise FloatingPointError(f"loss is {loss.item()}")
    torch.cuda.synchronize()
    graphs = dynamo_graphs()
    times = cuda_event_samples(step, samples, grad_to_none=weights)
    check_no_compile(graphs, f"{impl} {mode} training step")

    return {"step_ms": times, "peak_bytes": step_peak_bytes(step, weights)}


def median(samples: list[float]) -> float:
    return sorted(samples)[len(samples) // 2]


def run(
    args: argparse.Namespace,
    measure_fn: Callable = measure,
    explain_fn: Callable = count_graph_breaks,
    after: Callable[[], Any] | None = None,
) -> tuple[list[dict], dict]:
    """Measure the grid; returns (rows, graph breaks by (impl, padding) as "impl/padding").
    ``measure_fn(steps, impl, mode, seq_len, padding, samples)`` and
    ``explain_fn(impl, padding, seq_len)`` are replaceable (the CPU tests fake them);
    ``after()`` runs after every entry."""
    from benchmarks._grid import progress, reason_of

    deadline = time.monotonic() + (args.budget_s if args.budget_s > 0 else math.inf)
    breaks: dict[str, dict] = {}
    if "compiled" in args.mode:
        for impl in (i for i in EXPLAINED if i in args.impl):
            for padding in args.padding:
                name = f"{impl}/{padding}"
                try:
                    breaks[name] = explain_fn(impl, padding, min(args.seq_len))
                except Exception as exc:
                    breaks[name] = {"graph_breaks": None, "reasons": [reason_of(exc)]}
                progress(f"[compiled-step] graph breaks of {name}: {breaks[name]}")
                if after is not None:
                    after()
    steps = Steps(args.static)
    rows = []
    for impl, mode, seq_len, padding in grid(args):
        row: dict[str, Any] = {"impl": impl, "mode": mode, "seq_len": seq_len, "padding": padding}
        start = time.perf_counter()
        if time.monotonic() > deadline:
            row["error"] = "not started: --budget-s used up"
        else:
            try:
                row |= measure_fn(steps, impl, mode, seq_len, padding, args.samples)
                row["step_ms_median"] = median(row["step_ms"])
            except Exception as exc:  # one entry failing must not lose the others
                row["error"] = reason_of(exc)
        row["seconds"] = round(time.perf_counter() - start, 1)
        if mode == "compiled":
            row["graph_breaks"] = breaks.get(f"{impl}/{padding}", {}).get("graph_breaks")
        rows.append(row)
        outcome = row.get("error") or (
            f"{row['step_ms_median']:.2f} ms/step, peak {row['peak_bytes'] / 2**30:.2f} GiB"
        )
        progress(
            f"[compiled-step] {impl} {mode} N={seq_len} {padding}: {outcome} ({row['seconds']} s)"
        )
        if after is not None:
            after()
    return rows, breaks


def markdown_table(rows: list[dict]) -> str:
    """One line per entry: ms (median), peak GiB, eager/compiled speed ratio of the same
    (impl, seq_len, padding), graph breaks of the compiled safeattn loss, seconds spent."""
    eager = {
        (r["impl"], r["seq_len"], r["padding"]): r.get("step_ms_median")
        for r in rows
        if r["mode"] == "eager"
    }
    header = [
        "impl",
        "mode",
        "seq_len",
        "padding",
        "step ms (median)",
        "peak GiB",
        "eager / compiled",
        "graph breaks",
        "s",
    ]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        if "error" in r:
            ms, peak = f"not measured: {r['error']}", "-"
        else:
            ms, peak = f"{r['step_ms_median']:.2f}", f"{r['peak_bytes'] / 2**30:.2f}"
        ratio = "-"
        base = eager.get((r["impl"], r["seq_len"], r["padding"]))
        if r["mode"] == "compiled" and base and "error" not in r:
            ratio = f"{base / r['step_ms_median']:.2f}x"
        breaks = r.get("graph_breaks")
        cells = [
            r["impl"],
            r["mode"],
            str(r["seq_len"]),
            r["padding"],
            ms,
            peak,
            ratio,
            "-" if breaks is None else str(breaks),
            f"{r['seconds']:.0f}",
        ]
        lines.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)


def environment() -> dict:
    """What the numbers depend on besides the code: device, torch, triton."""
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda}
    try:
        import triton

        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    info["device"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return info


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(
            "compiled_step: needs a CUDA GPU (torch.cuda.is_available() is False)", file=sys.stderr
        )
        return 2
    if args.prewarm:
        from tools import prewarm

        prewarm.run(args.prewarm, kinds=("model",))
    rows, breaks = run(args, after=torch.cuda.empty_cache)
    env = environment()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {
                    "environment": env,
                    "dynamic_seq_len": not args.static,
                    "graph_breaks": breaks,
                    "rows": rows,
                },
                f,
                indent=2,
            )
            f.write("\n")
    for name, found in breaks.items():
        reasons = "; ".join(found["reasons"]) or "none"
        print(f"graph breaks, {name} compiled loss: {found['graph_breaks']} ({reasons})")
    print(
        f"\n{env['device']}, torch {env['torch']}, triton {env['triton']}; bf16, B=4; "
        f"{'static' if args.static else 'dynamic'} sequence dim when compiled; "
        "flex = FlexAttention compiled, rest of the step eager\n"
    )
    print(markdown_table(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
