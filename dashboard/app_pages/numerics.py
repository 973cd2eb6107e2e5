"""Numerics: non-finite and wrong-result rates per adversarial family × dtype ×
implementation, peers included. Every safeattn rate must be 0: a rate of 0 is drawn in
neutral grey, any rate above 0 in red."""

import streamlit as st

from dashboard import state
from dashboard.views.common import SAFETY_METRICS, readable
from dashboard.views.numerics import family_names, numerics, numerics_chart

st.title("Numerics under adversarial inputs")
index = state.results_index()
machine = state.machine_select(index)
# By default the newest commit that measured the rates (the newest may have run other suites).
measured, _ = state.latest_safety(machine)
commits = index.commits(machine)
commit = state.commit_select(index, machine, "Commit", "commit",
                             default_index=commits.index(measured) if measured in commits else 0)
loaded = state.loaded_results({machine: [commit]})
known_families = family_names()
if known_families is None:
    st.warning("safeattn.families is not importable here: families are listed as the results "
               "name them, unchecked.")
table = numerics(loaded, machine, commit, family_order=known_families)
if table.empty:
    st.info("This commit has no numerics benchmarks (track_nonfinite_rate, "
            "track_wrong_result_rate).")
    st.stop()

own_bad = table[(table["impl"] == "safeattn") & (table["value"] > 0)]
if not own_bad.empty:
    st.error(f"safeattn has {len(own_bad)} non-zero rate(s): each one breaks the contract.")
else:
    st.success("Every safeattn rate is 0.")
unknown = sorted(set(table.loc[~table["known_family"], "family"]))
if unknown:
    st.warning("Families not in safeattn.families: " + ", ".join(unknown))

for metric in SAFETY_METRICS:
    rows = table[table["metric"] == metric]
    if rows.empty:
        continue
    st.subheader(rows["label"].iloc[0])
    st.altair_chart(numerics_chart(rows))

with st.expander("Every row"):
    state.table(readable(table))
