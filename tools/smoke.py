"""GPU smoke run of ``speed.MaskedSpeedSuite`` and ``speed.ModelStepSuite`` outside asv.

    python -m tools.smoke [--suite masked|model] [--only NAME=V1,V2 ...]
                               [--prewarm N] [--budget-s S] [--full]

Measures every combination of the two suites' grids with the suites' own functions
(``speed._masked_times``, ``speed._model_step``) through ``_grid.measure_grid``, so an
implementation that cannot run a combination shows the reason asv would record as NaN, and
prints one table per suite: forward / backward / forward+backward ms (medians) with
safeattn's TFLOP/s on attended pairs, or step ms and peak GiB; then, per mask kind, the
geometric mean of peer time / safeattn time. For checking the suites on a GPU (quick mode:
10 samples; ``--full`` takes the suite's 30), not for history: nothing is recorded. Needs
torch with CUDA, not asv; progress lines (one per combination, with its seconds) go to
stderr.

``--only impl=safeattn,flex --only mask=bool_mask`` restricts a grid (a parameter the
suite lacks is ignored); ``--prewarm N`` first compiles the two suites' safeattn and
FlexAttention kernels in N parallel processes (tools/prewarm.py); ``--budget-s S``
starts no combination after S seconds (the rest show "not started"), so the tables still
print under a command time limit.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from benchmarks._env import QUICK_ENV
from benchmarks._grid import Missing, measure_grid
from benchmarks._truth import metrics, workloads

SUITES = ("masked", "model")
_CLASSES = {"masked": "MaskedSpeedSuite", "model": "ModelStepSuite"}
_MEASURE = {"masked": "_masked_times", "model": "_model_step"}
_DESCRIBE = {"masked": "_medians", "model": "_step_summary"}


def parse_only(items: list[str]) -> dict[str, set[str]]:
    """``["impl=safeattn,flex", "head_dim=128"]`` -> ``{"impl": {...}, "head_dim": {"128"}}``."""
    only: dict[str, set[str]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not values:
            raise ValueError(f"--only takes NAME=VALUE[,VALUE...], got {item!r}")
        only.setdefault(name.strip(), set()).update(v.strip() for v in values.split(","))
    return only


def combos(suite_class: Any, only: dict[str, set[str]]) -> list[tuple]:
    """The suite's grid, restricted by ``only`` (values compared as strings)."""
    names = suite_class.param_names
    return [
        combo
        for combo in itertools.product(*suite_class.params)
        if all(
            str(value) in only[name]
            for name, value in zip(names, combo, strict=True)
            if name in only
        )
    ]


def within_budget(measure: Callable, deadline: float) -> Callable:
    """``measure`` that refuses to start after ``deadline`` (time.monotonic())."""

    def checked(*combo: Any) -> Any:
        if time.monotonic() > deadline:
            raise TimeoutError("not started: --budget-s used up")
        return measure(*combo)

    return checked


def _median(samples: list[float]) -> float:
    return sorted(samples)[len(samples) // 2]


def masked_rows(measured: dict) -> list[list[str]]:
    """Table rows of MaskedSpeedSuite's measurements ``{combo: {pass: samples} | Missing}``:
    the combination, ms per pass, safeattn-style TFLOP/s; a Missing one ends in its reason."""
    rows = []
    for (impl, dtype, head_dim, mask), value in measured.items():
        cells = [impl, dtype, str(head_dim), mask]
        if isinstance(value, Missing):
            rows.append([*cells, "-", "-", f"not measured: {value.reason}"])
            continue
        ms = {name: _median(samples) for name, samples in value.items()}
        pairs = workloads.MASK_WORKLOADS[mask].attended_pairs()
        heads = workloads.heads_for(head_dim)
        tflops = [
            metrics.tflops(ms[name], metrics.attended_flops(pairs, heads, head_dim, name))
            for name in ("forward", "backward")
        ]
        rows.append([
            *cells,
            " / ".join(f"{ms[name]:.3f}" for name in ("forward", "backward", "fwd_bwd")),
            " / ".join(f"{t:.0f}" for t in tflops),
        ])
    return rows


def model_rows(measured: dict) -> list[list[str]]:
    """Table rows of ModelStepSuite's measurements ``{combo: {...} | Missing}``."""
    rows = []
    for (impl, seq_len, padding), value in measured.items():
        cells = [impl, str(seq_len), padding]
        if isinstance(value, Missing):
            rows.append([*cells, "-", "-", f"not measured: {value.reason}"])
        else:
            peak = value["peak_bytes"] / 2**30
            rows.append([*cells, f"{_median(value['step_ms']):.2f}", f"{peak:.2f}"])
    return rows


def peer_ratios(measured: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows): per mask kind and pass, the geometric mean over dtype × head_dim of
    peer time / safeattn time (above 1: safeattn faster) and how many pairs it averages."""
    peers = sorted({c[0] for c in measured} - {metrics.OWN_IMPL})
    rows = []
    for mask in dict.fromkeys(c[3] for c in measured):
        for name in ("forward", "backward", "fwd_bwd"):
            cells = [mask, name]
            for peer in peers:
                logs = []
                for (impl, dtype, head_dim, kind), value in measured.items():
                    own = measured.get((metrics.OWN_IMPL, dtype, head_dim, kind))
                    if impl != peer or kind != mask:
                        continue
                    if isinstance(value, Missing) or own is None or isinstance(own, Missing):
                        continue
                    logs.append(math.log(_median(value[name]) / _median(own[name])))
                gm = f"{math.exp(sum(logs) / len(logs)):.2f} (n={len(logs)})" if logs else "-"
                cells.append(gm)
            rows.append(cells)
    return ["mask", "pass", *peers], rows


def format_table(header: list[str], rows: list[list[str]]) -> str:
    """Plain aligned columns; cells beyond the header (a reason) run on at the end."""
    n = len(header)
    widths = [max([len(header[i]), *(len(r[i]) for r in rows)]) for i in range(n)]
    lines = []
    for row in [header, *rows]:
        cells = [c.ljust(w) for c, w in zip(row[:n], widths, strict=True)] + row[n:]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def run(speed: Any, suites: tuple[str, ...], only: dict[str, set[str]], budget_s: float) -> str:
    """Measure the chosen grids with ``speed`` (the benchmarks.speed module) and return the
    tables as text."""
    deadline = time.monotonic() + (budget_s if budget_s > 0 else math.inf)
    out = []
    for suite in suites:
        suite_class = getattr(speed, _CLASSES[suite], None)
        if suite_class is None:
            raise SystemExit(f"[smoke] speed.{_CLASSES[suite]} is absent: no usable CUDA GPU here")
        measure = within_budget(getattr(speed, _MEASURE[suite]), deadline)
        describe = getattr(speed, _DESCRIBE[suite])
        measured = measure_grid(f"smoke-{suite}", combos(suite_class, only), measure, describe)
        if suite == "masked":
            header = ["impl", "dtype", "D", "mask", "fwd / bwd / fwd+bwd ms", "TFLOP/s fwd / bwd"]
            out += [f"== speed.{_CLASSES[suite]} (medians; TFLOP/s on attended pairs)",
                    format_table(header, masked_rows(measured)), ""]
            header, ratios = peer_ratios(measured)
            if len(header) > 2:
                out += ["peer time / safeattn time, geometric mean over dtype x D "
                        "(above 1: safeattn faster):", format_table(header, ratios), ""]
        else:
            header = ["impl", "seq_len", "padding", "step ms", "peak GiB"]
            out += [f"== speed.{_CLASSES[suite]} (B={workloads.MODEL_BATCH}, bf16, "
                    f"{workloads.MODEL.summary()}; medians)",
                    format_table(header, model_rows(measured)), ""]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", choices=SUITES, action="append", default=[])
    parser.add_argument("--only", action="append", default=[], metavar="NAME=V1,V2")
    parser.add_argument("--prewarm", type=int, default=0, metavar="N",
                        help="compile the kernels in N parallel processes first")
    parser.add_argument("--budget-s", type=float, default=0.0,
                        help="start no combination after this many seconds (0: no limit)")
    parser.add_argument("--full", action="store_true", help="the suites' full sample count")
    args = parser.parse_args(argv)
    try:
        only = parse_only(args.only)
    except ValueError as exc:
        parser.error(str(exc))
    suites = tuple(args.suite) or SUITES
    if args.full:
        os.environ.pop(QUICK_ENV, None)
    else:
        os.environ[QUICK_ENV] = "1"
    if args.prewarm:
        from tools import prewarm

        prewarm.run(args.prewarm, kinds=suites)
    from benchmarks import speed

    print(run(speed, suites, only, args.budget_s), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
