"""Overview: per GPU, the newest commit's health against its parent, at a glance."""

import streamlit as st

from dashboard import state, views

st.title("safeattn — overview")
st.caption(
    "Per machine, the newest commit judged against the one before it with the merge "
    "gate's own comparison and policy. Peer implementations are context, never failures."
)

_, health = state.overview_health()  # stops with a how-to when there is nothing to show
SHOWN = ("failure", "regression", "missing", "improvement")
COLUMNS = ["benchmark", "param_key", "base_value", "head_value", "unit", "ratio", "reason"]

for h in health:
    st.header(h.title)
    parent = views.short(h.parent) if h.parent else "none (first commit with results)"
    st.markdown(
        f"Newest commit **`{views.short(h.head)}`** ({h.head_date:%Y-%m-%d %H:%M} UTC) "
        f"against parent **`{parent}`**"
    )
    if h.parent is not None:
        st.page_link(
            "app_pages/compare.py", label="Open this pair on the compare page",
            icon=":material/compare_arrows:",
            query_params={"machine": h.machine, "base": h.parent[:12], "head": h.head[:12]},
        )
    blocking = h.counts["failure"] + h.counts["regression"] + h.counts["missing"]
    if h.error:
        st.error(f"Could not judge this commit: {h.error}")
    elif h.parent is None:
        st.info("Only one commit has results here: nothing to compare yet.")
    elif blocking:
        st.error(f"{blocking} blocking verdict(s): the gate would fail this commit.")
    else:
        st.success("No failures, regressions or missing benchmarks against the parent.")
    cols = st.columns(len(SHOWN) + 1)
    for col, verdict in zip(cols, SHOWN, strict=False):
        col.metric(verdict, h.counts[verdict])
    cols[-1].metric("unchanged", h.counts["unchanged"])
    for verdict in SHOWN:
        rows = h.rows(verdict)
        if not rows.empty:
            with st.expander(f"{verdict}: {len(rows)}", expanded=verdict != "improvement"):
                st.dataframe(rows[COLUMNS], hide_index=True)
    st.subheader("Non-finite and wrong-result rates at the newest commit")
    summary = views.nonfinite_summary(h.safety)
    if summary.empty:
        st.caption("No safety benchmarks in this commit's results.")
    else:
        st.dataframe(summary, hide_index=True)
    st.divider()
