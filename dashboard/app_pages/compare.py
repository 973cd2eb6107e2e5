"""Compare: two commits side by side on one machine, with the gate's ratios,
significance and verdicts (the same comparison and policy the gate uses)."""

import streamlit as st

from dashboard import state
from dashboard.views.common import readable, short, verdict_counts
from regress.policy import VERDICTS

st.title("Compare two commits")
index = state.results_index()
machine = state.machine_select(index)
c1, c2 = st.columns(2)
n_commits = len(index.commits(machine))
head = state.commit_select(index, machine, "Head (new)", "head", container=c1)
base = state.commit_select(
    index, machine, "Base (old)", "base", default_index=min(1, n_commits - 1), container=c2
)
if base == head:
    st.info("Pick two different commits (this machine may have results for one commit only).")
    st.stop()
window = {machine: [base, head]}
state.loaded_results(window)  # reports unreadable files, stops if nothing loads

try:
    comparison = state.compared(window, machine, base, head)
except Exception as exc:  # a bug or odd data in one pair must not take the page down
    st.error(f"Comparing `{short(base)}` → `{short(head)}` failed: {exc!r}")
    st.stop()
counts = verdict_counts(comparison)
blocking = counts["failure"] + counts["regression"] + counts["missing"]
summary = ", ".join(f"{v}: {n}" for v, n in counts.items() if n)
if blocking:
    st.error(f"The gate would fail `{short(head)}` against `{short(base)}` — {summary}")
else:
    st.success(f"The gate would pass `{short(head)}` against `{short(base)}` — "
               f"{summary}")
cols = st.columns(len(VERDICTS))
for col, verdict in zip(cols, VERDICTS, strict=True):
    col.metric(verdict, counts[verdict])

present = [v for v in VERDICTS if counts[v]]
shown_verdicts = state.url_multiselect("Verdicts shown", present, "verdict")
kinds = sorted(k for k in comparison["kind"].dropna().unique())
shown_kinds = state.url_multiselect("Metric kinds shown", kinds, "kind")
rows = comparison
if shown_verdicts:
    rows = rows[rows["verdict"].isin(shown_verdicts)]
if shown_kinds:
    rows = rows[rows["kind"].isin(shown_kinds)]
order = {v: i for i, v in enumerate(VERDICTS)}
rows = rows.assign(
    _order=rows["verdict"].map(order),
    # None = no significance test applies (not a speed row): say so, not "None"
    significant=rows["significant"].map({True: "yes", False: "no"}).fillna("no test"),
).sort_values(["_order", "ratio"], ascending=[True, False])
state.table(
    readable(
        rows[["verdict", "benchmark", "param_key", "base_value", "head_value", "unit", "ratio",
              "p_value", "significant", "test", "reason"]],
        {"ratio": "{:.3f}", "p_value": "{:.3g}"},
    ),
    column_config={
        "ratio": st.column_config.Column(
            "ratio", help="How many times worse head is than base (> 1 = worse), in the "
            "metric's own direction."),
        "p_value": st.column_config.Column("p"),
    },
)
st.caption(f"Policy: `{state.policy().source}`. {len(rows)} of {len(comparison)} rows shown.")
