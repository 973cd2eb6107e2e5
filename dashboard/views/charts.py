"""What the dashboard's Altair charts share: the colours (the gate's verdicts red and
green, series lines in neither) and the commit axis, oldest to newest."""

from __future__ import annotations

import altair as alt
import pandas as pd

# Colours: the gate's verdicts (bad is red, good is green), neutral grey for "no change".
BAD, GOOD, NEUTRAL = "#d62728", "#2ca02c", "#9e9e9e"
# Line colours that are neither the bad red nor the good green.
SERIES_COLOURS = ["#1f77b4", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
                  "#393b79", "#ff7f0e", "#637939"]
VERDICT_COLOURS: dict[str, str] = {
    "failure": "#7b0000", "missing": "#b2182b", "regression": BAD, "improvement": GOOD,
}


def commit_axis(rows: pd.DataFrame) -> list[str]:
    """The short hashes of ``rows`` (columns short, date, order), oldest first: the order
    of a chart's commit axis."""
    ordered = rows.sort_values(["date", "order"]) if "date" in rows.columns else rows.sort_values(
        "order")
    return list(dict.fromkeys(ordered["short"]))


def verdict_scale() -> alt.Scale:
    """The colour scale of the gate's verdict marks (:data:`VERDICT_COLOURS`)."""
    return alt.Scale(domain=list(VERDICT_COLOURS), range=list(VERDICT_COLOURS.values()))
