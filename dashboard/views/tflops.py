"""TFLOP/s of the history page's time rows: DESIGN.md's FLOP count (on attended pairs
only for masked workloads) over the measured time, with the shape recovered from the
benchmark's parameters."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from dashboard.views.common import TIME_METRIC_PASSES
from regress import workloads
from regress.metrics import attended_flops, attention_flops, tflops
from regress.ratios import MASKED_SUITE

# Parameter names (first found wins) that give the FLOP count's batch and head count.
_BATCH_PARAMS = ("batch", "batch_size", "B")
_HEADS_PARAMS = ("heads", "num_heads", "n_heads", "H")
_SEQ_Q_PARAMS = ("seq_q", "seq_len_q", "seq_len")
_SEQ_K_PARAMS = ("seq_k", "seq_len_k", "seq_len")


def add_tflops(rows: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """Add a ``tflops`` column to time rows (DESIGN.md's FLOP count over the measured time).

    Batch and head count come from ``batch``/``heads`` parameters when the benchmark has
    them, else, for the GPU speed grid (``speed.SpeedSuite``: seq_len and head_dim
    parameters only), from the suite's own shape rule ``benchmarks._common.gpu_problem``.
    ``speed.MaskedSpeedSuite`` rows count the FLOPs of their workload's attended pairs
    only (``regress.workloads``). Returns ``(rows, None)``, or ``(rows
    unchanged, why not)`` when the metric is not a time or the shape cannot be recovered.
    """
    if rows.empty:
        return rows, "no rows"
    metric = rows["metric"].iloc[0]
    pass_ = TIME_METRIC_PASSES.get(metric)
    if pass_ is None:
        return rows, f"TFLOP/s is derived from time metrics only ({', '.join(TIME_METRIC_PASSES)})"
    if set(rows["suite"]) == {MASKED_SUITE}:
        return _masked_tflops(rows, pass_)
    cols = {
        "seq_q": _first_present(rows, _SEQ_Q_PARAMS),
        "seq_k": _first_present(rows, _SEQ_K_PARAMS),
        "head_dim": _first_present(rows, ("head_dim",)),
    }
    batch_col, heads_col = _first_present(rows, _BATCH_PARAMS), _first_present(rows, _HEADS_PARAMS)
    missing = [k for k, c in cols.items() if c is None]
    grid_rule = None
    if batch_col is None or heads_col is None:
        if set(rows["suite"]) == {"speed.SpeedSuite"} and not missing:
            grid_rule = _gpu_problem()
        if grid_rule is None:
            missing = ["batch", "heads", *missing]
    if missing:
        return rows, (
            "TFLOP/s needs the parameters " + ", ".join(missing) + " in the benchmark's params"
        )
    causal = rows["causal"] if "causal" in rows.columns else pd.Series(False, index=rows.index)

    def one(i: Any) -> float:
        value = rows.at[i, "value"]
        if not (isinstance(value, float) and math.isfinite(value) and value > 0):
            return math.nan
        seq_q, seq_k, head_dim = (int(rows.at[i, cols[k]]) for k in ("seq_q", "seq_k", "head_dim"))
        if grid_rule is not None:
            batch, heads, _ = grid_rule(seq_q, head_dim, 1)
        else:
            batch, heads = int(rows.at[i, batch_col]), int(rows.at[i, heads_col])
        flops = attention_flops(batch, heads, seq_q, seq_k, head_dim,
                                causal=_truthy(causal.at[i]), pass_=pass_)
        return tflops(value, flops)

    return rows.assign(tflops=[one(i) for i in rows.index]), None


def _masked_tflops(rows: pd.DataFrame, pass_: str) -> tuple[pd.DataFrame, str | None]:
    """TFLOP/s of MaskedSpeedSuite rows: FLOPs on the workload's attended pairs only
    (``workloads.MaskWorkload.attended_pairs``, H = 2048 // D)."""
    unknown = sorted(set(rows["mask"].dropna()) - set(workloads.MASK_WORKLOADS))
    if "head_dim" not in rows.columns or rows["head_dim"].isna().any() or unknown:
        return rows, f"TFLOP/s needs a known mask kind and head_dim (unknown: {unknown})"

    def one(value: float, mask: str, head_dim: Any) -> float:
        if not (isinstance(value, float) and math.isfinite(value) and value > 0):
            return math.nan
        pairs = workloads.MASK_WORKLOADS[mask].attended_pairs()
        d = int(head_dim)
        return tflops(value, attended_flops(pairs, workloads.heads_for(d), d, pass_))

    values = zip(rows["value"], rows["mask"], rows["head_dim"], strict=True)
    return rows.assign(tflops=[one(*v) for v in values]), None


def _gpu_problem() -> Any:
    """The GPU speed grid's ``(seq_len, head_dim, gqa) -> (batch, heads_q, heads_kv)``
    rule, from the suite itself (None when the benchmarks are not importable here)."""
    try:
        from benchmarks._attention import gpu_problem
    except ImportError:
        return None
    return gpu_problem


def _first_present(rows: pd.DataFrame, names: tuple[str, ...]) -> str | None:
    for name in names:
        if name in rows.columns and rows[name].notna().all():
            return name
    return None


def _truthy(value: Any) -> bool:
    # causal may be False/True or a string such as "bottom_right" (still causal)
    return value not in (False, None, "False", "false", 0, "none")
