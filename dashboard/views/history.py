"""The history page: one benchmark over commits per machine, its filters, values
normalised to a baseline commit, per-implementation geometric means, the gate's verdicts
of each commit against its parent, and the chart."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import altair as alt
import pandas as pd

from dashboard.views.charts import (
    NEUTRAL,
    SERIES_COLOURS,
    VERDICT_COLOURS,
    commit_axis,
    verdict_scale,
)
from dashboard.views.common import NOT_JUDGED, metric_label, short, when_text, worst_verdict
from regress.compare import compare
from regress.metrics import IMPL_PARAM, METRICS
from regress.policy import Policy
from regress.ratios import geomean
from regress.results import LoadedResults, parent_commit

# Parameters the history page offers as filters, in this order (when the data has them).
FILTER_PARAMS: tuple[str, ...] = (
    "dtype", "head_dim", "seq_len", "causal", "mask", "padding", IMPL_PARAM,
)


def benchmarks(loaded: LoadedResults) -> list[str]:
    """Benchmark names, metrics of the registry first (in registry order), then the rest."""
    names = set(loaded.table["benchmark"])
    order = {m: i for i, m in enumerate(METRICS)}
    metric_of = dict(zip(loaded.table["benchmark"], loaded.table["metric"], strict=False))
    return sorted(names, key=lambda b: (order.get(metric_of.get(b), len(order)), b))


def benchmark_labels(loaded: LoadedResults) -> dict[str, str]:
    """Benchmark name -> its metric label, in :func:`benchmarks` order."""
    metric_of = dict(zip(loaded.table["benchmark"], loaded.table["metric"], strict=False))
    return {b: metric_label(metric_of[b], b) for b in benchmarks(loaded)}


def filter_options(rows: pd.DataFrame, params: tuple[str, ...] = FILTER_PARAMS) -> dict:
    """Parameter -> the values present in ``rows`` (sorted), for each of ``params`` present."""
    options = {}
    for name in params:
        if name in rows.columns:
            values = [v for v in rows[name].dropna().unique()]
            if values:
                options[name] = sorted(values, key=_sort_key)
    return options


def _sort_key(value: Any) -> tuple:
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def apply_filters(rows: pd.DataFrame, filters: dict[str, list]) -> pd.DataFrame:
    """Keep rows whose parameter is in the chosen values (an empty choice keeps all)."""
    for name, chosen in filters.items():
        if chosen and name in rows.columns:
            rows = rows[rows[name].isin(chosen)]
    return rows


def history(
    loaded: LoadedResults,
    benchmark: str,
    machine_names: list[str],
    filters: dict[str, list],
    last_n: int | None = None,
) -> pd.DataFrame:
    """One benchmark over commits: one row per (machine, commit, parameter combination).

    Columns: machine, commit, short, date, when (the date as text), order, param_key,
    series (machine + param_key, one chart line each), value, ci_low, ci_high, status,
    unit, and the parameter columns.
    ``last_n`` keeps each machine's newest ``last_n`` commits.
    """
    t = loaded.table
    rows = t[(t["benchmark"] == benchmark) & t["machine"].isin(machine_names)]
    rows = apply_filters(rows, filters)
    rows = rows.merge(loaded.commits[["machine", "commit", "order"]], on=["machine", "commit"],
                      how="left")
    if last_n is not None:
        newest = rows.groupby("machine")["order"].transform("max")
        rows = rows[rows["order"] > newest - last_n]
    rows = rows.assign(short=rows["commit"].str[:8], when=when_text(rows["date"]))
    rows["series"] = rows["machine"] + " · " + rows["param_key"]
    return rows.sort_values(["machine", "order", "param_key"]).reset_index(drop=True)


def history_baselines(rows: pd.DataFrame, wanted: str | None = None) -> dict[str, str]:
    """Machine -> the commit its series are normalised to: ``wanted`` (a full sha or a
    prefix) where that machine measured it, else the machine's oldest commit in ``rows``."""
    out = {}
    for machine, of_machine in rows.groupby("machine"):
        shas = list(dict.fromkeys(of_machine.sort_values("order")["commit"]))
        hits = [c for c in shas if wanted and c.startswith(wanted)]
        out[machine] = hits[0] if hits else shas[0]
    return out


def normalised(rows: pd.DataFrame, field: str, baselines: dict[str, str]) -> pd.DataFrame:
    """Add ``relative`` = ``field`` ÷ the same series' value at its machine's baseline
    commit (NaN where the baseline did not measure the series), and ``baseline`` (short)."""
    values = pd.to_numeric(rows[field], errors="coerce")
    base = {
        (m, key): v
        for m, c, key, v in zip(rows["machine"], rows["commit"], rows["param_key"], values,
                                strict=True)
        if baselines.get(m) == c and v > 0
    }
    ref = [base.get((m, key), math.nan) for m, key in zip(rows["machine"], rows["param_key"],
                                                          strict=True)]
    return rows.assign(relative=values / pd.Series(ref, index=rows.index, dtype=float),
                       baseline=rows["machine"].map(lambda m: short(baselines.get(m))))


def summary_group(rows: pd.DataFrame) -> pd.Series:
    """What one summary line stands for: the implementation, or "all rows" without one."""
    if IMPL_PARAM in rows.columns and rows[IMPL_PARAM].notna().any():
        return rows[IMPL_PARAM].fillna("—").astype(str)
    return pd.Series("all rows", index=rows.index)


def history_summary(rows: pd.DataFrame, verdicts: pd.DataFrame | None = None) -> pd.DataFrame:
    """Few readable series: per machine, commit and implementation, the geometric mean
    (:func:`regress.ratios.geomean`) over its shapes of ``relative`` (the output
    of :func:`normalised`), 1.0 at the baseline. With ``verdicts``
    (:func:`history_verdicts`), ``verdict`` is the most severe of the gate's verdicts on
    the rows behind each point.

    Columns: machine, group, commit, short, date, when, order, relative, shapes, baseline,
    verdict.
    """
    columns = ["machine", "group", "commit", "short", "date", "when", "order", "relative",
               "shapes", "baseline", "verdict"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    rows = rows.assign(group=summary_group(rows))
    severity = {}
    if verdicts is not None and not verdicts.empty:
        group_of = dict(zip(rows["param_key"], rows["group"], strict=False))
        v = verdicts.assign(group=verdicts["param_key"].map(group_of))
        for key, of_point in v.groupby(["machine", "commit", "group"]):
            severity[key] = worst_verdict(of_point["verdict"])
    records = []
    for (machine, group, commit), of_point in rows.groupby(["machine", "group", "commit"]):
        value, n = geomean(of_point["relative"])
        first = of_point.iloc[0]
        records.append({
            "machine": machine, "group": group, "commit": commit, "short": first["short"],
            "date": first["date"], "order": first["order"], "relative": value, "shapes": n,
            "baseline": first["baseline"],
            "verdict": severity.get((machine, commit, group)) or NOT_JUDGED,
        })
    out = pd.DataFrame.from_records(records, columns=columns)
    out["when"] = when_text(out["date"])
    return out.dropna(subset=["relative"]).sort_values(["machine", "order", "group"]).reset_index(
        drop=True)


def relative_title(title: str) -> str:
    """``"forward time [ms] (lower is better)"`` -> ``"forward time ÷ baseline (lower is
    better)"``: the axis title of values normalised to a baseline."""
    name = title.split(" (")[0].split(" [")[0]
    better = "(" + title.split(" (", 1)[1] if " (" in title else ""
    return f"{name} ÷ baseline {better}".strip()


def history_chart(
    rows: pd.DataFrame, y_field: str, y_title: str, colour: str, colour_title: str,
    marks: pd.DataFrame | None = None, tooltip: list | None = None, legend: bool = True,
) -> alt.LayerChart:
    """One machine's lines over commits: x = short hashes oldest → newest (date on hover),
    one colour per ``colour`` value, a neutral rule at 1.0 when ``y_field`` is relative,
    and ``marks`` (rows with a ``verdict``) as the gate's diamonds."""
    x = alt.X("short:N", sort=commit_axis(rows), title="commit (oldest → newest)",
              axis=alt.Axis(labelAngle=-45))
    if y_field == "relative":
        y_title = relative_title(y_title)
    y = alt.Y(f"{y_field}:Q", title=y_title, scale=alt.Scale(zero=False))
    tooltip = tooltip or [alt.Tooltip("short:N", title="commit"),
                          alt.Tooltip("when:N", title="date"), f"{colour}:N",
                          alt.Tooltip(f"{y_field}:Q", format=".4g")]
    lines = alt.Chart(rows).mark_line(point=True).encode(
        x=x, y=y, tooltip=tooltip,
        color=alt.Color(f"{colour}:N", title=colour_title,
                        scale=alt.Scale(range=SERIES_COLOURS)
                        if rows[colour].nunique() <= len(SERIES_COLOURS) else alt.Undefined,
                        # on the right: Streamlit fits legend and axes into the height
                        legend=alt.Legend(orient="right", labelLimit=420) if legend else None),
    )
    layers: list[Any] = [lines]
    if y_field == "relative":
        layers.insert(0, alt.Chart(pd.DataFrame({"relative": [1.0]})).mark_rule(
            color=NEUTRAL, strokeDash=[4, 3]).encode(y="relative:Q"))
    if marks is not None and not marks.empty:
        marked = marks[marks["verdict"].isin(VERDICT_COLOURS)].dropna(subset=[y_field])
        if not marked.empty:
            layers.append(alt.Chart(marked).mark_point(size=150, filled=True,
                                                       shape="diamond").encode(
                x=x, y=y, tooltip=[*tooltip, alt.Tooltip("verdict:N", title="gate verdict")],
                color=alt.Color("verdict:N", scale=verdict_scale(), title="gate verdict"),
            ))
    return alt.layer(*layers).resolve_scale(color="independent").properties(height=380)


def history_verdicts(
    loaded: LoadedResults, rows: pd.DataFrame, policy: Policy
) -> pd.DataFrame:
    """The gate's verdict of every commit in ``rows`` against its parent, per series.

    Uses :func:`compare` on consecutive commits of each machine, restricted to the
    benchmark in ``rows`` (so it costs one small comparison per commit shown). Returns
    machine, commit, param_key, series, verdict, ratio, reason for every pair.
    """
    if rows.empty:
        return pd.DataFrame(columns=["machine", "commit", "param_key", "series", "verdict"])
    benchmark = rows["benchmark"].iloc[0]
    t = loaded.table
    # Only this benchmark's rows: compare() then judges just what the chart shows.
    narrow = replace(loaded, table=t[t["benchmark"] == benchmark])
    out = []
    for machine, shown in rows.groupby("machine"):
        shas = list(dict.fromkeys(shown.sort_values("order")["commit"]))
        for head in shas:
            parent = parent_commit(loaded, head, machine)
            if parent is None:
                continue
            c = compare(narrow, parent, head, machine, policy)
            c = c[c["param_key"].isin(set(shown["param_key"]))]
            out.append(c.assign(commit=head, parent=parent))
    if not out:
        return pd.DataFrame(columns=["machine", "commit", "param_key", "series", "verdict"])
    verdicts = pd.concat(out, ignore_index=True)
    verdicts["series"] = verdicts["machine"] + " · " + verdicts["param_key"]
    return verdicts[["machine", "commit", "parent", "param_key", "series", "verdict", "ratio",
                     "reason"]]
