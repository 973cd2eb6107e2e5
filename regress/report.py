"""Markdown tables from asv results, for the README: generated, never typed in.

    python -m regress.report                  # print the tables for results/
    python -m regress.report --update README.md
    python -m regress.report --update README.md --block gate-sensitivity

The README holds the output between ``<!-- results:start -->`` and ``<!-- results:end -->``;
``tests/test_readme.py`` checks that it matches what ``results/`` says. Its gate section
holds the gate's sensitivity on A/A pairs (:func:`gate_sensitivity_block`) between
``<!-- gate-sensitivity:start -->`` and ``<!-- gate-sensitivity:end -->``, checked by
``tests/test_aa.py``.

Why one file over ~400 lines: one small function per generated README table (speed, masks,
training step, features, live resources, numerics) and the two blocks that assemble them;
they share the commit lookup and the cell formats, and a reader finds every generated table
of the README here.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import pandas as pd

from . import aa, workloads
from .metrics import METRICS, OWN_IMPL, PEERS
from .ratios import (
    FEATURE_SUITE,
    LIVE_BUILD_SUITE,
    LIVE_SUITE,
    MASKED_SUITE,
    MODEL_SUITE,
    SPEED_SUITE,
    SUITE_SHAPES,
    geomean,
    peer_over_own,
    times_better,
)
from .results import LoadedResults, load_results

START, END = "<!-- results:start -->", "<!-- results:end -->"
GATE_START, GATE_END = "<!-- gate-sensitivity:start -->", "<!-- gate-sensitivity:end -->"


def newest_commit(loaded: LoadedResults, machine: str, suite: str) -> str | None:
    """The machine's newest commit (loader order) with ok results of ``suite``, or None."""
    rows = loaded.table[(loaded.table["machine"] == machine) & (loaded.table["suite"] == suite)]
    rows = rows[rows["status"] == "ok"]
    if rows.empty:
        return None
    # The loader's commit order (asv's, by commit date and history), not the date alone:
    # commits made within one second share a date.
    commits = loaded.commits[loaded.commits["machine"] == machine]
    order = dict(zip(commits["commit"], commits["order"], strict=True))
    return str(max(set(rows["commit"]), key=lambda c: order.get(c, -1)))


def _rate(x: float) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:g}"


def numerics_table(loaded: LoadedResults, machine: str) -> str:
    """Non-finite / wrong-result rate per adversarial family × implementation (worst over
    dtypes) at the machine's newest commit with GPU numerics; '' when there is none."""
    suite = "numerics.NumericsSuite"
    commit = newest_commit(loaded, machine, suite)
    if commit is None:
        return ""
    t = loaded.table
    rows = t[(t["machine"] == machine) & (t["suite"] == suite) & (t["commit"] == commit)]
    impls = [i for i in (OWN_IMPL, *PEERS) if i in set(rows["impl"])]
    pivots = {
        m: rows[rows["metric"] == m].pivot_table(
            index="family", columns="impl", values="value", aggfunc="max", dropna=False
        )
        for m in ("nonfinite_rate", "wrong_result_rate")
    }
    lines = [
        f"Non-finite / wrong-result rate per family on `{machine}` at `{commit[:8]}` "
        "(worst of fp16 and bf16; – = not measured):",
        "",
        "| family | " + " | ".join(impls) + " |",
        "|---|" + "---|" * len(impls),
    ]
    for family in sorted(set(rows["family"].dropna())):
        cells = []
        for impl in impls:
            vals = [
                pivots[m].at[family, impl]
                if family in pivots[m].index and impl in pivots[m].columns
                else math.nan
                for m in ("nonfinite_rate", "wrong_result_rate")
            ]
            cells.append(" / ".join(_rate(v) for v in vals))
        lines.append(f"| {family} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


SPEED_PASSES = ("forward_ms", "backward_ms", "fwd_bwd_ms")
SHAPE_KEYS = list(SUITE_SHAPES[SPEED_SUITE])  # a speed row's shape


def suite_rows(
    loaded: LoadedResults, machine: str, suite: str
) -> tuple[str | None, pd.DataFrame]:
    """(the machine's newest commit with results of ``suite``, that commit's ok rows of
    ``suite``); (None, no rows) when the machine never ran it."""
    commit = newest_commit(loaded, machine, suite)
    t = loaded.table
    if commit is None:
        return None, t.iloc[0:0]
    rows = t[(t["machine"] == machine) & (t["suite"] == suite) & (t["commit"] == commit)]
    return commit, rows[rows["status"] == "ok"]


def _speed_rows(loaded: LoadedResults, machine: str) -> tuple[str | None, pd.DataFrame]:
    return suite_rows(loaded, machine, SPEED_SUITE)


def _geomean_cell(ratios: pd.DataFrame, peer: str) -> str:
    """A table cell: the geometric mean of a peer's :func:`~regress.ratios.peer_over_own`
    column and its count, ``"1.23 (n=8)"``; ``"–"`` when the peer has none."""
    gm, n = geomean(ratios[peer]) if peer in ratios.columns else (math.nan, 0)
    return "–" if math.isnan(gm) else f"{gm:.2f} (n={n})"


def speed_table(loaded: LoadedResults, machine: str) -> str:
    """Peer time / safeattn time (above 1: safeattn faster) at the machine's newest commit
    with GPU speed results: the geometric mean per pass, then forward+backward per bf16
    shape; '' when there is none."""
    commit, rows = _speed_rows(loaded, machine)
    if commit is None or rows.empty:
        return ""
    lines = [
        f"Speed on `{machine}` at `{commit[:8]}`: peer time / safeattn time (above 1: "
        "safeattn is faster); B·N = 16k tokens, H·D = 2048, fp16 and bf16:",
        "",
    ]
    peers = [p for p in PEERS if p in set(rows["impl"])]
    lines += ["| pass | " + " | ".join(peers) + " |", "|---|" + "---|" * len(peers)]
    for metric in SPEED_PASSES:
        ratios = peer_over_own(rows[rows["metric"] == metric], SHAPE_KEYS)
        cells = [_geomean_cell(ratios, peer) for peer in peers]
        lines.append(f"| {metric.removesuffix('_ms')} | " + " | ".join(cells) + " |")
    ratios = peer_over_own(rows[rows["metric"] == "fwd_bwd_ms"], SHAPE_KEYS)
    bf16 = ratios.xs("bfloat16", level="dtype") if len(ratios) else ratios
    lines += [
        "",
        "Forward+backward, bf16, per shape (safeattn in ms; peers as ratios; – = cannot run "
        "the shape, or FlexAttention not measured at this head dim):",
        "",
        "| D | N | causal | GQA | safeattn ms | " + " | ".join(peers) + " |",
        "|---|---|---|---|---|" + "---|" * len(peers),
    ]
    for shape, row in bf16.iterrows():
        d, n, causal, gqa = shape
        cells = [_rate(round(row[p], 2)) if p in row.index else "–" for p in peers]
        lines.append(
            f"| {d} | {n} | {causal} | {gqa} | {row[OWN_IMPL]:.3f} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


MASKED_KEYS = list(SUITE_SHAPES[MASKED_SUITE])  # a masked-speed row's shape


def _ms(x: float) -> str:
    return "–" if x is None or not math.isfinite(x) else f"{x:.3f}"


def masked_table(loaded: LoadedResults, machine: str) -> str:
    """"safeattn vs peers per mask kind": per mask kind and pass, the geometric mean over
    dtype × head dim of peer time / safeattn time (above 1: safeattn faster), beside
    safeattn's own bf16 D=128 time, at the machine's newest commit with MaskedSpeedSuite
    results; '' when there is none."""
    commit, rows = suite_rows(loaded, machine, MASKED_SUITE)
    if commit is None or rows.empty:
        return ""
    peers = [p for p in PEERS if p in set(rows["impl"])]
    lines = [
        f"safeattn vs peers per mask kind on `{machine}` at `{commit[:8]}`: peer time / "
        "safeattn time, geometric mean over fp16/bf16 × D=64/128 (above 1: safeattn is "
        "faster; – = the peer cannot run the mask), and safeattn's bf16 D=128 time:",
        "",
        "| mask | pass | safeattn ms (bf16, D=128) | " + " | ".join(peers) + " |",
        "|---|---|---|" + "---|" * len(peers),
    ]
    for mask in [m for m in workloads.MASK_KINDS if m in set(rows["mask"])]:
        for metric in SPEED_PASSES:
            of_mask = rows[(rows["metric"] == metric) & (rows["mask"] == mask)]
            ratios = peer_over_own(of_mask, MASKED_KEYS)
            own = of_mask[
                (of_mask["impl"] == OWN_IMPL)
                & (of_mask["dtype"] == "bfloat16")
                & (of_mask["head_dim"] == 128)
            ]["value"]
            cells = [_ms(own.iloc[0] if len(own) else math.nan)]
            cells += [_geomean_cell(ratios, peer) for peer in peers]
            lines.append(
                f"| {mask} | {metric.removesuffix('_ms')} | " + " | ".join(cells) + " |"
            )
    lines += ["", "Workloads (causal, H·D = 2048; masks built once, outside the timed calls):"]
    lines += [f"- `{m}`: {w.label}" for m, w in workloads.MASK_WORKLOADS.items()]
    return "\n".join(lines)


def _gib(n: float) -> str:
    return "–" if n is None or not math.isfinite(n) else f"{n / 2**30:.2f}"


def model_step_table(loaded: LoadedResults, machine: str) -> str:
    """ModelStepSuite's step time per seq_len × padding × implementation (peers also as a
    ratio to safeattn) and safeattn's peak extra memory, at the machine's newest commit
    with its results; '' when there is none."""
    commit, rows = suite_rows(loaded, machine, MODEL_SUITE)
    if commit is None or rows.empty:
        return ""
    impls = [i for i in (OWN_IMPL, "sdpa", "flex") if i in set(rows["impl"])]
    impls += sorted(set(rows["impl"]) - set(impls))
    shape = list(SUITE_SHAPES[MODEL_SUITE])
    steps = rows[rows["metric"] == "step_ms"].pivot_table(
        index=shape, columns="impl", values="value", aggfunc="first"
    )
    peaks = rows[rows["metric"] == "peak_bytes"].pivot_table(
        index=shape, columns="impl", values="value", aggfunc="first"
    )
    lines = [
        f"Training step of a Llama-style decoder on `{machine}` at `{commit[:8]}` "
        f"({workloads.MODEL.summary()}; B={workloads.MODEL_BATCH}, bf16; forward, loss, "
        "backward): ms per step (peers: and peer time / safeattn time, above 1: safeattn is "
        "faster; – = not measured), and peak extra GPU memory:",
        "",
        "| seq_len | padding | " + " | ".join(f"{i} ms" for i in impls)
        + " | peak GiB (" + " / ".join(impls) + ") |",
        "|---|---|" + "---|" * (len(impls) + 1),
    ]
    paddings = list(workloads.PADDING_LABELS)
    keys = sorted(steps.index, key=lambda k: (k[0], paddings.index(k[1]) if k[1] in paddings
                                              else len(paddings)))
    for seq_len, padding in keys:
        step = steps.loc[(seq_len, padding)]
        own = step.get(OWN_IMPL, math.nan)
        cells = []
        for impl in impls:
            value = step.get(impl, math.nan)
            text = "–" if not math.isfinite(value) else f"{value:.1f}"
            if impl != OWN_IMPL and math.isfinite(value) and math.isfinite(own) and own > 0:
                text += f" ({times_better(own, value, METRICS['step_ms'].better):.2f})"
            cells.append(text)
        peak = peaks.loc[(seq_len, padding)] if (seq_len, padding) in peaks.index else {}
        gib = " / ".join(_gib(peak.get(i, math.nan)) for i in impls)
        label = workloads.PADDING_LABELS.get(padding, padding)
        lines.append(f"| {seq_len} | {label} | " + " | ".join(cells) + f" | {gib} |")
    return "\n".join(lines)


def feature_table(loaded: LoadedResults, machine: str) -> str:
    """FeatureSpeedSuite at the machine's newest commit with its results: per feature and
    pass, each implementation's bf16 time in ms and, in parentheses, that time over the same
    implementation's plain time (the feature's cost: 1.00 = free); '' when there is none."""
    commit, rows = suite_rows(loaded, machine, FEATURE_SUITE)
    if commit is None or rows.empty:
        return ""
    impls = [OWN_IMPL, *(p for p in PEERS if p in set(rows["impl"]))]
    rows = rows[rows["dtype"] == "bfloat16"]
    shape = workloads.FEATURE_SHAPE
    lines = [
        f"Feature cost on `{machine}` at `{commit[:8]}` (B={shape.batch}, H={shape.heads}, "
        f"N={shape.seq_len}, D={shape.head_dim}, non-causal, bf16): ms, and in parentheses "
        "the time over the same implementation's plain time (– = the implementation lacks "
        "the feature or refused it):",
        "",
        "| feature | pass | " + " | ".join(impls) + " |",
        "|---|---|" + "---|" * len(impls),
    ]
    for metric in SPEED_PASSES:
        times = rows[rows["metric"] == metric].pivot_table(
            index="feature", columns="impl", values="value", aggfunc="first"
        )
        plain = times.loc["none"] if "none" in times.index else pd.Series(dtype=float)
        for feature in [f for f in workloads.FEATURES if f in times.index]:
            cells = []
            for impl in impls:
                value = times.loc[feature].get(impl, math.nan)
                base = plain.get(impl, math.nan)
                text = _ms(value)
                if feature != "none" and math.isfinite(value) and math.isfinite(base) and base > 0:
                    text += f" ({value / base:.2f})"
                cells.append(text)
            pass_name = metric.removesuffix("_ms")
            lines.append(f"| {feature} | {pass_name} | " + " | ".join(cells) + " |")
    lines += ["", "Features:"]
    lines += [f"- `{f}`: {label}" for f, label in workloads.FEATURES.items()]
    return "\n".join(lines)


LIVE_KERNELS = ("forward", "bwd_dkdv", "bwd_dq")  # bwd_preprocess: a few dozen registers


def live_resources_table(loaded: LoadedResults, machine: str) -> str:
    """Registers and spilled bytes per thread of the kernels one forward+backward launched,
    per build (LiveResourcesSuite's dense multi-head one, LiveBuildResourcesSuite's causal,
    GQA and masked ones), at the machine's newest commit with LiveBuildResourcesSuite
    results; bf16 in the table, and every spilling kernel of either dtype named below it;
    '' when there is none."""
    commit, rows = suite_rows(loaded, machine, LIVE_BUILD_SUITE)
    if commit is None or rows.empty:
        return ""
    t = loaded.table
    dense = t[(t["machine"] == machine) & (t["suite"] == LIVE_SUITE) & (t["commit"] == commit)
              & (t["status"] == "ok")].assign(build="dense")  # fmt: skip
    rows = pd.concat([dense, rows])
    rows = rows[rows["metric"].isin(("registers", "spills"))]
    masks = list(workloads.MASK_KINDS)

    def order(build: str) -> tuple:  # dense, then causal / GQA by name, then the mask kinds
        return (build != "dense", build in masks, masks.index(build) if build in masks else build)

    builds = sorted(set(rows["build"]), key=order)
    value = rows.set_index(["metric", "dtype", "head_dim", "build", "kernel"])["value"]

    def cell(dtype: str, head_dim: int, build: str, kernel: str) -> str:
        key = (dtype, head_dim, build, kernel)
        regs, spills = (value.get(("registers", *key)), value.get(("spills", *key)))
        if regs is None or spills is None:
            return "–"
        return f"{regs:.0f} / {spills:.0f}" + (" **spills**" if spills > 0 else "")

    lines = [
        f"Live kernel resources on `{machine}` at `{commit[:8]}`: what one forward+backward "
        "launched, as the speed suites call it (the assembler every benchmark process uses), "
        "registers / spilled bytes per thread, bf16:",
        "",
        "| D | build | " + " | ".join(LIVE_KERNELS) + " |",
        "|---|---|" + "---|" * len(LIVE_KERNELS),
    ]
    for head_dim in sorted(set(rows["head_dim"])):
        for build in builds:
            cells = [cell("bfloat16", head_dim, build, k) for k in LIVE_KERNELS]
            lines.append(f"| {head_dim} | {build} | " + " | ".join(cells) + " |")
    spilling = rows[(rows["metric"] == "spills") & (rows["value"] > 0)]
    kernels = rows[rows["metric"] == "spills"]
    named = ", ".join(
        f"{r.kernel} {r.dtype} D={r.head_dim} {r.build} ({r.value:.0f} B)"
        for r in spilling.sort_values(["head_dim", "build", "kernel", "dtype"]).itertuples()
    )
    lines += ["", f"Spilling: {len(spilling)} of {len(kernels)} live kernels (fp16 and bf16)"
              + (f": {named}." if named else ".")]  # fmt: skip
    return "\n".join(lines)


def readme_block(results_dir: str | Path) -> str:
    """Every table this module makes, for each machine with results, in machine order."""
    loaded = load_results(results_dir)
    parts = []
    for machine in sorted(loaded.machines):
        parts += [
            speed_table(loaded, machine),
            masked_table(loaded, machine),
            model_step_table(loaded, machine),
            feature_table(loaded, machine),
            live_resources_table(loaded, machine),
            numerics_table(loaded, machine),
        ]
    parts = [p for p in parts if p]
    if not parts:
        return "No GPU results yet: run `python tools/run.py` on a GPU machine."
    return "\n\n".join(parts)


def gate_sensitivity_block(results_dir: str | Path) -> str:
    """The "gate sensitivity on A/A pairs" block: for each machine with results, the table of
    :mod:`regress.aa` over its A/A pairs found with git, or a sentence saying it
    has none. Raises :class:`~regress.aa.AAInputError` when git cannot run there."""
    loaded = load_results(results_dir)
    intro = (
        "Gate sensitivity on A/A pairs, generated from results/ by "
        "`python -m regress.aa` (per GPU: `--machine M`, pairs found with git). An "
        "A/A pair is two consecutive measured commits whose `safeattn/` and `benchmarks/` "
        "trees are identical and which measured the same benchmarks, so the gate should "
        "pass it; then, in a copy of the head's "
        f"results, every safeattn speed row is made {aa.BROAD_SLOWDOWN - 1:.0%} slower, one "
        f"row (the median-noise row: the median A/A ratio) {aa.ONE_ROW_SLOWDOWN - 1:.0%} "
        f"slower, one safeattn non-finite rate set to {aa.PLANTED_NONFINITE_RATE:g}, and the "
        "head's result file truncated (corrupt) or removed (missing), where the gate must "
        "exit 2. Default policy:"
    )
    lines = [aa.wrap_paragraph(intro)]
    for machine in sorted(loaded.machines):
        pairs, checks = aa.machine_checks(results_dir, loaded, machine)
        lines += ["", aa.render_markdown(machine, checks, pairs)]
    return "\n".join(lines)


def readme_section(text: str, start: str = START, end: str = END) -> str:
    """The generated part of a README (between the markers ``start`` and ``end``)."""
    m = re.search(re.escape(start) + r"\n(.*?)\n" + re.escape(end), text, re.S)
    if not m:
        raise ValueError(f"no {start} ... {end} block in the README")
    return m.group(1)


# --block NAME -> (start marker, end marker, generator of the block from a results dir)
BLOCKS = {
    "results": (START, END, readme_block),
    "gate-sensitivity": (GATE_START, GATE_END, gate_sensitivity_block),
}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--results", default="results")
    ap.add_argument("--update", metavar="README", help="rewrite the README's generated blocks")
    ap.add_argument(
        "--block",
        choices=["all", *BLOCKS],
        default="all",
        help="which generated block to print or rewrite (default: all)",
    )
    args = ap.parse_args(argv)
    names = list(BLOCKS) if args.block == "all" else [args.block]
    blocks = {name: BLOCKS[name][2](args.results) for name in names}
    if not args.update:
        print("\n\n".join(blocks.values()))
        return 0
    path = Path(args.update)
    text = path.read_text()
    for name, block in blocks.items():
        start, end, _ = BLOCKS[name]
        old = readme_section(text, start, end)
        text = text.replace(f"{start}\n{old}\n{end}", f"{start}\n{block}\n{end}")
    path.write_text(text)
    print(f"[report] updated {path}: {', '.join(names)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    pd.set_option("display.width", 200)
    raise SystemExit(main())
