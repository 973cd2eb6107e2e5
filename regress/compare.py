"""Commit-vs-commit comparison of asv results and the verdict on each benchmark row: the
one comparison that both ``safeattn-gate`` and the dashboard's compare page use (no UI
code here).

Directions and must-be-zero come from :mod:`regress.metrics`, architecture limits from
:mod:`safeattn.gpu_limits` (through :mod:`regress.gpu_arch`), verdict names and thresholds
from :mod:`regress.policy` (``policy.toml``), ratios and significance tests from
:mod:`regress.stats`.

Verdicts, one per (benchmark, parameter combination) present on base or head:

==================  =====================================================================
``failure``         broken on head: failed / NaN where base was fine, a safeattn
                    must-be-zero rate above 0, shared memory over the architecture's limit
``missing``         measured on base, absent on head (vanished)
``regression``      worse beyond the policy threshold (speed: and significant), or, for a
                    speed benchmark's safeattn rows together, a geometric-mean slowdown
                    beyond ``max_group_ratio`` (one extra row per benchmark, see
                    :func:`group_rows`)
``improvement``     better beyond the policy threshold (speed: and significant)
``unchanged``       within the threshold, or not significant
``new``             absent on base, measured on head
``context``         a peer implementation's row (impl != "safeattn"): never blocks
``not_comparable``  no verdict possible (failed on both, no base value, unknown direction)
==================  =====================================================================

A flagged safeattn row (failure, regression, improvement) whose kernels ran with other
configs on head than on base says so at the end of its reason: ``config changed: forward
M128-N64-w4-s3 → M64-N64-w4-s3`` (the configs come from the commits' ``versions-<sha>.json``
sidecars, ``safeattn_launches``, written by tools/run.py: :mod:`regress.launches`); a
speed benchmark's group row counts its rows that did. Then the verdict may be the tuning
table's doing, not the code's.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from regress.gpu_arch import machine_arch, row_arch_limit
from regress.launches import CONFIG_CHANGE, launched_configs, note_config_change
from regress.metrics import IMPL_PARAM, METRICS, OWN_IMPL, kind_of
from regress.policy import KindPolicy, Policy
from regress.ratios import geomean as geometric_mean
from regress.results import LoadedResults, resolve_commit
from regress.stats import mann_whitney_u, worse_ratio

COMPARE_COLUMNS: tuple[str, ...] = (
    "machine",
    "benchmark",
    "suite",
    "metric",
    "kind",
    "param_key",
    "params",
    "impl",
    "peer",
    "env_name",
    "unit",
    "better",
    "base_value",
    "head_value",
    "base_status",
    "head_status",
    "ratio",
    "p_value",
    "significant",
    "test",
    "verdict",
    "reason",
    # safeattn rows: the kernels launched with another config on head ("forward A → B"),
    # "" when the launched configs are known and the same, None when not recorded.
    "config_change",
)


# -------------------------------------------------------------------------- compare


def compare(
    loaded: LoadedResults, base: str, head: str, machine: str, policy: Policy
) -> pd.DataFrame:
    """Compare two commits' results on one machine: one row per benchmark × param_key
    present on base or head, with the columns of :data:`COMPARE_COLUMNS`.

    ``ratio`` is direction-aware: > 1 means head is worse (1.25 = 25% worse), whether the
    metric is lower- or higher-is-better. ``base``/``head`` may be sha prefixes. Raises
    ValueError when the machine or either commit has no results.
    """
    if machine not in set(loaded.table["machine"]):
        known = sorted(set(loaded.table["machine"]))
        raise ValueError(f"no results for machine {machine!r}; machines with results: {known}")
    base_sha = resolve_commit(loaded, base, machine)
    head_sha = resolve_commit(loaded, head, machine)
    table = loaded.table[loaded.table["machine"] == machine]
    base_rows = table[table["commit"] == base_sha]
    head_rows = table[table["commit"] == head_sha]

    # One environment per commit (the usual case): match rows whatever the env is called.
    # Several: compare each environment with its namesake.
    by_env = base_rows["env_name"].nunique() > 1 or head_rows["env_name"].nunique() > 1
    keys = ["benchmark", "param_key"] + (["env_name"] if by_env else [])
    base_map = {tuple(r[k] for k in keys): r for r in base_rows.to_dict("records")}
    head_map = {tuple(r[k] for k in keys): r for r in head_rows.to_dict("records")}
    info = loaded.machines.get(machine, {})
    arch = machine_arch(info)
    base_launches, head_launches = (launched_configs(info, sha) for sha in (base_sha, head_sha))

    out = []
    for key in sorted(set(base_map) | set(head_map)):
        b, h = base_map.get(key), head_map.get(key)
        row = _judge(b, h, machine, arch, policy)
        row[CONFIG_CHANGE] = None
        note_config_change(row, base_launches, head_launches)
        out.append(row)
    out += group_rows(out, policy)
    frame = pd.DataFrame.from_records(out, columns=list(COMPARE_COLUMNS))
    # object dtype: significant stays True/False/None (None = no test applied).
    frame["significant"] = frame["significant"].astype(object)
    return frame


GROUP_PARAM_KEY = "impl=safeattn geomean=all-rows"  # "impl=" like every safeattn row


def group_rows(rows: list[dict[str, Any]], policy: Policy) -> list[dict[str, Any]]:
    """One extra row per speed benchmark: its safeattn rows judged together.

    Why: between two runs of the same kernels on a GPU, single rows move by up to 1.12x
    (H200, consecutive commits in results/nvidia-h200: the tuner's near-tied configs,
    clocks), while the geometric mean of a benchmark's 32 rows moved by at most 1.4%. So a
    single row must be far off to count (``max_ratio``), and a broad slowdown is caught by
    the mean: ``regression`` when the geometric mean of the rows' ratios exceeds
    ``max_group_ratio`` and more than half of the rows are slower; ``improvement``
    symmetrically. Needs ``min_group_rows`` rows with a ratio on both commits (fewer: no
    group row).
    """
    kp = policy.kinds["speed"]
    by_benchmark: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        own_speed = row["kind"] == "speed" and not row["peer"]
        if own_speed and _finite(row["ratio"]) and row["ratio"] > 0:
            by_benchmark.setdefault(row["benchmark"], []).append(row)
    out = []
    for benchmark in sorted(by_benchmark):
        members = by_benchmark[benchmark]
        if len(members) < kp.min_group_rows:
            continue
        ratios = [r["ratio"] for r in members]
        geomean, _ = geometric_mean(ratios)  # every ratio here is finite and > 0
        slower = sum(r > 1 for r in ratios)
        faster = sum(r < 1 for r in ratios)
        first = members[0]
        summary = (
            f"geometric mean {_times(geomean)} over {len(ratios)} rows "
            f"({slower} slower, {faster} faster; limit {kp.max_group_ratio:g}x)"
        )
        if geomean > kp.max_group_ratio and slower > len(ratios) / 2:
            verdict, reason = "regression", f"broad slowdown: {summary}"
        elif geomean < 1 / kp.max_group_ratio and faster > len(ratios) / 2:
            verdict, reason = "improvement", f"broad speed-up: {summary}"
        else:
            verdict, reason = "unchanged", summary
        changed = sum(bool(r.get(CONFIG_CHANGE)) for r in members)
        known = any(r.get(CONFIG_CHANGE) is not None for r in members)
        change = None  # not recorded
        if changed:
            change = f"{changed} of {len(members)} rows ran other configs"
            reason += f"; {change} than on base"
        elif known:
            change = ""
        out.append({
            **{c: first[c] for c in ("machine", "benchmark", "suite", "metric", "kind")},
            "param_key": GROUP_PARAM_KEY,
            "params": {IMPL_PARAM: OWN_IMPL},
            "impl": OWN_IMPL,
            "peer": False,
            "env_name": first["env_name"],
            "unit": "ratio",
            "better": first["better"],
            "base_value": math.nan,
            "head_value": math.nan,
            "base_status": "ok",
            "head_status": "ok",
            "ratio": geomean,
            "p_value": math.nan,
            "significant": None,
            "test": "geomean",
            "verdict": verdict,
            "reason": reason,
            CONFIG_CHANGE: change,
        })
    return out


# ---------------------------------------------------------------- verdicts


def _judge(
    b: dict[str, Any] | None,
    h: dict[str, Any] | None,
    machine: str,
    arch: str | None,
    policy: Policy,
) -> dict[str, Any]:
    any_row = h if h is not None else b
    assert any_row is not None  # a key comes from at least one side
    params = any_row["params"]
    impl = params.get(IMPL_PARAM)
    peer = impl is not None and impl != OWN_IMPL
    metric = any_row["metric"]
    kind = kind_of(any_row["benchmark"], metric)
    result: dict[str, Any] = {
        "machine": machine,
        "benchmark": any_row["benchmark"],
        "suite": any_row["suite"],
        "metric": metric,
        "kind": kind,
        "param_key": any_row["param_key"],
        "params": params,
        "impl": impl,
        "peer": peer,
        "env_name": any_row["env_name"],
        "unit": any_row["unit"],
        "better": any_row["better"],
        "base_value": b["value"] if b is not None else math.nan,
        "head_value": h["value"] if h is not None else math.nan,
        "base_status": b["status"] if b is not None else "absent",
        "head_status": h["status"] if h is not None else "absent",
        "ratio": math.nan,
        "p_value": math.nan,
        "significant": None,
        "test": None,
    }
    verdict, reason = _verdict(b, h, result, arch, policy)
    if peer and verdict != "context":
        reason = f"peer {impl}, context only: {verdict}: {reason}"
        verdict = "context"
    result["verdict"] = verdict
    result["reason"] = reason
    return result


def _verdict(
    b: dict[str, Any] | None,
    h: dict[str, Any] | None,
    result: dict[str, Any],
    arch: str | None,
    policy: Policy,
) -> tuple[str, str]:
    """(verdict, reason); fills ratio / p_value / significant / test in ``result``."""
    metric = METRICS.get(result["metric"]) if result["metric"] else None
    base_ok = b is not None and b["status"] == "ok"
    head_ok = h is not None and h["status"] == "ok"
    kind, better = result["kind"], result["better"]
    if base_ok and head_ok and better in ("lower", "higher"):
        result["ratio"] = worse_ratio(b["value"], h["value"], better)

    # Absolute rules on head first: they hold whatever the base was.
    if head_ok:
        value = h["value"]
        if metric is not None and metric.must_be_zero and value > 0:
            return "failure", f"{metric.label} is {value:g}: must be 0 for safeattn"
        if result["metric"] == "shared_bytes":
            row_arch, limit = row_arch_limit(h, arch)
            if limit is not None and value > limit:
                return "failure", (
                    f"{value:.0f} bytes of shared memory exceed the {row_arch} opt-in limit "
                    f"of {limit} bytes"
                )

    if h is None:
        if base_ok:
            return "missing", "measured on base, absent on head (benchmark vanished)"
        return "not_comparable", f"absent on head; {b['status']} on base"
    if b is None:
        if h["status"] == "failed":
            return "failure", "new benchmark fails on head"
        return "new", f"absent on base; {h['status']} on head"
    if base_ok and not head_ok:
        if h["status"] == "failed":
            return "failure", "failed on head (ok on base)"
        return "failure", "NaN or skipped on head (ok on base): asv shows a NaN result as skipped"
    if not base_ok:
        if head_ok:
            return "not_comparable", f"no base value ({b['status']} on base)"
        return "not_comparable", f"{b['status']} on base, {h['status']} on head"

    if kind is None or better not in ("lower", "higher"):
        return "not_comparable", (
            "unknown metric direction: name the benchmark track_<metric> with a metric "
            "from regress.metrics.METRICS"
        )
    kp = policy.kinds[kind]
    ratio = result["ratio"]
    if kind == "speed":
        return _speed_verdict(b, h, ratio, kp, result)
    result["test"] = "threshold"
    change = abs(h["value"] - b["value"])
    if ratio > kp.max_ratio and change > kp.min_abs_increase:
        return "regression", f"{_times(ratio)} worse (limit {kp.max_ratio:g}x)"
    if ratio < 1 / kp.max_ratio and change > kp.min_abs_increase:
        return "improvement", f"{_times(_inverse(ratio))} better"
    return "unchanged", f"{_times(ratio)} of base, within {kp.max_ratio:g}x"


def _speed_verdict(
    b: dict[str, Any], h: dict[str, Any], ratio: float, kp: KindPolicy, result: dict[str, Any]
) -> tuple[str, str]:
    bs, hs = b["samples"] or [], h["samples"] or []
    threshold = kp.max_ratio
    if len(bs) >= kp.min_samples and len(hs) >= kp.min_samples:
        _, p = mann_whitney_u(bs, hs)
        result.update(test="mann-whitney", p_value=p, significant=p < kp.alpha)
        evidence = f"p={p:.2g} (Mann–Whitney, {len(bs)} vs {len(hs)} samples, alpha {kp.alpha:g})"
    elif all(_finite(r[k]) for r in (b, h) for k in ("ci_low", "ci_high")):
        overlap = b["ci_low"] <= h["ci_high"] and h["ci_low"] <= b["ci_high"]
        result.update(test="ci-overlap", significant=not overlap)
        evidence = "99% CIs " + ("overlap" if overlap else "do not overlap")
    else:
        threshold = kp.max_ratio_without_stats
        result.update(test="ratio-only")
        evidence = "no samples or CIs recorded: ratio only"
    trusted = result["significant"] is not False
    if ratio > threshold:
        if trusted:
            return "regression", f"{_times(ratio)} slower (limit {threshold:g}x); {evidence}"
        return "unchanged", f"{_times(ratio)} slower but not significant; {evidence}"
    if ratio < 1 / threshold and trusted:
        return "improvement", f"{_times(_inverse(ratio))} faster; {evidence}"
    return "unchanged", f"{_times(ratio)} of base, within {threshold:g}x; {evidence}"


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def _times(ratio: float) -> str:
    return "inf x" if math.isinf(ratio) else f"{ratio:.3f}x"


def _inverse(ratio: float) -> float:
    """1 / ratio, where a head value of exactly 0 (ratio 0) is infinitely better."""
    return math.inf if ratio == 0 else 1 / ratio
