"""Resources: shared memory, registers and spills per kernel and architecture, against
each architecture's limit (from safeattn.gpu_limits)."""

import altair as alt
import streamlit as st

from dashboard import state, views
from safeattn.gpu_limits import ARCHS

st.title("Kernel resources")
index = state.results_index()
machine = state.machine_select(index)
commit = state.commit_select(index, machine, "Commit", "commit")
loaded = state.loaded_results({machine: [commit]})
table = views.resources(loaded, machine, commit)
if table.empty:
    st.info("This commit has no resource benchmarks (track_shared_bytes, track_registers, "
            "track_spills).")
    st.stop()

over = table[table["over"]]
if not over.empty:
    st.error(f"{len(over)} kernel(s) exceed their architecture's limit.")
    st.dataframe(over, hide_index=True)
else:
    st.success("Every kernel fits its architecture's limits.")

for metric in views.RESOURCE_METRICS:
    rows = table[table["metric"] == metric]
    if rows.empty:
        continue
    st.subheader(rows["label"].iloc[0])
    bars = alt.Chart(rows).mark_bar().encode(
        x=alt.X("kernel:N", title=None),
        y=alt.Y("value:Q", title=metric),
        color=alt.Color("over:N", scale=alt.Scale(domain=[False, True],
                                                  range=["#4c78a8", "#d62728"])),
        tooltip=["kernel", "arch", "source", "value", "limit",
                 alt.Tooltip("used:Q", format=".0%"), "param_key"],
    )
    limits = rows.dropna(subset=["limit"]).drop_duplicates("arch")
    rule = alt.Chart(limits).mark_rule(color="black", strokeDash=[6, 3]).encode(
        y="limit:Q", tooltip=["arch", "limit"]
    )
    chart = alt.layer(bars, rule, data=rows).facet(column=alt.Column("arch:N", title=None))
    st.altair_chart(chart)

with st.expander("Architecture limits (safeattn.gpu_limits)"):
    st.dataframe(
        [{"arch": a.name, "GPUs": a.example_gpus, "shared memory opt-in (bytes)":
          a.smem_optin_bytes, "max registers / thread": a.max_regs_per_thread}
         for a in ARCHS.values()],
        hide_index=True,
    )
with st.expander("Every row"):
    st.dataframe(table, hide_index=True)
