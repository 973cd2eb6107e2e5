"""Resources: shared memory, registers and spills per kernel and architecture, against
each architecture's limit (from safeattn.gpu_limits)."""

import altair as alt
import streamlit as st

from dashboard import state
from dashboard.views.common import readable
from dashboard.views.resources import RESOURCE_METRICS, resources
from regress.metrics import METRICS
from safeattn.gpu_limits import ARCHS

st.title("Kernel resources")
index = state.results_index()
machine = state.machine_select(index)
commit = state.commit_select(index, machine, "Commit", "commit")
loaded = state.loaded_results({machine: [commit]})
table = resources(loaded, machine, commit)
if table.empty:
    st.info("This commit has no resource benchmarks (track_shared_bytes, track_registers, "
            "track_spills).")
    st.stop()

over = table[table["over"]]
if not over.empty:
    st.error(f"{len(over)} row(s) over their limit: the architecture's shared memory or "
             "registers per thread, or any register spill.")
    state.table(readable(over[["label", "arch", "source", "config", "value", "limit"]]))
else:
    st.success("Every kernel fits its architecture's limits, without spills.")

for metric in RESOURCE_METRICS:
    rows = table[table["metric"] == metric]
    if rows.empty:
        continue
    st.subheader(rows["label"].iloc[0])
    # One chart per architecture (facet), the dashed rule at that architecture's limit.
    bars = alt.Chart().mark_bar().encode(
        x=alt.X("config:N", title=None, axis=alt.Axis(labelAngle=-40, labelLimit=220)),
        y=alt.Y("value:Q", title=f"{metric} [{METRICS[metric].unit}]"),
        color=alt.Color("over:N", title="over the limit",
                        scale=alt.Scale(domain=[False, True], range=["#4c78a8", "#d62728"])),
        # typed: the layers carry no data of their own to infer types from
        tooltip=["kernel:N", "arch:N", "source:N", "config:N", "value:Q", "limit:Q",
                 alt.Tooltip("used:Q", format=".0%")],
    )
    rule = alt.Chart().mark_rule(color="black", strokeDash=[6, 3]).encode(
        y="limit:Q", tooltip=["arch:N", "limit:Q"]
    )
    layers = [bars, rule] if rows["limit"].notna().any() else [bars]
    chart = alt.layer(*layers, data=rows).facet(column=alt.Column("arch:N", title=None))
    st.altair_chart(chart)

with st.expander("Architecture limits (safeattn.gpu_limits)"):
    state.table(
        [{"arch": a.name, "GPUs": a.example_gpus, "shared memory opt-in (bytes)":
          a.smem_optin_bytes, "max registers / thread": a.max_regs_per_thread}
         for a in ARCHS.values()],
    )
with st.expander("Every row"):
    state.table(readable(table, {"used": "{:.0%}"}))
