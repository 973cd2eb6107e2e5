"""The resources page: shared memory, registers and spills per kernel and architecture,
against that architecture's limit (:mod:`safeattn.gpu_limits`)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from dashboard.views.common import commit_rows
from regress.asv_files import format_param_key
from regress.gpu_arch import machine_arch
from regress.metrics import METRICS
from regress.results import LoadedResults
from safeattn.gpu_limits import ARCHS

RESOURCE_METRICS: tuple[str, ...] = ("shared_bytes", "registers", "spills")


def resources(loaded: LoadedResults, machine: str, commit: str) -> pd.DataFrame:
    """Shared memory, registers and spills per kernel and architecture, against the limit.

    The architecture is the row's ``arch`` parameter (static audit, cross-compiled) or
    else the machine's own GPU (live). ``limit``: the architecture's shared-memory opt-in
    maximum, its registers-per-thread maximum, or 0 for spills (any spill is worth
    seeing); ``used`` = value ÷ limit; ``over`` = value > limit; ``config`` = the row's
    parameters without the architecture.
    """
    rows = commit_rows(loaded, machine, commit)
    rows = rows[rows["metric"].isin(RESOURCE_METRICS)]
    columns = ["metric", "label", "kernel", "arch", "source", "config", "param_key", "value",
               "limit", "used", "over", "status"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    own_arch = machine_arch(loaded.machines.get(machine, {}))
    records = []
    for r in rows.to_dict("records"):
        params = r["params"]
        static = "arch" in params
        arch = _arch_text(params.get("arch")) if static else own_arch
        limits = ARCHS.get(arch) if arch else None
        if r["metric"] == "shared_bytes":
            limit = limits.smem_optin_bytes if limits else math.nan
        elif r["metric"] == "registers":
            limit = limits.max_regs_per_thread if limits else math.nan
        else:
            limit = 0.0
        value = r["value"]
        records.append({
            "metric": r["metric"],
            "label": METRICS[r["metric"]].label,
            "kernel": params.get("kernel", r["benchmark"].rsplit(".", 1)[-1]),
            "arch": arch or "unknown",
            "source": "static" if static else "live",
            # what tells the bars of one architecture apart (kernel, dtype, head_dim, ...)
            "config": format_param_key({k: v for k, v in params.items() if k != "arch"}),
            "param_key": r["param_key"],
            "value": value,
            "limit": limit,
            "used": value / limit if limit else math.nan,
            "over": bool(value > limit) if not math.isnan(limit) else False,
            "status": r["status"],
        })
    return pd.DataFrame.from_records(records, columns=columns)


def _arch_text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value).lower().replace("sm_", "sm")
    return text if text.startswith("sm") else f"sm{text}"
