"""Peers: per GPU, safeattn against each peer implementation per shape, forward and
backward, for the dense grid, the masked workloads and the training step (each suite at the
GPU's newest commit that ran it)."""

import streamlit as st

from dashboard import state
from dashboard.views.common import machine_title, short
from dashboard.views.peers import (
    PEER_SUITES,
    peer_geomeans,
    peer_names,
    peer_table,
    styled_ratios,
    without_peers,
)
from regress.ratios import MODEL_SUITE

st.title("safeattn against its peers")
st.caption(
    "Each cell: peer time ÷ safeattn time (above 1: safeattn is faster, green; below 1: "
    "safeattn is slower, red; within 3 % of 1: uncoloured). Measured in the same asv run, "
    "at each GPU's newest commit that ran the suite."
)
index = state.results_index()
machine_names = state.url_multiselect("Machines (GPUs)", index.machines(), "machines")
machine_names = machine_names or index.machines()
loaded = state.peer_results(index, machine_names)
peers = peer_names(loaded)
chosen = state.url_multiselect("Peers", peers, "peers") or peers

found = False
for machine in machine_names:
    st.header(machine_title(loaded, machine))
    shown = False
    for suite, spec in PEER_SUITES.items():
        commit, table = peer_table(loaded, machine, suite)
        if commit is None or table.empty:
            continue
        table = without_peers(table, chosen)
        shown = found = True
        st.subheader(f"{spec.title} — `{suite}` at `{short(commit)}`")
        st.markdown("Geometric mean over shapes:")
        state.table(styled_ratios(peer_geomeans(table)), width="content")
        with st.expander(f"Per shape ({len(table)})", expanded=suite != MODEL_SUITE):
            # every row visible: 35 px a row plus the header
            state.table(styled_ratios(table), height=min(35 * (len(table) + 1) + 3, 1200))
    if not shown:
        st.info("No suite here has both safeattn and a peer implementation measured.")
if not found:
    st.stop()
