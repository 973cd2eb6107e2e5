"""The overview page: per GPU, the gate's verdict on the newest commit against its parent,
and safeattn's geometric-mean speed per pass over commits (the trend) with its chart."""

from __future__ import annotations

from dataclasses import dataclass, replace

import altair as alt
import pandas as pd

from dashboard.views.charts import (
    NEUTRAL,
    SERIES_COLOURS,
    VERDICT_COLOURS,
    commit_axis,
    verdict_scale,
)
from dashboard.views.common import (
    NOT_JUDGED,
    SAFETY_METRICS,
    TIME_METRIC_PASSES,
    commit_rows,
    commits_newest_first,
    machine_title,
    machines,
    short,
    verdict_counts,
    when_text,
    worst_verdict,
)
from regress.compare import GROUP_PARAM_KEY, compare
from regress.gate import gate_verdict
from regress.metrics import IMPL_PARAM, METRICS, OWN_IMPL
from regress.policy import VERDICTS, Policy
from regress.ratios import SPEED_SUITE, geomean, times_better
from regress.results import LoadedResults, parent_commit


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
        counts = verdict_counts(comparison)
        head_rows = commit_rows(loaded, machine, head)
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


# The benchmarks the overview's trend reads: safeattn's time per pass on the dense grid.
TREND_BENCHMARKS: tuple[str, ...] = tuple(f"{SPEED_SUITE}.track_{m}" for m in TIME_METRIC_PASSES)
NO_PARENT = "first commit (no parent)"


def speed_trend(
    loaded: LoadedResults, machine: str, policy: Policy, baseline: str | None = None
) -> pd.DataFrame:
    """safeattn's geometric-mean speed per pass over commits, as an index (1.0 = baseline).

    For each commit with safeattn rows of ``speed.SpeedSuite`` and each time metric (pass):
    ``index`` = :func:`regress.ratios.geomean` over the shapes measured at both
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
            better = METRICS[metric].better
            ratios = []
            for key, value in zip(rows["param_key"], rows["value"], strict=True):
                b = base.get((metric, key))
                if b is not None and b > 0:
                    ratios.append(times_better(value, b, better))
            index, n = geomean(ratios)
            verdict, note = judged.get(f"{SPEED_SUITE}.track_{metric}", (NOT_JUDGED, ""))
            records.append({
                "machine": machine, "commit": commit, "short": short(commit),
                "date": rows["date"].iloc[0], "order": order.get(commit, -1), "pass": pass_,
                "metric": metric, "index": index, "shapes": n, "baseline": short(baseline),
                "verdict": verdict, "note": note,
            })
    trend = pd.DataFrame.from_records(records, columns=columns)
    trend["when"] = when_text(trend["date"])
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
        verdict = worst_verdict(rows["verdict"]) or NOT_JUDGED
        out[benchmark] = (verdict, f"vs {short(parent)}: {note}")
    return out


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
            color=alt.Color("verdict:N", scale=verdict_scale(), title="gate verdict"),
        ))
    return alt.layer(*layers).resolve_scale(color="independent").properties(height=300)
