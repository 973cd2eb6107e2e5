"""The peers page: safeattn against each peer implementation per shape, and the geometric
means over shapes, as tables coloured for people. The ratios come from
:mod:`regress.ratios` (as the README's)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pandas.io.formats.style import Styler

from dashboard.views.charts import NEUTRAL
from dashboard.views.common import SAFETY_METRICS, commit_rows, readable
from regress import workloads
from regress.asv_files import format_param_key
from regress.metrics import IMPL_PARAM, OWN_IMPL, PEERS
from regress.ratios import (
    FEATURE_SUITE,
    MASKED_SUITE,
    MODEL_SUITE,
    SPEED_SUITE,
    SUITE_SHAPES,
    geomean,
    peer_over_own,
    peer_pairs,
)
from regress.report import suite_rows
from regress.results import LoadedResults


def peer_ratios(loaded: LoadedResults, machine: str, commit: str) -> pd.DataFrame:
    """safeattn against each peer on one machine and commit, per shape.

    One row per (benchmark, shape, peer) where both safeattn and the peer have a value:
    ``ratio`` = how many times worse safeattn is than the peer in the metric's own
    direction (> 1 = safeattn worse; for a time, safeattn time ÷ peer time), and
    ``speedup`` = 1 / ratio. ``shape`` is the param_key without the impl parameter,
    ``label`` the same for people (:func:`shape_label`: mask kinds and paddings described).
    Safety rates (must be 0) are left to :func:`dashboard.views.numerics.numerics`.
    """
    rows = commit_rows(loaded, machine, commit)
    rows = rows[rows["status"] == "ok"]
    rows = rows[rows["params"].map(lambda p: IMPL_PARAM in p) & rows["better"].notna()]
    # Rates that must be 0 have no meaningful ratio (0 ÷ 0): the numerics page shows them.
    rows = rows[~rows["metric"].isin(SAFETY_METRICS)]
    columns = ["machine", "benchmark", "metric", "unit", "better", "shape", "label", "peer",
               "safeattn_value", "peer_value", "ratio", "speedup"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    shape = rows["params"].map(
        lambda p: format_param_key({k: v for k, v in p.items() if k != IMPL_PARAM})
    )
    rows = rows.assign(
        shape=shape,
        label=rows["params"].map(shape_label),
        impl=rows["params"].map(lambda p: p[IMPL_PARAM]),
    )
    pairs = peer_pairs(rows, ["benchmark", "shape"])
    if pairs.empty:
        return pd.DataFrame(columns=columns)
    out = pd.DataFrame({
        "machine": machine,
        "benchmark": pairs["benchmark"],
        "metric": pairs["metric"],
        "unit": pairs["unit"],
        "better": pairs["better"],
        "shape": pairs["shape"],
        "label": pairs["label"],
        "peer": pairs["impl"],
        "safeattn_value": pairs["value_own"],
        "peer_value": pairs["value_peer"],
        "ratio": pairs["ratio"],
        "speedup": pairs["speedup"],
    })
    return out.sort_values(["benchmark", "peer", "shape"]).reset_index(drop=True)


# Parameter values shown by their workload labels (a feature "none" reads "plain attention").
_VALUE_LABELS: dict[str, dict[str, str]] = {
    "mask": {k: w.label for k, w in workloads.MASK_WORKLOADS.items()},
    "padding": workloads.PADDING_LABELS,
    "feature": workloads.FEATURES,
}


def shape_label(params: dict[str, Any]) -> str:
    """A peer row's shape for people: its parameters without ``impl``, a mask kind, a
    padding and a feature by their workload labels: ``"dtype=bfloat16 head_dim=128 mask=left padding
    0–60 % + causal, ..."``."""
    shown = {
        name: _VALUE_LABELS.get(name, {}).get(value, value)
        for name, value in params.items()
        if name != IMPL_PARAM
    }
    return format_param_key(shown)


# Peer comparisons per suite: which benchmarks (metric -> column tag) and which parameters
# make one row's shape (regress.ratios.SUITE_SHAPES, as in the README's generated tables).
@dataclass(frozen=True)
class PeerSuite:
    title: str
    keys: tuple[str, ...]
    passes: dict[str, str]


PEER_SUITES: dict[str, PeerSuite] = {
    SPEED_SUITE: PeerSuite("Dense shapes", SUITE_SHAPES[SPEED_SUITE],
                           {"forward_ms": "fwd", "backward_ms": "bwd"}),
    MASKED_SUITE: PeerSuite("Masked workloads", SUITE_SHAPES[MASKED_SUITE],
                            {"forward_ms": "fwd", "backward_ms": "bwd"}),
    MODEL_SUITE: PeerSuite("Training step of a small decoder", SUITE_SHAPES[MODEL_SUITE],
                           {"step_ms": "step"}),
    FEATURE_SUITE: PeerSuite("Features (soft-capping, dropout, bias gradient)",
                             SUITE_SHAPES[FEATURE_SUITE],
                             {"forward_ms": "fwd", "backward_ms": "bwd"}),
}
PEER_BENCHMARKS: tuple[str, ...] = tuple(
    f"{suite}.track_{metric}" for suite, spec in PEER_SUITES.items() for metric in spec.passes
)
# Shape parameters as a person reads them in a table header.
KEY_TITLES = {"head_dim": "D", "seq_len": "N", "gqa": "GQA", "mask": "mask", "padding": "padding"}


def peer_table(loaded: LoadedResults, machine: str, suite: str) -> tuple[str | None, pd.DataFrame]:
    """safeattn against each peer per shape, at the machine's newest commit with ``suite``.

    Returns (that commit or None, the table): one row per shape (its parameters as
    columns, mask kinds and paddings by their workload labels), ``safeattn <pass> ms``
    per pass, then per peer and pass ``<peer> <pass>`` = peer time ÷ safeattn time
    (:func:`regress.ratios.peer_over_own`; above 1: safeattn is faster, NaN: the
    peer was not measured there). Passes: :data:`PEER_SUITES`.
    """
    spec = PEER_SUITES[suite]
    commit, rows = suite_rows(loaded, machine, suite)
    if commit is None or rows.empty or IMPL_PARAM not in rows.columns:
        return None, pd.DataFrame()
    keys = [k for k in spec.keys if k in rows.columns and rows[k].notna().any()]
    impls = set(rows[IMPL_PARAM].dropna())
    peers = [p for p in PEERS if p in impls] + sorted(impls - set(PEERS) - {OWN_IMPL})
    parts = []
    for metric, tag in spec.passes.items():
        ratios = peer_over_own(rows[rows["metric"] == metric], keys)
        if ratios.empty:
            continue
        part = pd.DataFrame({f"{OWN_IMPL} {tag} ms": ratios[OWN_IMPL]}, index=ratios.index)
        for peer in peers:
            part[f"{peer} {tag}"] = ratios[peer] if peer in ratios.columns else math.nan
        parts.append(part)
    if not parts:
        return commit, pd.DataFrame()
    table = pd.concat(parts, axis=1).reset_index()
    tags = list(spec.passes.values())
    ordered = [*keys, *(f"{OWN_IMPL} {t} ms" for t in tags),
               *(f"{p} {t}" for p in peers for t in tags)]
    table = table[[c for c in ordered if c in table.columns]]
    for key, names in _VALUE_LABELS.items():
        if key in table.columns:
            table[key] = table[key].map(lambda v, names=names: names.get(v, v))
    return commit, table.rename(columns=KEY_TITLES)


def peer_names(loaded: LoadedResults) -> list[str]:
    """The implementations other than safeattn in ``loaded`` (known peers first)."""
    if IMPL_PARAM not in loaded.table.columns:
        return []
    impls = set(loaded.table[IMPL_PARAM].dropna()) - {OWN_IMPL}
    return [p for p in PEERS if p in impls] + sorted(impls - set(PEERS))


def ratio_columns(table: pd.DataFrame) -> list[str]:
    """The peer ÷ safeattn columns of a :func:`peer_table`."""
    return [c for c in table.columns
            if not c.startswith(f"{OWN_IMPL} ") and c.rsplit(" ", 1)[-1] in
            {t for spec in PEER_SUITES.values() for t in spec.passes.values()}]


def peer_geomeans(table: pd.DataFrame) -> pd.DataFrame:
    """Per peer (rows) and pass (columns): the geometric mean over shapes of a
    :func:`peer_table`'s ratios (:func:`regress.ratios.geomean`), and the number
    of shapes measured."""
    records: dict[str, dict[str, Any]] = {}
    for column in ratio_columns(table):
        peer, tag = column.rsplit(" ", 1)
        value, n = geomean(table[column].dropna())
        row = records.setdefault(peer, {"peer": peer})
        row[tag] = value
        row["shapes"] = max(row.get("shapes", 0), n)
    frame = pd.DataFrame(list(records.values()))
    return frame[[c for c in frame.columns if c != "shapes"] + ["shapes"]] if records else frame


def without_peers(table: pd.DataFrame, keep: list[str]) -> pd.DataFrame:
    """A :func:`peer_table` with only the ratio columns of the peers in ``keep``."""
    drop = [c for c in ratio_columns(table) if c.rsplit(" ", 1)[0] not in keep]
    return table.drop(columns=drop)


def _ratio_css(value: Any) -> str:
    """A peer ÷ safeattn cell's colour: red where safeattn is slower, green where it is
    faster, stronger with the distance from 1 (saturated at 2x); near 1 neutral; a value
    not measured in grey text."""
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        return f"color: {NEUTRAL}"
    distance = min(abs(math.log2(value)), 1.0)
    if distance < math.log2(1.03):
        return ""
    rgb = "44, 160, 44" if value > 1 else "214, 39, 40"
    return f"background-color: rgba({rgb}, {0.15 + 0.6 * distance:.2f})"


def styled_ratios(table: pd.DataFrame) -> Styler:
    """A :func:`peer_table` or :func:`peer_geomeans` for people: ratios as ``1.23×``,
    coloured (:func:`_ratio_css`), times in ms, "not measured" where a peer has no value."""
    ratios = [c for c in table.columns if c in ratio_columns(table) or c in
              {t for spec in PEER_SUITES.values() for t in spec.passes.values()}]
    formats = {c: "{:.2f}×" for c in ratios}
    formats.update({c: "{:.3f}" for c in table.columns if str(c).endswith(" ms")})
    return readable(table, formats).map(_ratio_css, subset=ratios)
