"""Which kernel configs each commit launched, and the note a compared row gets when they
changed between base and head.

tools/run.py records, per commit, the configs safeattn's kernels ran with in each asv
parameter combination (``safeattn_launches`` in the ``versions-<sha>.json`` sidecar). A
flagged safeattn row (failure, regression, improvement) whose kernels ran with other configs
on head says so at the end of its reason (``config changed: forward M128-N64-w4-s3 →
M64-N64-w4-s3``): then the verdict may be the tuning table's doing, not the code's.
"""

from __future__ import annotations

from typing import Any

from regress.asv_files import format_param_key

# The compare() column: "forward A → B", "" when known and the same, None when not recorded.
CONFIG_CHANGE = "config_change"
_FLAGGED = frozenset({"failure", "regression", "improvement"})


def _key(suite: str, params: dict[str, Any]) -> tuple[str, str]:
    """(suite, parameters in name order): the records' params come sorted by name
    (benchmarks/_launches.py writes them with ``sort_keys``), a row's in the suite's order."""
    return str(suite), format_param_key(dict(sorted(params.items())))


def launched_configs(info: dict[str, Any], commit: str) -> dict[tuple[str, str], dict]:
    """``{(suite, param_key in name order): {kernel: config}}`` of one commit on one machine:
    the ``safeattn_launches`` of its ``versions-<sha>.json`` sidecar (``info``: the machine's
    entry of ``LoadedResults.machines``); empty when not recorded."""
    sidecar = (info.get("sidecars") or {}).get(f"versions-{commit}.json")
    records = sidecar.get("safeattn_launches") if isinstance(sidecar, dict) else None
    out: dict[tuple[str, str], dict] = {}
    for record in records if isinstance(records, list) else []:
        try:
            key = _key(record["suite"], record["params"])
            out[key] = {str(k): str(v) for k, v in record["configs"].items()}
        except (KeyError, TypeError, AttributeError):
            continue  # a malformed record says nothing
    return out


def _kernels_measured(row: dict[str, Any], launched: list[str]) -> list[str]:
    """The kernels, of those ``launched`` on base or head, whose config a row's figure depends
    on. A backward's are every ``bwd_*`` one: its kernels vary (the D=256 Hopper dK/dV runs as
    two, bwd_dv and bwd_dk)."""
    if "kernel" in row["params"]:  # LiveResourcesSuite: one kernel per row
        return [str(row["params"]["kernel"])]
    if row["metric"] == "forward_ms":
        return ["forward"]
    if row["metric"] == "backward_ms":
        return [k for k in launched if k.startswith("bwd_")]
    return launched


def note_config_change(row: dict[str, Any], base: dict, head: dict) -> None:
    """Record in ``row`` (and, if it is flagged, in its reason) which of the kernels behind a
    safeattn row ran with another config on head than on base."""
    if row["peer"]:
        return
    key = _key(row["suite"], row["params"])
    if key not in base or key not in head:
        return
    b, h = base[key], head[key]
    kernels = _kernels_measured(row, sorted(set(b) | set(h)))
    changed = [f"{k} {b.get(k, '-')} → {h.get(k, '-')}" for k in kernels if b.get(k) != h.get(k)]
    row[CONFIG_CHANGE] = ", ".join(changed)
    if changed and row["verdict"] in _FLAGGED:
        row["reason"] += f"; config changed: {row[CONFIG_CHANGE]}"
