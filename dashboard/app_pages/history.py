"""History: any metric over commits (short hashes on the x-axis, dates on hover), one chart
per GPU. By default a few readable lines — per implementation, the geometric mean over the
shapes shown, normalised to a baseline commit — with every series one toggle away, and the
gate's verdicts of each commit against its parent as diamonds."""

import altair as alt
import streamlit as st

from dashboard import state
from dashboard.views.common import metric_label, readable, short, verdict_counts
from dashboard.views.history import (
    benchmark_labels,
    filter_options,
    history,
    history_baselines,
    history_chart,
    history_summary,
    normalised,
)
from dashboard.views.overview import TREND_BENCHMARKS
from dashboard.views.tflops import add_tflops

st.title("History")
index = state.results_index()
c1, c2 = st.columns([3, 1])
machine_names = state.url_multiselect("Machines (GPUs)", index.machines(), "machines",
                                      container=c1)
machine_names = machine_names or index.machines()
# Only the newest commits are loaded: a long history costs a load per commit.
last_n = state.url_int("Newest commits per machine", "last", 50, 2, 5000, container=c2)
# Offer the benchmarks that the newest few commits measured (benchmarks.json also lists
# suites that other machines run; a newest commit may have run only some suites).
newest = state.loaded_results({m: index.newest(m, 5) for m in machine_names})
labels = benchmark_labels(newest)
# By default the dense grid's forward time, the benchmark with the longest history.
default = list(labels).index(TREND_BENCHMARKS[0]) if TREND_BENCHMARKS[0] in labels \
    else 0
benchmark = state.url_select(
    "Benchmark", list(labels), "benchmark", format_func=lambda b: f"{b} — {labels[b]}",
    default_index=default,
)
window = {m: index.newest(m, last_n) for m in machine_names}
# Only this benchmark's rows are loaded: a long history then stays quick.
loaded = state.loaded_results(window, benchmarks=[benchmark])

rows_of_benchmark = loaded.table[loaded.table["benchmark"] == benchmark]
options = filter_options(rows_of_benchmark)
filters = {}
if options:
    cols = st.columns(len(options))
    for col, (name, values) in zip(cols, options.items(), strict=True):
        filters[name] = state.url_multiselect(name, values, name, container=col)
c1, c2, c3, c4 = st.columns(4)
# Short labels: four toggles side by side leave each about 160 px before an ellipsis.
every_series = state.url_toggle("Every series", "detail", False, container=c1,
                                help="Each parameter combination on its own (full detail).")
normalise = state.url_toggle("Normalise", "normalise", True, container=c2,
                             help="Each value ÷ its value at a baseline commit.")
want_tflops = state.url_toggle("TFLOP/s", "tflops", False, container=c3,
                               help="Derived from the time and the shape's FLOP count.")
want_verdicts = state.url_toggle("Gate verdicts", "verdicts", True, container=c4,
                                 help="The gate's verdict of each commit against its parent, "
                                 "as diamonds.")

rows = history(loaded, benchmark, machine_names, filters)
if rows.empty:
    st.info("No results match these filters.")
    st.stop()

y_field, y_title = "value", metric_label(rows["metric"].iloc[0], benchmark)
if want_tflops:
    rows, why_not = add_tflops(rows)
    if why_not:
        st.warning(f"TFLOP/s not shown: {why_not}.")
    else:
        y_field, y_title = "tflops", "TFLOP/s (higher is better)"

summary_mode = not every_series
if summary_mode or normalise:
    shown = rows.sort_values("order", ascending=False).drop_duplicates("commit")
    commits = list(shown["commit"])
    wanted = state.url_select(
        "Baseline commit (1.0)", commits, "baseline",
        format_func=lambda c: f"{short(c)} · {shown.set_index('commit').at[c, 'when']}",
        default_index=len(commits) - 1,
    )
    baselines = history_baselines(rows, wanted)
    rows = normalised(rows, y_field, baselines)
    moved = [m for m, c in baselines.items() if c != wanted]
    if moved:
        st.caption(f"`{short(wanted)}` was not measured on {', '.join(moved)}: "
                   "there the baseline is the oldest commit shown.")

verdicts = None
if want_verdicts:
    verdicts = state.history_verdicts(window, benchmark, machine_names, filters)

if summary_mode:
    summary = history_summary(rows, verdicts)
    st.caption(
        f"Per implementation, the geometric mean over {rows['param_key'].nunique()} "
        "parameter combination(s) of each value ÷ its value at the baseline commit. "
        "Turn on *Every series* for each combination on its own."
    )
    if summary.empty:
        st.caption("No series has a value at its baseline commit: pick another baseline, or "
                   "turn on *Every series* without normalising.")
    for machine, of_machine in summary.groupby("machine"):
        st.subheader(machine)
        tooltip = [alt.Tooltip("short:N", title="commit"), alt.Tooltip("when:N", title="date"),
                   alt.Tooltip("group:N", title="impl"),
                   alt.Tooltip("relative:Q", format=".3f", title="÷ baseline"),
                   alt.Tooltip("shapes:Q", title="combinations"), "baseline:N"]
        st.altair_chart(
            history_chart(of_machine, "relative", y_title, "group",
                          "implementation", marks=of_machine, tooltip=tooltip),
            width="stretch",
        )
else:
    field = "relative" if normalise else y_field
    title = y_title
    n_series = rows["param_key"].nunique()
    st.caption(f"{n_series} series per machine; narrow the filters above to compare fewer.")
    marks = None
    if verdicts is not None and not verdicts.empty:
        marks = rows.merge(verdicts[["machine", "commit", "param_key", "verdict", "reason"]],
                           on=["machine", "commit", "param_key"])
    for machine, of_machine in rows.groupby("machine"):
        st.subheader(machine)
        tooltip = [alt.Tooltip("short:N", title="commit"), alt.Tooltip("when:N", title="date"),
                   "param_key:N", alt.Tooltip(f"{field}:Q", format=".4g"), "status:N"]
        of_marks = marks[marks["machine"] == machine] if marks is not None else None
        st.altair_chart(
            history_chart(of_machine, field, title, "param_key", "parameters",
                          marks=of_marks, tooltip=tooltip, legend=n_series <= 12),
            width="stretch",
        )

if verdicts is not None:
    counts = verdict_counts(verdicts)
    st.caption(
        "Gate verdicts of each shown commit against its parent (diamonds): "
        + (", ".join(f"{v} {n}" for v, n in counts.items() if n) or "none")
    )
with st.expander("Data"):
    shown_columns = ["machine", "short", "when", "param_key", "value", "ci_low", "ci_high",
                     "status"]
    shown_columns += [c for c in ("tflops", "relative", "baseline") if c in rows.columns]
    state.table(readable(rows[shown_columns]))
