"""safeattn against its peers, per shape, and the geometric means of such ratios: the one
home of this computation, read by the README's tables (:mod:`regress.report`), the
dashboard (:mod:`dashboard.views`) and ``tools/peer_ratios.py``.

Direction-aware: a metric's direction is its :data:`regress.metrics.METRICS` entry, as
the loader records it per row (column ``better``); a row without one is read as asv's
default, lower is better. Also which parameters make one row's shape in each suite that
measures safeattn beside its peers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import pandas as pd

from .metrics import OWN_IMPL, Better
from .stats import worse_ratio

# The suites that measure safeattn beside its peers, and the parameters that make one
# row's shape in each (the rows whose ratio is taken).
SPEED_SUITE = "speed.SpeedSuite"
MASKED_SUITE = "speed.MaskedSpeedSuite"
MODEL_SUITE = "speed.ModelStepSuite"
FEATURE_SUITE = "features.FeatureSpeedSuite"
LIVE_SUITE = "resources.LiveResourcesSuite"
LIVE_BUILD_SUITE = "resources.LiveBuildResourcesSuite"
SUITE_SHAPES: dict[str, tuple[str, ...]] = {
    SPEED_SUITE: ("dtype", "head_dim", "seq_len", "causal", "gqa"),
    MASKED_SUITE: ("dtype", "head_dim", "mask"),
    MODEL_SUITE: ("seq_len", "padding"),
    FEATURE_SUITE: ("dtype", "feature"),
}
# Every peer suite's shape parameters, in that order.
SHAPE_PARAMS: tuple[str, ...] = tuple(dict.fromkeys(k for ks in SUITE_SHAPES.values() for k in ks))


def geomean(values: Iterable[float]) -> tuple[float, int]:
    """Geometric mean of the finite positive ``values`` and how many there were (NaN, 0
    when none)."""
    kept = [float(v) for v in values if math.isfinite(v) and v > 0]
    if not kept:
        return math.nan, 0
    return math.exp(sum(map(math.log, kept)) / len(kept)), len(kept)


def times_better(value: float, reference: float, better: Better) -> float:
    """How many times better ``value`` is than ``reference`` in the metric's direction
    (above 1: ``value`` is better): ``reference / value`` when lower is better (for a
    time, a speed-up), ``value / reference`` when higher is better."""
    return reference / value if better == "lower" else value / reference


def peer_over_own(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per ``keys`` (e.g. a shape): how many times better safeattn is than every
    other implementation (:func:`times_better`, above 1: safeattn better; for times, peer
    time ÷ safeattn time), a column per implementation, and safeattn's own value in column
    ``safeattn``. Empty when safeattn has no value.

    ``rows``: loader rows (columns ``keys``, ``impl``, ``value``, ``better``); rows of
    several metrics need ``metric`` among ``keys``. Raises ValueError when one ``keys``
    row mixes lower- and higher-is-better metrics.
    """
    wide = rows.pivot_table(index=keys, columns="impl", values="value", aggfunc="first")
    if OWN_IMPL not in wide.columns:
        return wide.iloc[0:0]
    others = [c for c in wide.columns if c != OWN_IMPL]
    ratios = wide[others].div(wide[OWN_IMPL], axis=0)
    higher = _higher_is_better(rows, keys, wide.index)
    if higher.any():
        ratios.loc[higher] = wide.loc[higher, others].rdiv(wide.loc[higher, OWN_IMPL], axis=0)
    return ratios.assign(**{OWN_IMPL: wide[OWN_IMPL]})


def _higher_is_better(rows: pd.DataFrame, keys: list[str], index: pd.Index) -> pd.Series:
    """Per row of ``index`` (``rows`` pivoted on ``keys``): whether its metric is higher-is-
    better."""
    better = rows["better"] if "better" in rows.columns else pd.Series(None, index=rows.index)
    higher = better.eq("higher")
    if not higher.any():
        return pd.Series(False, index=index)
    directions = rows.assign(_higher=higher).groupby(keys)["_higher"].agg(["min", "max"])
    mixed = directions[directions["min"] != directions["max"]]
    if not mixed.empty:
        raise ValueError(
            "peer_over_own: these rows mix lower- and higher-is-better metrics under one key:\n"
            f"  keys={keys}, e.g. {mixed.index[0]!r}\n"
            "HINT: pass the rows of one metric, or add 'metric' to keys."
        )
    return directions["max"].reindex(index, fill_value=False).astype(bool)


def peer_pairs(rows: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One row per peer row whose ``keys`` safeattn measured too: the peer's row (its
    columns, ``impl`` the peer's) with ``value_peer`` and safeattn's ``value_own``,
    ``ratio`` = how many times worse safeattn is than the peer in the metric's own
    direction (:func:`regress.stats.worse_ratio`; > 1 = safeattn worse; for a time,
    safeattn time ÷ peer time) and ``speedup`` = 1 / ratio.

    ``rows``: loader rows (columns ``keys``, ``impl``, ``value``, ``better``). Empty (no
    ``ratio`` column) when no peer row has a safeattn counterpart.
    """
    own = rows[rows["impl"] == OWN_IMPL][[*keys, "value"]]
    peers = rows[rows["impl"] != OWN_IMPL]
    pairs = peers.merge(own, on=keys, suffixes=("_peer", "_own"))
    if pairs.empty:
        return pairs
    ratio = pd.Series(
        [worse_ratio(peer, own, better) for own, peer, better in
         zip(pairs["value_own"], pairs["value_peer"], pairs["better"], strict=True)],
        index=pairs.index,
    )
    return pairs.assign(ratio=ratio, speedup=1.0 / ratio)
