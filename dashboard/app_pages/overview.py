"""Overview: per GPU, the gate's verdict on the newest commit against its parent, then
safeattn's speed trend over commits, then the rows behind the verdict."""

import streamlit as st

from dashboard import state
from dashboard.views.common import readable, short
from dashboard.views.numerics import nonfinite_summary
from dashboard.views.overview import trend_chart
from regress.ratios import SPEED_SUITE

st.title("safeattn — overview")
st.caption(
    "Per GPU: the newest commit judged against the previous commit measured on that GPU, "
    "with the merge gate's own comparison and policy, then safeattn's speed over commits. "
    "Peer implementations are context, never failures."
)

_, health = state.overview_health()  # stops with a how-to when there is nothing to show
SHOWN = ("failure", "regression", "missing", "improvement")
COLUMNS = ["benchmark", "param_key", "base_value", "head_value", "unit", "ratio", "reason"]

for h in health:
    st.header(h.title)
    head = f"`{short(h.head)}` ({h.head_date:%Y-%m-%d %H:%M} UTC)"
    if h.parent is None:
        st.info(f"Newest commit {head}. Only one commit has results here: nothing to "
                "compare yet.")
    elif h.error:
        st.error(f"Could not judge {head}: {h.error}")
    else:
        pair = f"{head} against its parent `{short(h.parent)}`"
        summary = ", ".join(f"{h.counts[v]} {v}" for v in SHOWN if h.counts[v]) or "no changes"
        if h.verdict == "fail":
            st.error(f"**Fail** — the gate would fail {pair}: {summary}.")
        elif h.verdict == "pass":
            st.success(f"**Pass** — the gate would pass {pair}: {summary}.")
        else:
            st.warning(f"**Nothing compared** — {pair} share no benchmark that both measured "
                       "(the gate exits 2 on such a pair).")
        st.page_link(
            "app_pages/compare.py", label="Open this pair on the compare page",
            icon=":material/compare_arrows:",
            query_params={"machine": h.machine, "base": h.parent[:12], "head": h.head[:12]},
        )
    cols = st.columns(len(SHOWN) + 1)
    for col, verdict in zip(cols, SHOWN, strict=False):
        col.metric(verdict, h.counts[verdict])
    cols[-1].metric("unchanged", h.counts["unchanged"])

    st.subheader("safeattn speed over commits")
    trend = state.speed_trend(h.machine)
    if trend.empty:
        # e.g. a CPU machine (make demo without a GPU runs the interpreter suites only)
        st.caption(f"No GPU speed history on this machine (no safeattn `{SPEED_SUITE}` "
                   "results): no trend.")
    else:
        measured = list(dict.fromkeys(trend.sort_values("order", ascending=False)["commit"]))
        c1, c2 = st.columns([1, 3])
        baseline = state.url_select(
            "Baseline commit (index 1.0)", measured, f"baseline_{h.machine}",
            # a plain lookup: AppTest re-applies format_func outside the script run
            format_func={c: state.commit_label(h.machine, c) for c in measured}.__getitem__,
            default_index=len(measured) - 1, container=c1, key=f"baseline_{h.machine}",
        )
        trend = state.speed_trend(h.machine, baseline)
        c2.caption(
            f"Geometric mean over all `{SPEED_SUITE}` shapes of baseline time ÷ time, "
            "per pass (above 1: faster than the baseline). Diamonds: the gate's verdict of "
            "that commit against its parent on that pass (red: regression, green: "
            f"improvement). Newest commit with these results: `{trend['short'].iloc[-1]}`."
        )
        st.altair_chart(trend_chart(trend), width="stretch")
    for verdict in SHOWN:
        rows = h.rows(verdict)
        if not rows.empty:
            with st.expander(f"{verdict}: {len(rows)}", expanded=verdict in ("failure",
                                                                             "regression")):
                state.table(readable(rows[COLUMNS], {"ratio": "{:.3f}"}))
    st.subheader("Non-finite and wrong-result rates")
    safety_commit, safety = state.latest_safety(h.machine)
    summary = nonfinite_summary(safety)
    if summary.empty:
        st.caption("No non-finite or wrong-result rates in this machine's results.")
    else:
        newest = "the newest commit" if safety_commit == h.head else (
            "the newest commit that measured them")
        st.caption(f"At `{short(safety_commit)}`, {newest}. Every safeattn rate must be "
                   "0; peers are context.")
        state.table(readable(summary))
    st.divider()
