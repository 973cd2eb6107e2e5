"""The must-be-zero rates: the numerics page's non-finite and wrong-result rates per
adversarial family, dtype and implementation with its heatmap, and the overview's summary
of the newest commit that measured them."""

from __future__ import annotations

from typing import Any

import altair as alt
import pandas as pd

from dashboard.views.common import NOT_MEASURED, SAFETY_METRICS, commit_rows, shown_text
from regress.metrics import IMPL_PARAM, METRICS, OWN_IMPL
from regress.results import LoadedResults

# The suites that measure the must-be-zero rates: the GPU suite first; a CPU machine
# (make demo without a GPU) runs the Triton-interpreter one only.
SAFETY_SUITES: tuple[str, ...] = ("numerics.NumericsSuite", "numerics.InterpreterNumericsSuite")
SAFETY_BENCHMARKS: tuple[str, ...] = tuple(
    f"{suite}.track_{m}" for suite in SAFETY_SUITES for m in SAFETY_METRICS
)


def latest_safety(loaded: LoadedResults, machine: str) -> tuple[str | None, pd.DataFrame]:
    """(the machine's newest commit with safety-rate results, its safety rows), or
    (None, no rows): the rates a person asks about even when the newest commit ran other
    suites only."""
    t = loaded.table
    rows = t[(t["machine"] == machine) & t["metric"].isin(SAFETY_METRICS)]
    if "suite" in rows.columns:
        # The GPU suite where the machine ran it, else the interpreter suite (a CPU machine).
        present = [s for s in SAFETY_SUITES if (rows["suite"] == s).any()]
        if present:
            rows = rows[rows["suite"] == present[0]]
    if rows.empty:
        return None, rows
    commits = loaded.commits[loaded.commits["machine"] == machine]
    order = dict(zip(commits["commit"], commits["order"], strict=True))
    commit = max(set(rows["commit"]), key=lambda c: order.get(c, -1))
    return commit, rows[rows["commit"] == commit]


def nonfinite_summary(safety: pd.DataFrame) -> pd.DataFrame:
    """Safety rows -> per (metric, impl): rows, rows with a value (``measured``), rows
    above 0, the worst rate as text (``"not measured"`` when no row has a value).

    safeattn first, then peers; ``impl`` is ``"—"`` for benchmarks without an impl.
    """
    columns = ["metric", "impl", "rows", "measured", "above_zero", "worst"]
    if safety.empty:
        return pd.DataFrame(columns=columns)
    impl = safety["params"].map(lambda p: p.get(IMPL_PARAM, "—"))
    values = pd.to_numeric(safety["value"], errors="coerce")
    frame = safety.assign(impl=impl, value=values, above=values > 0)
    summary = (
        frame.groupby(["metric", "impl"], sort=False)
        .agg(rows=("value", "size"), measured=("value", "count"), above_zero=("above", "sum"),
             worst=("value", "max"))
        .reset_index()
    )
    # A peer that was never measured (failed or skipped everywhere) says so in words.
    summary["worst"] = summary["worst"].map(lambda v: shown_text(v, "{:g}"))
    summary["own"] = summary["impl"] == OWN_IMPL
    return summary.sort_values(["own", "metric", "impl"], ascending=[False, True, True])[columns]


def family_names() -> list[str] | None:
    """The adversarial family names (keys of ``safeattn.families.FAMILIES``), in its order.

    Imported on demand: that module builds test inputs with torch, which only the numerics
    page needs. None when it cannot be imported (e.g. a dashboard-only install).
    """
    try:
        from safeattn.families import FAMILIES
    except ImportError:
        return None
    return list(FAMILIES)


def numerics(
    loaded: LoadedResults, machine: str, commit: str, family_order: list[str] | None = None
) -> pd.DataFrame:
    """Non-finite and wrong-result rates per adversarial family × dtype × implementation.

    One row per safety-metric result: metric, label, family, dtype, impl, value, status,
    ``known_family`` (the family is one of ``family_order``, the names of
    ``safeattn.families.FAMILIES``). Rows are ordered by ``family_order``.
    """
    rows = commit_rows(loaded, machine, commit)
    rows = rows[rows["metric"].isin(SAFETY_METRICS)]
    columns = ["metric", "label", "family", "dtype", "impl", "value", "status", "known_family"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    order = {f: i for i, f in enumerate(family_order or [])}
    out = pd.DataFrame({
        "metric": rows["metric"],
        "label": rows["metric"].map(lambda m: METRICS[m].label),
        "family": rows["params"].map(lambda p: str(p.get("family", "—"))),
        "dtype": rows["params"].map(lambda p: str(p.get("dtype", "—"))),
        "impl": rows["params"].map(lambda p: str(p.get(IMPL_PARAM, OWN_IMPL))),
        "value": rows["value"],
        "status": rows["status"],
    })
    out["known_family"] = out["family"].isin(order) if order else True
    out["_order"] = out["family"].map(lambda f: order.get(f, len(order)))
    out["_own"] = out["impl"] != OWN_IMPL
    return (
        out.sort_values(["metric", "_order", "family", "dtype", "_own", "impl"])
        .drop(columns=["_order", "_own"])
        .reset_index(drop=True)
    )


# A rate's colour band on the numerics heatmap: 0 neutral, any rate above 0 red, darker
# the higher; a rate that was not measured in white.
RATE_BANDS: dict[str, str] = {
    "0": "#eeeeee",
    "above 0, below 1 %": "#fcbba1",
    "1 % to 10 %": "#fb6a4a",
    "10 % to 50 %": "#cb181d",
    "50 % or more": "#67000d",
    NOT_MEASURED: "#ffffff",
}


def rate_band(value: Any) -> str:
    """The :data:`RATE_BANDS` name of a rate."""
    rate = pd.to_numeric(value, errors="coerce")
    if pd.isna(rate):
        return NOT_MEASURED
    if rate <= 0:
        return "0"
    for limit, band in ((0.01, "above 0, below 1 %"), (0.1, "1 % to 10 %"), (0.5, "10 % to 50 %")):
        if rate < limit:
            return band
    return "50 % or more"


def numerics_chart(rows: pd.DataFrame) -> alt.Chart:
    """Rates of one safety metric as a heatmap per dtype, coloured by :func:`rate_band`
    (0 neutral grey, above 0 red), the rate or "not measured" on hover."""
    rows = rows.assign(
        band=rows["value"].map(rate_band),
        shown=rows["value"].map(lambda v: shown_text(v, "{:.3g}")),
    )
    impls = sorted(rows["impl"].unique(), key=lambda i: (i != OWN_IMPL, i))
    return alt.Chart(rows).mark_rect(stroke="#bdbdbd", strokeWidth=0.5).encode(
        x=alt.X("impl:N", title=None, sort=impls),
        y=alt.Y("family:N", title=None, sort=list(dict.fromkeys(rows["family"])),
                axis=alt.Axis(labelLimit=400)),
        color=alt.Color("band:N", title="rate",
                        scale=alt.Scale(domain=list(RATE_BANDS), range=list(RATE_BANDS.values()))),
        column=alt.Column("dtype:N", title=None),
        tooltip=["family", "dtype", "impl", alt.Tooltip("shown:N", title="rate"), "status"],
    )
