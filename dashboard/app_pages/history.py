"""History: any metric over commits, filtered by GPU and parameters, with the gate's
regression points and change markers on the chart and commit hashes in the tooltips."""

import altair as alt
import streamlit as st

from dashboard import state, views

st.title("History")
index = state.results_index()
c1, c2 = st.columns([3, 1])
machine_names = state.url_multiselect("Machines (GPUs)", index.machines(), "machines",
                                      container=c1)
machine_names = machine_names or index.machines()
# Only the newest commits are loaded: a long history costs a load per commit.
last_n = state.url_int("Newest commits per machine", "last", 50, 2, 5000, container=c2)
# Offer the benchmarks that the newest commits measured (benchmarks.json also lists
# suites that other machines run).
newest = state.loaded_results({m: index.newest(m, 1) for m in machine_names})
labels = views.benchmark_labels(newest)
benchmark = state.url_select(
    "Benchmark", list(labels), "benchmark", format_func=lambda b: f"{b} — {labels[b]}"
)
window = {m: index.newest(m, last_n) for m in machine_names}
# Only this benchmark's rows are loaded: a long history then stays quick.
loaded = state.loaded_results(window, benchmarks=[benchmark])

rows_of_benchmark = loaded.table[loaded.table["benchmark"] == benchmark]
options = views.filter_options(rows_of_benchmark)
filters = {}
if options:
    cols = st.columns(len(options))
    for col, (name, values) in zip(cols, options.items(), strict=True):
        filters[name] = state.url_multiselect(name, values, name, container=col)
c1, c2 = st.columns(2)
want_tflops = state.url_toggle("Show TFLOP/s (derived from time)", "tflops", False, container=c1)
want_verdicts = state.url_toggle("Mark the gate's verdicts", "verdicts", True, container=c2)

rows = views.history(loaded, benchmark, machine_names, filters)
if rows.empty:
    st.info("No results match these filters.")
    st.stop()

y_field, y_title = "value", views.metric_label(rows["metric"].iloc[0], benchmark)
if want_tflops:
    rows, why_not = views.add_tflops(rows)
    if why_not:
        st.warning(f"TFLOP/s not shown: {why_not}.")
    else:
        y_field, y_title = "tflops", "TFLOP/s (higher is better)"

n_series = rows["series"].nunique()
st.caption(
    f"{n_series} series over {rows['commit'].nunique()} commit(s). Each line is one machine "
    "and parameter combination; narrow the filters above to compare fewer."
)
tooltip = ["short", "commit", "date", "machine", "param_key", alt.Tooltip(y_field, format=".4g"),
           "status"]
x = alt.X("order:Q", title="commit (oldest → newest, per machine)", axis=alt.Axis(format="d"))
y = alt.Y(f"{y_field}:Q", title=y_title, scale=alt.Scale(zero=False))
legend = alt.Legend(orient="bottom", columns=2, labelLimit=400) if n_series <= 12 else None
base = alt.Chart(rows).encode(x=x, y=y)
layers = [
    base.mark_line(point=True).encode(
        color=alt.Color("series:N", legend=legend), tooltip=tooltip
    )
]
band = rows.dropna(subset=["ci_low", "ci_high"])
if y_field == "value" and not band.empty:
    layers.append(
        alt.Chart(band).mark_errorbar().encode(
            x=x, y=alt.Y("ci_low:Q", title=y_title), y2="ci_high:Q", color="series:N"
        )
    )

verdicts = None
if want_verdicts:
    verdicts = state.history_verdicts(window, benchmark, machine_names, filters)
    marked = verdicts[verdicts["verdict"].isin(["regression", "failure", "improvement"])]
    if not marked.empty:
        points = rows.merge(marked[["machine", "commit", "param_key", "verdict", "reason"]],
                            on=["machine", "commit", "param_key"])
        points = points.dropna(subset=[y_field])
        colors = alt.Scale(domain=["regression", "failure", "improvement"],
                           range=["#d62728", "#7b0000", "#2ca02c"])
        layers.append(
            alt.Chart(points).mark_point(size=140, filled=True, shape="diamond").encode(
                x=x, y=y, color=alt.Color("verdict:N", scale=colors, legend=None),
                tooltip=[*tooltip, "verdict", "reason"],
            )
        )
        changes = points.drop_duplicates(["machine", "order", "verdict"])
        layers.append(
            alt.Chart(changes).mark_rule(strokeDash=[4, 3]).encode(
                x=x, color=alt.Color("verdict:N", scale=colors, legend=None),
                tooltip=["short", "machine", "verdict"],
            )
        )

chart = alt.layer(*layers).resolve_scale(color="independent").properties(height=420)
st.altair_chart(chart, width="stretch")

if verdicts is not None:
    counts = views.verdict_counts(verdicts)
    st.caption(
        "Gate verdicts of each shown commit against its parent (diamonds and dashed rules): "
        + ", ".join(f"{v} {n}" for v, n in counts.items() if n)
    )
with st.expander("Data"):
    shown = ["machine", "short", "date", "param_key", "value", "ci_low", "ci_high", "status"]
    if "tflops" in rows.columns:
        shown.append("tflops")
    st.dataframe(rows[shown], hide_index=True)
