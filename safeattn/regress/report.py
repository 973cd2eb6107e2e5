"""Markdown tables from asv results, for the README: generated, never typed in.

    python -m safeattn.regress.report                  # print the tables for results/
    python -m safeattn.regress.report --update README.md

The README holds the output between ``<!-- results:start -->`` and ``<!-- results:end -->``;
``tests/test_readme.py`` checks that it matches what ``results/`` says.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from pathlib import Path

import pandas as pd

from .metrics import OWN_IMPL, PEERS
from .results import LoadedResults, load_results

START, END = "<!-- results:start -->", "<!-- results:end -->"


def _newest_commit(loaded: LoadedResults, machine: str, suite: str) -> str | None:
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
    commit = _newest_commit(loaded, machine, suite)
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


SPEED_SUITE = "speed.SpeedSuite"
SPEED_PASSES = ("forward_ms", "backward_ms", "fwd_bwd_ms")
SHAPE_KEYS = ["dtype", "head_dim", "seq_len", "causal", "gqa"]  # a speed row's shape


def _speed_rows(loaded: LoadedResults, machine: str) -> tuple[str | None, pd.DataFrame]:
    commit = _newest_commit(loaded, machine, SPEED_SUITE)
    t = loaded.table
    if commit is None:
        return None, t.iloc[0:0]
    rows = t[(t["machine"] == machine) & (t["suite"] == SPEED_SUITE) & (t["commit"] == commit)]
    return commit, rows[rows["status"] == "ok"]


def peer_over_own(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per ``keys`` (e.g. a shape): every other implementation's value divided by
    safeattn's (for times: above 1 = safeattn faster), a column per implementation, and
    safeattn's own value in column ``safeattn``. Empty when safeattn has no value.
    ``rows``: loader rows of one metric (columns ``keys``, ``impl``, ``value``)."""
    wide = rows.pivot_table(index=keys, columns="impl", values="value", aggfunc="first")
    if OWN_IMPL not in wide.columns:
        return wide.iloc[0:0]
    others = [c for c in wide.columns if c != OWN_IMPL]
    return wide[others].div(wide[OWN_IMPL], axis=0).assign(**{OWN_IMPL: wide[OWN_IMPL]})


def geomean(values) -> tuple[float, int]:
    """Geometric mean of the finite positive ``values`` and how many there were (NaN, 0
    when none)."""
    kept = [float(v) for v in values if math.isfinite(v) and v > 0]
    if not kept:
        return math.nan, 0
    return math.exp(sum(map(math.log, kept)) / len(kept)), len(kept)


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
        cells = []
        for peer in peers:
            gm, n = geomean(ratios[peer]) if peer in ratios.columns else (math.nan, 0)
            cells.append("–" if math.isnan(gm) else f"{gm:.2f} (n={n})")
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


def readme_block(results_dir: str | Path) -> str:
    """Every table this module makes, for each machine with results, in machine order."""
    loaded = load_results(results_dir)
    parts = []
    for machine in sorted(loaded.machines):
        parts += [speed_table(loaded, machine), numerics_table(loaded, machine)]
    parts = [p for p in parts if p]
    if not parts:
        return "No GPU results yet: run `python benchmarks/run.py` on a GPU machine."
    return "\n\n".join(parts)


def readme_section(text: str) -> str:
    """The generated part of a README (between the markers)."""
    m = re.search(re.escape(START) + r"\n(.*?)\n" + re.escape(END), text, re.S)
    if not m:
        raise ValueError(f"no {START} ... {END} block in the README")
    return m.group(1)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--results", default="results")
    ap.add_argument("--update", metavar="README", help="rewrite the README's generated block")
    args = ap.parse_args(argv)
    block = readme_block(args.results)
    if not args.update:
        print(block)
        return 0
    path = Path(args.update)
    text = path.read_text()
    old = readme_section(text)
    path.write_text(text.replace(f"{START}\n{old}\n{END}", f"{START}\n{block}\n{END}"))
    print(f"[report] updated {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    pd.set_option("display.width", 200)
    raise SystemExit(main())
