"""What each dashboard page shows, as plain functions of the loaded asv results, and the
pages' Altair charts (no Streamlit here).

The pages only lay out what these functions return, so the tests check the numbers here
and the gate's logic stays in one place: every verdict comes from
:func:`regress.compare.compare` and :func:`regress.gate.gate_verdict`,
peer ratios and geometric means from :mod:`regress.report`, metric directions and
labels from :mod:`regress.metrics`, architecture limits from
:mod:`safeattn.gpu_limits`. What a person reads never shows None or nan
(:data:`NOT_MEASURED`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import altair as alt
import pandas as pd
from pandas.io.formats.style import Styler

from regress import report, workloads
from regress.compare import (
    GROUP_PARAM_KEY,
    VERDICTS,
    Policy,
    compare,
    machine_arch,
    parent_commit,
)
from regress.gate import gate_verdict
from regress.metrics import (
    IMPL_PARAM,
    METRICS,
    OWN_IMPL,
    PEERS,
    attended_flops,
    attention_flops,
    tflops,
)
from regress.results import LoadedResults, format_param_key
from safeattn.gpu_limits import ARCHS

# The app's pages: URL path (and file app_pages/<name>.py) -> navigation title. The
# default page is served at the app's root URL (Streamlit ignores its url_path).
DEFAULT_PAGE = "overview"
PAGES: dict[str, str] = {
    "overview": "Overview",
    "history": "History",
    "compare": "Compare",
    "peers": "Peers",
    "resources": "Resources",
    "numerics": "Numerics",
}


def page_path(name: str) -> str:
    """The URL path of a page: ``""`` for the default page, else its name."""
    return "" if name == DEFAULT_PAGE else name


# Time metrics and the pass whose FLOPs they time (for TFLOP/s).
TIME_METRIC_PASSES: dict[str, str] = {
    "forward_ms": "forward",
    "backward_ms": "backward",
    "fwd_bwd_ms": "fwd_bwd",
}
# Parameters the history page offers as filters, in this order (when the data has them).
FILTER_PARAMS: tuple[str, ...] = (
    "dtype", "head_dim", "seq_len", "causal", "mask", "padding", IMPL_PARAM,
)
# The masked-attention speed suite: its rows have a mask kind, not a shape (TFLOP/s on
# attended pairs, regress.workloads).
MASKED_SUITE = "speed.MaskedSpeedSuite"
RESOURCE_METRICS: tuple[str, ...] = ("shared_bytes", "registers", "spills")
SAFETY_METRICS: tuple[str, ...] = tuple(n for n, m in METRICS.items() if m.kind == "safety")
# Parameter names (first found wins) that give the FLOP count's batch and head count.
_BATCH_PARAMS = ("batch", "batch_size", "B")
_HEADS_PARAMS = ("heads", "num_heads", "n_heads", "H")
_SEQ_Q_PARAMS = ("seq_q", "seq_len_q", "seq_len")
_SEQ_K_PARAMS = ("seq_k", "seq_len_k", "seq_len")


def short(sha: str | None) -> str:
    """A full sha -> its first 8 hex digits (asv's own file-name prefix)."""
    return sha[:8] if sha else "—"


# ------------------------------------------------------------------- readable tables
# What a person reads never says None or nan: a number that is not there was not measured.
NOT_MEASURED = "not measured"
# Colours: the gate's verdicts (bad is red, good is green), neutral grey for "no change".
BAD, GOOD, NEUTRAL = "#d62728", "#2ca02c", "#9e9e9e"
# Line colours that are neither the bad red nor the good green.
SERIES_COLOURS = ["#1f77b4", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
                  "#393b79", "#ff7f0e", "#637939"]
VERDICT_COLOURS: dict[str, str] = {
    "failure": "#7b0000", "missing": "#b2182b", "regression": BAD, "improvement": GOOD,
}


def readable(frame: pd.DataFrame, formats: dict[str, str] | None = None) -> Styler:
    """``frame`` styled for people: a missing value reads ``"not measured"`` (never
    None/nan; pages also pass it as ``st.dataframe``'s placeholder, which the browser
    uses for empty cells), floats with 4 significant digits unless ``formats`` (column ->
    format string) says otherwise. The data underneath stays numeric (sortable)."""
    formats = dict(formats or {})
    for column in frame.columns:
        if column not in formats and pd.api.types.is_float_dtype(frame[column]):
            formats[column] = "{:.4g}"
    return frame.style.format(formats, na_rep=NOT_MEASURED)


def shown_text(value: Any, fmt: str = "{:.4g}") -> str:
    """One value as a person reads it: ``"not measured"`` for None/nan."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NOT_MEASURED
    return fmt.format(value) if isinstance(value, float) else str(value)


def metric_label(metric: str | None, benchmark: str) -> str:
    """Human label of a benchmark's metric: ``"forward time [ms] (lower is better)"``."""
    m = METRICS.get(metric) if metric else None
    if m is None:
        return benchmark.rsplit(".", 1)[-1]
    return f"{m.label} [{m.unit}] ({m.better} is better)"


def machines(loaded: LoadedResults) -> list[str]:
    """Machine names that have results, sorted."""
    return sorted(set(loaded.table["machine"]))


def machine_title(loaded: LoadedResults, machine: str) -> str:
    """``"h200-1 (sm90)"``: the machine name and, when its files say, its GPU architecture."""
    arch = machine_arch(loaded.machines.get(machine, {}))
    return f"{machine} ({arch})" if arch else machine


def commits_newest_first(loaded: LoadedResults, machine: str) -> list[str]:
    """Full shas with results on ``machine``, newest (highest ``order``) first."""
    rows = loaded.commits[loaded.commits["machine"] == machine]
    return list(rows.sort_values("order", ascending=False)["commit"])


# --------------------------------------------------------------------------- overview


@dataclass
class MachineHealth:
    """The overview of one machine: its newest commit judged against the one before.

    ``comparison``: :func:`compare` rows (empty when there is no parent commit).
    ``counts``: verdict -> number of rows, every verdict of ``VERDICTS`` present.
    ``safety``: safeattn and peer rows of the must-be-zero rates at head, one row per
    (metric, param_key) with ``value``. ``error``: why the comparison could not be made.
    """

    machine: str
    title: str
    head: str
    head_date: pd.Timestamp
    parent: str | None
    comparison: pd.DataFrame
    counts: dict[str, int]
    safety: pd.DataFrame
    error: str | None = None

    @property
    def verdict(self) -> str | None:
        """The gate's verdict (:func:`regress.gate.gate_verdict`: ``"pass"``,
        ``"fail"`` or ``"nothing compared"``); None without a parent or a comparison."""
        if self.parent is None or self.error is not None:
            return None
        return gate_verdict(self.comparison)

    def rows(self, verdict: str) -> pd.DataFrame:
        """The comparison rows with one verdict, worst ratio first."""
        rows = self.comparison[self.comparison["verdict"] == verdict]
        return rows.sort_values("ratio", ascending=verdict == "improvement", na_position="last")


def overview(loaded: LoadedResults, policy: Policy) -> list[MachineHealth]:
    """Per machine: the newest commit against its parent, with the gate's verdicts."""
    out = []
    for machine in machines(loaded):
        shas = commits_newest_first(loaded, machine)
        head = shas[0]
        parent = parent_commit(loaded, head, machine)
        comparison = pd.DataFrame(columns=["verdict", "ratio"])
        error = None
        if parent is not None:
            try:
                comparison = compare(loaded, parent, head, machine, policy)
            except Exception as exc:  # one machine's failure must not hide the others
                error = f"comparison failed: {exc!r}"
        counts = {v: int((comparison["verdict"] == v).sum()) for v in VERDICTS}
        head_rows = _rows(loaded, machine, head)
        out.append(
            MachineHealth(
                machine=machine,
                title=machine_title(loaded, machine),
                head=head,
                head_date=head_rows["date"].iloc[0],
                parent=parent,
                comparison=comparison,
                counts=counts,
                safety=head_rows[head_rows["metric"].isin(SAFETY_METRICS)],
                error=error,
            )
        )
    return out


# ------------------------------------------------------------------------ overview trend
SPEED_SUITE = report.SPEED_SUITE
# The benchmarks the overview's trend reads: safeattn's time per pass on the dense grid.
TREND_BENCHMARKS: tuple[str, ...] = tuple(f"{SPEED_SUITE}.track_{m}" for m in TIME_METRIC_PASSES)
NO_PARENT = "first commit (no parent)"
NOT_JUDGED = "not compared"


def commit_axis(rows: pd.DataFrame) -> list[str]:
    """The short hashes of ``rows`` (columns short, date, order), oldest first: the order
    of a chart's commit axis."""
    ordered = rows.sort_values(["date", "order"]) if "date" in rows.columns else rows.sort_values(
        "order")
    return list(dict.fromkeys(ordered["short"]))


def _when(date: pd.Series) -> pd.Series:
    return date.map(lambda d: f"{d:%Y-%m-%d %H:%M} UTC" if pd.notna(d) else NOT_MEASURED)


def _worst(verdicts: Any) -> str | None:
    """The most severe of ``verdicts`` in :data:`VERDICTS` order, ``context`` ignored."""
    present = set(verdicts)
    return next((v for v in VERDICTS if v in present and v != "context"), None)


def speed_trend(
    loaded: LoadedResults, machine: str, policy: Policy, baseline: str | None = None
) -> pd.DataFrame:
    """safeattn's geometric-mean speed per pass over commits, as an index (1.0 = baseline).

    For each commit with safeattn rows of ``speed.SpeedSuite`` and each time metric (pass):
    ``index`` = :func:`regress.report.geomean` over the shapes measured at both
    that commit and ``baseline`` of baseline time ÷ time (above 1: faster than the
    baseline). ``baseline``: a full sha; by default, or when it has no such rows, the oldest
    commit that has them. ``verdict``: the gate's verdict of the commit against its parent
    (the previous commit measured on the machine, :func:`parent_commit`) on that pass's
    benchmark, from :func:`compare`: the most severe of its safeattn rows, the geometric-mean
    group row included; ``note`` gives the counts and the group row's reason.

    Columns: machine, commit, short, date, when, order, pass, metric, index, shapes,
    baseline, verdict, note. Empty when the machine has no such rows.
    """
    columns = ["machine", "commit", "short", "date", "when", "order", "pass", "metric", "index",
               "shapes", "baseline", "verdict", "note"]
    t = loaded.table
    if IMPL_PARAM not in t.columns:  # no row of any benchmark with an impl parameter
        return pd.DataFrame(columns=columns)
    mine = t[(t["machine"] == machine) & t["benchmark"].isin(TREND_BENCHMARKS)]
    own = mine[(mine["impl"] == OWN_IMPL) & (mine["status"] == "ok")]
    own = own[pd.to_numeric(own["value"], errors="coerce") > 0]
    if own.empty:
        return pd.DataFrame(columns=columns)
    commits = loaded.commits[loaded.commits["machine"] == machine]
    order = dict(zip(commits["commit"], commits["order"], strict=True))
    measured = sorted(set(own["commit"]), key=lambda c: order.get(c, -1))
    if baseline not in measured:
        baseline = measured[0]
    base = own[own["commit"] == baseline].set_index(["metric", "param_key"])["value"]
    narrow = replace(loaded, table=mine)  # compare() then judges just these benchmarks
    records = []
    for commit in measured:
        judged = _judge_passes(narrow, machine, commit, policy)
        of_commit = own[own["commit"] == commit]
        for metric, pass_ in TIME_METRIC_PASSES.items():
            rows = of_commit[of_commit["metric"] == metric]
            if rows.empty:
                continue
            lower = METRICS[metric].better == "lower"
            ratios = []
            for key, value in zip(rows["param_key"], rows["value"], strict=True):
                b = base.get((metric, key))
                if b is not None and b > 0:
                    ratios.append(b / value if lower else value / b)
            index, n = report.geomean(ratios)
            verdict, note = judged.get(f"{SPEED_SUITE}.track_{metric}", (NOT_JUDGED, ""))
            records.append({
                "machine": machine, "commit": commit, "short": short(commit),
                "date": rows["date"].iloc[0], "order": order.get(commit, -1), "pass": pass_,
                "metric": metric, "index": index, "shapes": n, "baseline": short(baseline),
                "verdict": verdict, "note": note,
            })
    trend = pd.DataFrame.from_records(records, columns=columns)
    trend["when"] = _when(trend["date"])
    return trend.dropna(subset=["index"]).reset_index(drop=True)


def _judge_passes(
    loaded: LoadedResults, machine: str, commit: str, policy: Policy
) -> dict[str, tuple[str, str]]:
    """Benchmark -> (the gate's most severe verdict on its safeattn rows, a note), for
    ``commit`` against its parent on ``machine``."""
    parent = parent_commit(loaded, commit, machine)
    if parent is None:
        return {b: (NO_PARENT, "") for b in TREND_BENCHMARKS}
    c = compare(loaded, parent, commit, machine, policy)
    c = c[~c["peer"].astype(bool)]
    out = {}
    for benchmark, rows in c.groupby("benchmark"):
        counts = rows["verdict"].value_counts()
        note = ", ".join(f"{v} {int(counts[v])}" for v in VERDICTS if v in counts.index)
        group = rows[rows["param_key"] == GROUP_PARAM_KEY]
        if not group.empty:
            note += f"; {group['reason'].iloc[0]}"
        out[benchmark] = (_worst(rows["verdict"]) or NOT_JUDGED, f"vs {short(parent)}: {note}")
    return out


def _verdict_scale() -> alt.Scale:
    return alt.Scale(domain=list(VERDICT_COLOURS), range=list(VERDICT_COLOURS.values()))


def trend_chart(trend: pd.DataFrame) -> alt.LayerChart:
    """:func:`speed_trend` as lines per pass over commits (short hashes, date on hover), a
    neutral rule at 1.0 and the gate's regressions/improvements as diamonds."""
    x = alt.X("short:N", sort=commit_axis(trend), title="commit (oldest → newest)",
              axis=alt.Axis(labelAngle=-45))
    y = alt.Y("index:Q", title="speed index (baseline = 1)", scale=alt.Scale(zero=False))
    tooltip = [alt.Tooltip("short:N", title="commit"), alt.Tooltip("when:N", title="date"),
               "pass:N", alt.Tooltip("index:Q", format=".3f", title="speed index"),
               alt.Tooltip("shapes:Q", title="shapes"), alt.Tooltip("baseline:N"),
               alt.Tooltip("verdict:N", title="gate verdict"), alt.Tooltip("note:N")]
    one = alt.Chart(pd.DataFrame({"index": [1.0]})).mark_rule(
        color=NEUTRAL, strokeDash=[4, 3]).encode(y="index:Q")
    lines = alt.Chart(trend).mark_line(point=True).encode(
        x=x, y=y, tooltip=tooltip,
        color=alt.Color("pass:N", title="pass", sort=list(TIME_METRIC_PASSES.values()),
                        scale=alt.Scale(range=SERIES_COLOURS)),
    )
    layers = [one, lines]
    marked = trend[trend["verdict"].isin(VERDICT_COLOURS)]
    if not marked.empty:
        layers.append(alt.Chart(marked).mark_point(size=170, filled=True, shape="diamond").encode(
            x=x, y=y, tooltip=tooltip,
            color=alt.Color("verdict:N", scale=_verdict_scale(), title="gate verdict"),
        ))
    return alt.layer(*layers).resolve_scale(color="independent").properties(height=300)


def _rows(loaded: LoadedResults, machine: str, commit: str) -> pd.DataFrame:
    t = loaded.table
    return t[(t["machine"] == machine) & (t["commit"] == commit)]


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


# ---------------------------------------------------------------------------- history


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
    rows = rows.assign(short=rows["commit"].str[:8], when=_when(rows["date"]))
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
    (:func:`regress.report.geomean`) over its shapes of ``relative`` (the output
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
            severity[key] = _worst(of_point["verdict"])
    records = []
    for (machine, group, commit), of_point in rows.groupby(["machine", "group", "commit"]):
        value, n = report.geomean(of_point["relative"])
        first = of_point.iloc[0]
        records.append({
            "machine": machine, "group": group, "commit": commit, "short": first["short"],
            "date": first["date"], "order": first["order"], "relative": value, "shapes": n,
            "baseline": first["baseline"],
            "verdict": severity.get((machine, commit, group)) or NOT_JUDGED,
        })
    out = pd.DataFrame.from_records(records, columns=columns)
    out["when"] = _when(out["date"])
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
                color=alt.Color("verdict:N", scale=_verdict_scale(), title="gate verdict"),
            ))
    return alt.layer(*layers).resolve_scale(color="independent").properties(height=380)


def add_tflops(rows: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """Add a ``tflops`` column to time rows (DESIGN.md's FLOP count over the measured time).

    Batch and head count come from ``batch``/``heads`` parameters when the benchmark has
    them, else, for the GPU speed grid (``speed.SpeedSuite``: seq_len and head_dim
    parameters only), from the suite's own shape rule ``benchmarks._common.gpu_problem``.
    ``speed.MaskedSpeedSuite`` rows count the FLOPs of their workload's attended pairs
    only (``regress.workloads``). Returns ``(rows, None)``, or ``(rows
    unchanged, why not)`` when the metric is not a time or the shape cannot be recovered.
    """
    if rows.empty:
        return rows, "no rows"
    metric = rows["metric"].iloc[0]
    pass_ = TIME_METRIC_PASSES.get(metric)
    if pass_ is None:
        return rows, f"TFLOP/s is derived from time metrics only ({', '.join(TIME_METRIC_PASSES)})"
    if set(rows["suite"]) == {MASKED_SUITE}:
        return _masked_tflops(rows, pass_)
    cols = {
        "seq_q": _first_present(rows, _SEQ_Q_PARAMS),
        "seq_k": _first_present(rows, _SEQ_K_PARAMS),
        "head_dim": _first_present(rows, ("head_dim",)),
    }
    batch_col, heads_col = _first_present(rows, _BATCH_PARAMS), _first_present(rows, _HEADS_PARAMS)
    missing = [k for k, c in cols.items() if c is None]
    grid_rule = None
    if batch_col is None or heads_col is None:
        if set(rows["suite"]) == {"speed.SpeedSuite"} and not missing:
            grid_rule = _gpu_problem()
        if grid_rule is None:
            missing = ["batch", "heads", *missing]
    if missing:
        return rows, (
            "TFLOP/s needs the parameters " + ", ".join(missing) + " in the benchmark's params"
        )
    causal = rows["causal"] if "causal" in rows.columns else pd.Series(False, index=rows.index)

    def one(i: Any) -> float:
        value = rows.at[i, "value"]
        if not (isinstance(value, float) and math.isfinite(value) and value > 0):
            return math.nan
        seq_q, seq_k, head_dim = (int(rows.at[i, cols[k]]) for k in ("seq_q", "seq_k", "head_dim"))
        if grid_rule is not None:
            batch, heads, _ = grid_rule(seq_q, head_dim, 1)
        else:
            batch, heads = int(rows.at[i, batch_col]), int(rows.at[i, heads_col])
        flops = attention_flops(batch, heads, seq_q, seq_k, head_dim,
                                causal=_truthy(causal.at[i]), pass_=pass_)
        return tflops(value, flops)

    return rows.assign(tflops=[one(i) for i in rows.index]), None


def _masked_tflops(rows: pd.DataFrame, pass_: str) -> tuple[pd.DataFrame, str | None]:
    """TFLOP/s of MaskedSpeedSuite rows: FLOPs on the workload's attended pairs only
    (``workloads.MaskWorkload.attended_pairs``, H = 2048 // D)."""
    unknown = sorted(set(rows["mask"].dropna()) - set(workloads.MASK_WORKLOADS))
    if "head_dim" not in rows.columns or rows["head_dim"].isna().any() or unknown:
        return rows, f"TFLOP/s needs a known mask kind and head_dim (unknown: {unknown})"

    def one(value: float, mask: str, head_dim: Any) -> float:
        if not (isinstance(value, float) and math.isfinite(value) and value > 0):
            return math.nan
        pairs = workloads.MASK_WORKLOADS[mask].attended_pairs()
        d = int(head_dim)
        return tflops(value, attended_flops(pairs, workloads.heads_for(d), d, pass_))

    values = zip(rows["value"], rows["mask"], rows["head_dim"], strict=True)
    return rows.assign(tflops=[one(*v) for v in values]), None


def shape_label(params: dict[str, Any]) -> str:
    """A peer row's shape for people: its parameters without ``impl``, a mask kind and a
    padding by their workload labels: ``"dtype=bfloat16 head_dim=128 mask=left padding
    0–60 % + causal, ..."``."""
    labels = {
        "mask": {k: w.label for k, w in workloads.MASK_WORKLOADS.items()},
        "padding": workloads.PADDING_LABELS,
    }
    shown = {
        name: labels.get(name, {}).get(value, value)
        for name, value in params.items()
        if name != IMPL_PARAM
    }
    return format_param_key(shown)


def _gpu_problem() -> Any:
    """The GPU speed grid's ``(seq_len, head_dim, gqa) -> (batch, heads_q, heads_kv)``
    rule, from the suite itself (None when the benchmarks are not importable here)."""
    try:
        from benchmarks._common import gpu_problem
    except ImportError:
        return None
    return gpu_problem


def _first_present(rows: pd.DataFrame, names: tuple[str, ...]) -> str | None:
    for name in names:
        if name in rows.columns and rows[name].notna().all():
            return name
    return None


def _truthy(value: Any) -> bool:
    # causal may be False/True or a string such as "bottom_right" (still causal)
    return value not in (False, None, "False", "false", 0, "none")


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


# ---------------------------------------------------------------------------- compare


def verdict_counts(comparison: pd.DataFrame) -> dict[str, int]:
    """Verdict -> number of rows, in :data:`VERDICTS` order (zeros included)."""
    return {v: int((comparison["verdict"] == v).sum()) for v in VERDICTS}


# ------------------------------------------------------------------------------ peers


def peer_ratios(loaded: LoadedResults, machine: str, commit: str) -> pd.DataFrame:
    """safeattn against each peer on one machine and commit, per shape.

    One row per (benchmark, shape, peer) where both safeattn and the peer have a value:
    ``ratio`` = how many times worse safeattn is than the peer in the metric's own
    direction (> 1 = safeattn worse; for a time, safeattn time ÷ peer time), and
    ``speedup`` = 1 / ratio. ``shape`` is the param_key without the impl parameter,
    ``label`` the same for people (:func:`shape_label`: mask kinds and paddings described).
    Safety rates (must be 0) are left to :func:`numerics`.
    """
    rows = _rows(loaded, machine, commit)
    rows = rows[rows["status"] == "ok"]
    rows = rows[rows["params"].map(lambda p: IMPL_PARAM in p) & rows["better"].notna()]
    # Rates that must be 0 have no meaningful ratio (0 ÷ 0): the numerics page shows them.
    rows = rows[~rows["metric"].isin(SAFETY_METRICS)]
    columns = ["machine", "benchmark", "metric", "unit", "better", "shape", "label", "peer",
               "safeattn_value", "peer_value", "ratio", "speedup"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    shape = rows["params"].map(
        lambda p: format_param_key({k: v for k, v in p.items() if k != IMPL_PARAM})
    )
    rows = rows.assign(
        shape=shape,
        label=rows["params"].map(shape_label),
        impl=rows["params"].map(lambda p: p[IMPL_PARAM]),
    )
    own = rows[rows["impl"] == OWN_IMPL][["benchmark", "shape", "value"]]
    peers = rows[rows["impl"] != OWN_IMPL]
    pairs = peers.merge(own, on=["benchmark", "shape"], suffixes=("_peer", "_own"))
    if pairs.empty:
        return pd.DataFrame(columns=columns)
    lower = pairs["better"] == "lower"
    ratio = pd.Series(
        [_worse_ratio(o, p, lw) for o, p, lw in
         zip(pairs["value_own"], pairs["value_peer"], lower, strict=True)],
        index=pairs.index,
    )
    out = pd.DataFrame({
        "machine": machine,
        "benchmark": pairs["benchmark"],
        "metric": pairs["metric"],
        "unit": pairs["unit"],
        "better": pairs["better"],
        "shape": pairs["shape"],
        "label": pairs["label"],
        "peer": pairs["impl"],
        "safeattn_value": pairs["value_own"],
        "peer_value": pairs["value_peer"],
        "ratio": ratio,
        "speedup": 1.0 / ratio,
    })
    return out.sort_values(["benchmark", "peer", "shape"]).reset_index(drop=True)


# Peer comparisons per suite: which benchmarks (metric -> column tag) and which parameters
# make one row's shape, as in the README's generated tables (regress.report).
@dataclass(frozen=True)
class PeerSuite:
    title: str
    keys: tuple[str, ...]
    passes: dict[str, str]


MODEL_SUITE = report.MODEL_SUITE
PEER_SUITES: dict[str, PeerSuite] = {
    SPEED_SUITE: PeerSuite("Dense shapes", tuple(report.SHAPE_KEYS),
                           {"forward_ms": "fwd", "backward_ms": "bwd"}),
    MASKED_SUITE: PeerSuite("Masked workloads", tuple(report.MASKED_KEYS),
                            {"forward_ms": "fwd", "backward_ms": "bwd"}),
    MODEL_SUITE: PeerSuite("Training step of a small decoder", ("seq_len", "padding"),
                           {"step_ms": "step"}),
}
PEER_BENCHMARKS: tuple[str, ...] = tuple(
    f"{suite}.track_{metric}" for suite, spec in PEER_SUITES.items() for metric in spec.passes
)
# Shape parameters as a person reads them in a table header.
KEY_TITLES = {"head_dim": "D", "seq_len": "N", "gqa": "GQA", "mask": "mask", "padding": "padding"}


def peer_table(loaded: LoadedResults, machine: str, suite: str) -> tuple[str | None, pd.DataFrame]:
    """safeattn against each peer per shape, at the machine's newest commit with ``suite``.

    Returns (that commit or None, the table): one row per shape (its parameters as
    columns, mask kinds and paddings by their workload labels), ``safeattn <pass> ms``
    per pass, then per peer and pass ``<peer> <pass>`` = peer time ÷ safeattn time
    (:func:`regress.report.peer_over_own`; above 1: safeattn is faster, NaN: the
    peer was not measured there). Passes: :data:`PEER_SUITES`.
    """
    spec = PEER_SUITES[suite]
    commit, rows = report.suite_rows(loaded, machine, suite)
    if commit is None or rows.empty or IMPL_PARAM not in rows.columns:
        return None, pd.DataFrame()
    keys = [k for k in spec.keys if k in rows.columns and rows[k].notna().any()]
    impls = set(rows[IMPL_PARAM].dropna())
    peers = [p for p in PEERS if p in impls] + sorted(impls - set(PEERS) - {OWN_IMPL})
    parts = []
    for metric, tag in spec.passes.items():
        ratios = report.peer_over_own(rows[rows["metric"] == metric], keys)
        if ratios.empty:
            continue
        part = pd.DataFrame({f"{OWN_IMPL} {tag} ms": ratios[OWN_IMPL]}, index=ratios.index)
        for peer in peers:
            part[f"{peer} {tag}"] = ratios[peer] if peer in ratios.columns else math.nan
        parts.append(part)
    if not parts:
        return commit, pd.DataFrame()
    table = pd.concat(parts, axis=1).reset_index()
    tags = list(spec.passes.values())
    ordered = [*keys, *(f"{OWN_IMPL} {t} ms" for t in tags),
               *(f"{p} {t}" for p in peers for t in tags)]
    table = table[[c for c in ordered if c in table.columns]]
    labels = {"mask": {k: w.label for k, w in workloads.MASK_WORKLOADS.items()},
              "padding": workloads.PADDING_LABELS}
    for key, names in labels.items():
        if key in table.columns:
            table[key] = table[key].map(lambda v, names=names: names.get(v, v))
    return commit, table.rename(columns=KEY_TITLES)


def peer_names(loaded: LoadedResults) -> list[str]:
    """The implementations other than safeattn in ``loaded`` (known peers first)."""
    if IMPL_PARAM not in loaded.table.columns:
        return []
    impls = set(loaded.table[IMPL_PARAM].dropna()) - {OWN_IMPL}
    return [p for p in PEERS if p in impls] + sorted(impls - set(PEERS))


def ratio_columns(table: pd.DataFrame) -> list[str]:
    """The peer ÷ safeattn columns of a :func:`peer_table`."""
    return [c for c in table.columns
            if not c.startswith(f"{OWN_IMPL} ") and c.rsplit(" ", 1)[-1] in
            {t for spec in PEER_SUITES.values() for t in spec.passes.values()}]


def peer_geomeans(table: pd.DataFrame) -> pd.DataFrame:
    """Per peer (rows) and pass (columns): the geometric mean over shapes of a
    :func:`peer_table`'s ratios (:func:`regress.report.geomean`), and the number
    of shapes measured."""
    records: dict[str, dict[str, Any]] = {}
    for column in ratio_columns(table):
        peer, tag = column.rsplit(" ", 1)
        value, n = report.geomean(table[column].dropna())
        row = records.setdefault(peer, {"peer": peer})
        row[tag] = value
        row["shapes"] = max(row.get("shapes", 0), n)
    frame = pd.DataFrame(list(records.values()))
    return frame[[c for c in frame.columns if c != "shapes"] + ["shapes"]] if records else frame


def without_peers(table: pd.DataFrame, keep: list[str]) -> pd.DataFrame:
    """A :func:`peer_table` with only the ratio columns of the peers in ``keep``."""
    drop = [c for c in ratio_columns(table) if c.rsplit(" ", 1)[0] not in keep]
    return table.drop(columns=drop)


def _ratio_css(value: Any) -> str:
    """A peer ÷ safeattn cell's colour: red where safeattn is slower, green where it is
    faster, stronger with the distance from 1 (saturated at 2x); near 1 neutral; a value
    not measured in grey text."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        return f"color: {NEUTRAL}"
    distance = min(abs(math.log2(value)), 1.0)
    if distance < math.log2(1.03):
        return ""
    rgb = "44, 160, 44" if value > 1 else "214, 39, 40"
    return f"background-color: rgba({rgb}, {0.15 + 0.6 * distance:.2f})"


def styled_ratios(table: pd.DataFrame) -> Styler:
    """A :func:`peer_table` or :func:`peer_geomeans` for people: ratios as ``1.23×``,
    coloured (:func:`_ratio_css`), times in ms, "not measured" where a peer has no value."""
    ratios = [c for c in table.columns if c in ratio_columns(table) or c in
              {t for spec in PEER_SUITES.values() for t in spec.passes.values()}]
    formats = {c: "{:.2f}×" for c in ratios}
    formats.update({c: "{:.3f}" for c in table.columns if str(c).endswith(" ms")})
    return readable(table, formats).map(_ratio_css, subset=ratios)


def _worse_ratio(own: float, peer: float, lower_is_better: bool) -> float:
    worse, good = (own, peer) if lower_is_better else (peer, own)
    if worse == good:
        return 1.0
    if good == 0:
        return math.inf
    return worse / good


# -------------------------------------------------------------------------- resources


def resources(loaded: LoadedResults, machine: str, commit: str) -> pd.DataFrame:
    """Shared memory, registers and spills per kernel and architecture, against the limit.

    The architecture is the row's ``arch`` parameter (static audit, cross-compiled) or
    else the machine's own GPU (live). ``limit``: the architecture's shared-memory opt-in
    maximum, its registers-per-thread maximum, or 0 for spills (any spill is worth
    seeing); ``used`` = value ÷ limit; ``over`` = value > limit; ``config`` = the row's
    parameters without the architecture.
    """
    rows = _rows(loaded, machine, commit)
    rows = rows[rows["metric"].isin(RESOURCE_METRICS)]
    columns = ["metric", "label", "kernel", "arch", "source", "config", "param_key", "value",
               "limit", "used", "over", "status"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    own_arch = machine_arch(loaded.machines.get(machine, {}))
    records = []
    for r in rows.to_dict("records"):
        params = r["params"]
        static = "arch" in params
        arch = _arch_text(params.get("arch")) if static else own_arch
        limits = ARCHS.get(arch) if arch else None
        if r["metric"] == "shared_bytes":
            limit = limits.smem_optin_bytes if limits else math.nan
        elif r["metric"] == "registers":
            limit = limits.max_regs_per_thread if limits else math.nan
        else:
            limit = 0.0
        value = r["value"]
        records.append({
            "metric": r["metric"],
            "label": METRICS[r["metric"]].label,
            "kernel": params.get("kernel", r["benchmark"].rsplit(".", 1)[-1]),
            "arch": arch or "unknown",
            "source": "static" if static else "live",
            # what tells the bars of one architecture apart (kernel, dtype, head_dim, ...)
            "config": format_param_key({k: v for k, v in params.items() if k != "arch"}),
            "param_key": r["param_key"],
            "value": value,
            "limit": limit,
            "used": value / limit if limit else math.nan,
            "over": bool(value > limit) if not math.isnan(limit) else False,
            "status": r["status"],
        })
    return pd.DataFrame.from_records(records, columns=columns)


def _arch_text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).lower().replace("sm_", "sm")
    return text if text.startswith("sm") else f"sm{text}"


# --------------------------------------------------------------------------- numerics


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
    rows = _rows(loaded, machine, commit)
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
