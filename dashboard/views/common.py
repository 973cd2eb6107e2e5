"""What every dashboard page shares: short hashes, tables and values as people read them
(never None or nan), metric labels, the machines and commits of the loaded results, and
the gate's verdicts counted and ranked."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from pandas.io.formats.style import Styler

from regress.gpu_arch import machine_arch
from regress.metrics import METRICS
from regress.policy import VERDICTS
from regress.results import LoadedResults

# Time metrics and the pass whose FLOPs they time (for TFLOP/s).
TIME_METRIC_PASSES: dict[str, str] = {
    "forward_ms": "forward",
    "backward_ms": "backward",
    "fwd_bwd_ms": "fwd_bwd",
}
SAFETY_METRICS: tuple[str, ...] = tuple(n for n, m in METRICS.items() if m.kind == "safety")


def short(sha: str | None) -> str:
    """A full sha -> its first 8 hex digits (asv's own file-name prefix)."""
    return sha[:8] if sha else "—"


# What a person reads never says None or nan: a number that is not there was not measured.
NOT_MEASURED = "not measured"


def readable(frame: pd.DataFrame, formats: dict[str, str] | None = None) -> Styler:
    """``frame`` styled for people: a missing value reads ``"not measured"`` (never
    None/nan; pages also pass it as ``st.dataframe``'s placeholder, which the browser
    uses for empty cells), floats with 4 significant digits unless ``formats`` (column ->
    format string) says otherwise. The data underneath stays numeric (sortable)."""
    formats = dict(formats or {})
    for column in frame.columns:
        if column not in formats and pd.api.types.is_float_dtype(frame[column]):
            formats[column] = "{:.4g}"
    return frame.style.format(formats, na_rep=NOT_MEASURED)


def shown_text(value: Any, fmt: str = "{:.4g}") -> str:
    """One value as a person reads it: ``"not measured"`` for None/nan."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return NOT_MEASURED
    return fmt.format(value) if isinstance(value, float) else str(value)


def metric_label(metric: str | None, benchmark: str) -> str:
    """Human label of a benchmark's metric: ``"forward time [ms] (lower is better)"``."""
    m = METRICS.get(metric) if metric else None
    if m is None:
        return benchmark.rsplit(".", 1)[-1]
    return f"{m.label} [{m.unit}] ({m.better} is better)"


def machines(loaded: LoadedResults) -> list[str]:
    """Machine names that have results, sorted."""
    return sorted(set(loaded.table["machine"]))


def machine_title(loaded: LoadedResults, machine: str) -> str:
    """``"h200-1 (sm90)"``: the machine name and, when its files say, its GPU architecture."""
    arch = machine_arch(loaded.machines.get(machine, {}))
    return f"{machine} ({arch})" if arch else machine


def commits_newest_first(loaded: LoadedResults, machine: str) -> list[str]:
    """Full shas with results on ``machine``, newest (highest ``order``) first."""
    rows = loaded.commits[loaded.commits["machine"] == machine]
    return list(rows.sort_values("order", ascending=False)["commit"])


def commit_rows(loaded: LoadedResults, machine: str, commit: str) -> pd.DataFrame:
    """The loaded rows of one machine and commit (every benchmark, every status)."""
    t = loaded.table
    return t[(t["machine"] == machine) & (t["commit"] == commit)]


def when_text(date: pd.Series) -> pd.Series:
    """Dates as people read them on hover: ``"2026-11-25 14:03 UTC"``, or "not measured"."""
    return date.map(lambda d: f"{d:%Y-%m-%d %H:%M} UTC" if pd.notna(d) else NOT_MEASURED)


# A commit the gate did not judge (no comparison covered it).
NOT_JUDGED = "not compared"


def worst_verdict(verdicts: Any) -> str | None:
    """The most severe of ``verdicts`` in :data:`VERDICTS` order, ``context`` ignored."""
    present = set(verdicts)
    return next((v for v in VERDICTS if v in present and v != "context"), None)


def verdict_counts(comparison: pd.DataFrame) -> dict[str, int]:
    """Verdict -> number of rows, in :data:`VERDICTS` order (zeros included)."""
    return {v: int((comparison["verdict"] == v).sum()) for v in VERDICTS}
