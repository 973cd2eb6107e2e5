"""How sensitive the comparison is, measured on real results: plant a slowdown or a
non-finite rate in an in-memory copy of loaded results, re-run :func:`regress.compare.compare`
and count what it flags. The A/A study (:mod:`regress.aa`) is built on these; nothing on
disk is written.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from regress.compare import GROUP_PARAM_KEY, compare
from regress.metrics import IMPL_PARAM, OWN_IMPL, kind_of
from regress.policy import Policy
from regress.results import LoadedResults, resolve_commit

SENSITIVITY_FACTORS: tuple[float, ...] = (1.0, 1.02, 1.05, 1.08, 1.10, 1.15, 1.20, 1.30, 1.50)
# What plant_nonfinite writes: one trial in a hundred non-finite (any value above 0 must
# fail for safeattn; a small one shows the rule has no hidden tolerance).
PLANTED_NONFINITE_RATE = 0.01


def own_speed_rows(table: pd.DataFrame, machine: str, commit: str) -> pd.Series:
    """Boolean mask over ``table`` (``LoadedResults.table``): the rows of ``commit`` on
    ``machine`` that are safeattn's own lower-is-better speed rows (not a peer's: a row
    without an ``impl`` parameter counts as safeattn's, as in :func:`compare`)."""
    kinds = [kind_of(b, m) for b, m in zip(table["benchmark"], table["metric"], strict=True)]
    speed = pd.Series(kinds, index=table.index).eq("speed") & table["better"].eq("lower")
    return (table["machine"] == machine) & (table["commit"] == commit) & speed & own_rows(table)


def own_rows(table: pd.DataFrame) -> pd.Series:
    """Boolean mask over ``table`` (``LoadedResults.table``): safeattn's own rows, not a
    peer's (``impl`` is safeattn, or the benchmark has no ``impl`` parameter)."""
    if IMPL_PARAM not in table.columns:
        return pd.Series(True, index=table.index)
    impl = table[IMPL_PARAM]
    return impl.isna() | impl.eq(OWN_IMPL)


def plant_slowdown(loaded: LoadedResults, rows: pd.Series, factor: float) -> LoadedResults:
    """A copy of ``loaded`` in which the ``rows`` of its table (a boolean mask, e.g. from
    :func:`own_speed_rows`) are ``factor`` times slower: value, CI and every sample scaled,
    so the significance test sees the shifted distribution. ``loaded`` is not changed."""
    table = loaded.table
    scaled = table.copy()
    for column in ("value", "ci_low", "ci_high"):
        scaled.loc[rows, column] = table.loc[rows, column] * factor
    scaled.loc[rows, "samples"] = table.loc[rows, "samples"].map(
        lambda samples: None if samples is None else [s * factor for s in samples]
    )
    return LoadedResults(scaled, loaded.machines, loaded.commits, loaded.problems)


def plant_nonfinite(
    loaded: LoadedResults, machine: str, commit: str, rate: float = PLANTED_NONFINITE_RATE
) -> tuple[LoadedResults, tuple[str, str] | None]:
    """A copy of ``loaded`` in which one safeattn ``nonfinite_rate`` row of ``commit`` on
    ``machine`` that measured 0 reads ``rate``, and that row's ``(benchmark, param_key)``.

    The row is the first in (benchmark, param_key) order, so the plant is the same on
    every run. ``(loaded, None)`` when the commit has no such row (numerics not measured):
    nothing could be planted.
    """
    table = loaded.table
    candidates = table[
        (table["machine"] == machine)
        & (table["commit"] == commit)
        & table["metric"].eq("nonfinite_rate")
        & own_rows(table)
        & table["status"].eq("ok")
        & table["value"].eq(0.0)
    ]
    if candidates.empty:
        return loaded, None
    target = candidates.sort_values(["benchmark", "param_key"]).index[0]
    planted = table.copy()
    planted.loc[target, "value"] = rate
    key = (str(table.at[target, "benchmark"]), str(table.at[target, "param_key"]))
    return LoadedResults(planted, loaded.machines, loaded.commits, loaded.problems), key


def slowdown_sensitivity(
    loaded: LoadedResults,
    base: str,
    head: str,
    machine: str,
    policy: Policy,
    factors: Sequence[float] = SENSITIVITY_FACTORS,
) -> pd.DataFrame:
    """How large a slowdown the gate catches, given the noise of two real runs.

    Meant for an A/A pair (``base`` and ``head`` measure the same code): every safeattn
    speed row of ``head`` (value, CI and samples) is made ``factor`` times slower
    (:func:`plant_slowdown`) and the comparison re-run. Returns one row per factor:
    ``factor``, ``rows`` (safeattn speed rows compared), ``flagged`` (of those, judged
    regressions), ``fraction``, ``groups`` (speed benchmarks judged as a whole,
    :func:`~regress.compare.group_rows`), ``groups_flagged`` and ``blocks`` (whether the
    gate would exit 1 on speed). At factor 1.0 ``flagged`` and ``groups_flagged`` are the
    A/A false alarms.
    """
    base_sha = resolve_commit(loaded, base, machine)
    head_sha = resolve_commit(loaded, head, machine)
    slowed_rows = own_speed_rows(loaded.table, machine, head_sha)
    out = []
    for factor in factors:
        trial = plant_slowdown(loaded, slowed_rows, factor)
        result = compare(trial, base_sha, head_sha, machine, policy)
        counts = speed_flag_counts(result)
        out.append({"factor": factor, **counts})
    columns = ["factor", "rows", "flagged", "fraction", "groups", "groups_flagged", "blocks"]
    return pd.DataFrame(out, columns=columns)


def speed_flag_counts(result: pd.DataFrame) -> dict[str, Any]:
    """Of :func:`compare` rows, safeattn's speed rows: ``rows`` (compared, with a ratio),
    ``flagged`` (judged regressions), ``fraction``, ``groups`` (group rows),
    ``groups_flagged`` and ``blocks`` (any of them a regression)."""
    compared, groups = own_speed_compared(result)
    flagged = int((compared["verdict"] == "regression").sum())
    groups_flagged = int((groups["verdict"] == "regression").sum())
    return {
        "rows": len(compared),
        "flagged": flagged,
        "fraction": flagged / len(compared) if len(compared) else math.nan,
        "groups": len(groups),
        "groups_flagged": groups_flagged,
        "blocks": bool(flagged or groups_flagged),
    }


def own_speed_compared(result: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Of :func:`compare` rows, safeattn's own speed rows: (the rows compared, with a
    ratio; the benchmarks' group rows, :data:`~regress.compare.GROUP_PARAM_KEY`)."""
    own_speed = result[(result["kind"] == "speed") & ~result["peer"].astype(bool)]
    is_group = own_speed["param_key"] == GROUP_PARAM_KEY
    return own_speed[~is_group & own_speed["ratio"].notna()], own_speed[is_group]
