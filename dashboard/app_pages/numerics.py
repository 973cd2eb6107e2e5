"""Numerics: non-finite and wrong-result rates per adversarial family × dtype ×
implementation, peers included. Every safeattn rate must be 0."""

import altair as alt
import streamlit as st

from dashboard import state, views

st.title("Numerics under adversarial inputs")
index = state.results_index()
machine = state.machine_select(index)
commit = state.commit_select(index, machine, "Commit", "commit")
loaded = state.loaded_results({machine: [commit]})
family_names = views.family_names()
if family_names is None:
    st.warning("safeattn.families is not importable here: families are listed as the results "
               "name them, unchecked.")
table = views.numerics(loaded, machine, commit, family_order=family_names)
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

for metric in views.SAFETY_METRICS:
    rows = table[table["metric"] == metric]
    if rows.empty:
        continue
    st.subheader(rows["label"].iloc[0])
    heat = alt.Chart(rows).mark_rect(stroke="white").encode(
        x=alt.X("impl:N", title=None, sort=sorted(rows["impl"].unique(),
                                                  key=lambda i: (i != "safeattn", i))),
        y=alt.Y("family:N", title=None, sort=list(dict.fromkeys(rows["family"])),
                axis=alt.Axis(labelLimit=400)),
        color=alt.Color("value:Q", title="rate", scale=alt.Scale(domain=[0, 1],
                                                                 scheme="reds")),
        column=alt.Column("dtype:N", title=None),
        tooltip=["family", "dtype", "impl", alt.Tooltip("value:Q", format=".3f"), "status"],
    )
    st.altair_chart(heat)

with st.expander("Every row"):
    st.dataframe(table, hide_index=True)
