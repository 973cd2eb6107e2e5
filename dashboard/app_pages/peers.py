"""Peers: safeattn against each peer implementation as ratios per shape, per GPU."""

import altair as alt
import numpy as np
import pandas as pd
import streamlit as st

from dashboard import state, views

st.title("safeattn against its peers")
st.caption(
    "Ratio = how many times worse safeattn is than the peer in the metric's own direction "
    "(for a time: safeattn time ÷ peer time). Below 1, safeattn is ahead. Measured in the "
    "same asv run, at each machine's newest commit."
)
index = state.results_index()
machine_names = state.url_multiselect("Machines (GPUs)", index.machines(), "machines")
machine_names = machine_names or index.machines()
newest = {machine: index.newest(machine, 1)[0] for machine in machine_names}
loaded = state.loaded_results({machine: [sha] for machine, sha in newest.items()})

frames = []
for machine, sha in newest.items():
    frames.append(views.peer_ratios(loaded, machine, sha).assign(commit=sha[:8]))
ratios = pd.concat(frames, ignore_index=True)
if ratios.empty:
    st.info("No benchmark here has both safeattn and a peer implementation (parameter `impl`).")
    st.stop()

labels = views.benchmark_labels(loaded)
bench_names = [b for b in labels if b in set(ratios["benchmark"])]
benchmark = state.url_select(
    "Benchmark", bench_names, "benchmark", format_func=lambda b: f"{b} — {labels[b]}"
)
rows = ratios[ratios["benchmark"] == benchmark]
peers = sorted(rows["peer"].unique())
chosen = state.url_multiselect("Peers", peers, "peers") or peers
rows = rows[rows["peer"].isin(chosen)]
# Colour by log2 of the ratio, clipped: symmetric around 1 and safe for 0 or inf ratios.
with np.errstate(divide="ignore"):
    rows = rows.assign(log2_ratio=np.log2(rows["ratio"].astype(float)).clip(-4, 4))

heat = (
    alt.Chart(rows)
    .mark_rect()
    .encode(
        x=alt.X("peer:N", title="peer"),
        y=alt.Y("label:N", title=None, axis=alt.Axis(labelLimit=500)),
        color=alt.Color(
            "log2_ratio:Q", title="log2(safeattn ÷ peer)",
            scale=alt.Scale(scheme="redyellowgreen", reverse=True, domain=[-4, 4], domainMid=0),
        ),
        column=alt.Column("machine:N", title=None),
        tooltip=["machine", "commit", "label", "shape", "peer",
                 alt.Tooltip("safeattn_value:Q", format=".4g"),
                 alt.Tooltip("peer_value:Q", format=".4g"),
                 alt.Tooltip("ratio:Q", format=".3f")],
    )
)
st.altair_chart(heat)

summary = (
    rows.groupby(["machine", "peer"])["ratio"]
    .agg(shapes="size", median="median", best="min", worst="max")
    .reset_index()
)
st.subheader("Per machine and peer")
st.dataframe(summary, hide_index=True)
with st.expander("Every shape"):
    st.dataframe(rows, hide_index=True)
