"""Commit-vs-commit comparison of asv results and the verdict on each benchmark row: the
one comparison that both ``safeattn-gate`` and the dashboard's compare page use (no UI
code here).

Directions and must-be-zero come from :mod:`regress.metrics`, architecture limits
from :mod:`safeattn.gpu_limits`, thresholds from the policy file (``policy.toml``).

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
sidecars, ``safeattn_launches``, written by tools/run.py); a speed benchmark's group
row counts its rows that did. Then the verdict may be the tuning table's doing, not the code's.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pandas as pd

from regress.metrics import IMPL_PARAM, METRICS, OWN_IMPL
from regress.results import LoadedResults, format_param_key
from safeattn.gpu_limits import ARCHS, arch_name

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

DEFAULT_POLICY_PATH = Path(__file__).with_name("policy.toml")

VERDICTS: tuple[str, ...] = (
    "failure",
    "missing",
    "regression",
    "improvement",
    "unchanged",
    "new",
    "context",
    "not_comparable",
)
# Verdicts that make the gate exit 1.
BLOCKING_VERDICTS: frozenset[str] = frozenset({"failure", "missing", "regression"})
KINDS: tuple[str, ...] = ("speed", "memory", "resource", "accuracy", "safety")

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


# --------------------------------------------------------------------------- policy


@dataclass(frozen=True)
class KindPolicy:
    """Thresholds for one metric kind. ``max_ratio``: worse by more than this factor is a
    regression (1.05 = 5%). Speed only: ``alpha``, ``min_samples``,
    ``max_ratio_without_stats``, ``max_group_ratio``, ``min_group_rows``; deterministic
    kinds: ``min_abs_increase``."""

    max_ratio: float
    min_abs_increase: float = 0.0
    alpha: float = 0.01
    min_samples: int = 5
    max_ratio_without_stats: float = 1.10
    max_group_ratio: float = 1.03
    min_group_rows: int = 8


@dataclass(frozen=True)
class Policy:
    kinds: dict[str, KindPolicy]
    source: str  # the file it came from, for reports


def load_policy(path: str | Path | None = None) -> Policy:
    """The gate policy: the packaged ``policy.toml``, overlaid with ``path`` if given.

    A user file only needs the values it changes. Unknown sections or keys and values out
    of range raise ValueError naming them (a typo must not silently loosen the gate).
    """
    merged = _read_policy_file(DEFAULT_POLICY_PATH)
    source = str(DEFAULT_POLICY_PATH)
    if path is not None:
        for kind, values in _read_policy_file(Path(path)).items():
            merged.setdefault(kind, {}).update(values)
        source = str(path)
    kinds = {}
    for kind in KINDS:
        if kind not in merged or "max_ratio" not in merged[kind]:
            raise ValueError(f"policy {source}: section [{kind}] needs a max_ratio")
        kinds[kind] = _kind_policy(kind, merged[kind], source)
    return Policy(kinds=kinds, source=source)


def _read_policy_file(path: Path) -> dict[str, dict[str, Any]]:
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise ValueError(f"cannot read policy file {str(path)!r}: {exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"policy file {str(path)!r} is not valid TOML: {exc}") from exc
    unknown = sorted(set(data) - set(KINDS))
    if unknown:
        raise ValueError(
            f"policy file {str(path)!r}: unknown section(s) {unknown}; "
            f"known sections: {list(KINDS)}"
        )
    return data


def _kind_policy(kind: str, values: dict[str, Any], source: str) -> KindPolicy:
    known = {f.name for f in fields(KindPolicy)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(
            f"policy {source}: [{kind}] has unknown key(s) {unknown}; known: {sorted(known)}"
        )
    policy = KindPolicy(**values)
    checks = [
        (policy.max_ratio >= 1.0, "max_ratio must be >= 1.0"),
        (policy.max_ratio_without_stats >= 1.0, "max_ratio_without_stats must be >= 1.0"),
        (policy.max_group_ratio >= 1.0, "max_group_ratio must be >= 1.0"),
        (policy.min_group_rows >= 2, "min_group_rows must be >= 2"),
        (policy.min_abs_increase >= 0, "min_abs_increase must be >= 0"),
        (0.0 < policy.alpha < 1.0, "alpha must be in (0, 1)"),
        (policy.min_samples >= 2, "min_samples must be >= 2"),
    ]
    for ok, message in checks:
        if not ok:
            raise ValueError(f"policy {source}: [{kind}] {message} (got {values})")
    return policy


# ----------------------------------------------------------------------- statistics


def mann_whitney_u(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Two-sided Mann–Whitney U test: ``(U of x, p-value)``.

    Exact null distribution when there are no ties and the samples are small (both ≤ 20),
    otherwise the normal approximation with tie and continuity corrections — the same
    results as ``scipy.stats.mannwhitneyu(x, y, method="exact"|"asymptotic")``.
    """
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError(f"mann_whitney_u needs two non-empty samples (got {n1} and {n2})")
    ranks, tie_sizes = _ranks(list(x) + list(y))
    u1 = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    u_big = max(u1, n1 * n2 - u1)
    if not any(t > 1 for t in tie_sizes) and max(n1, n2) <= 20:
        counts = _u_counts(n1, n2)
        p = 2 * sum(counts[math.ceil(u_big - 1e-9):]) / math.comb(n1 + n2, n1)
    else:
        n = n1 + n2
        tie_term = sum(t**3 - t for t in tie_sizes) / (n * (n - 1))
        sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term))
        if sigma == 0:  # every value identical: no evidence of a difference
            return u1, 1.0
        z = (u_big - n1 * n2 / 2 - 0.5) / sigma
        p = math.erfc(z / math.sqrt(2))  # 2 * P(Z > z)
    return u1, min(1.0, p)


def _ranks(values: list[float]) -> tuple[list[float], list[int]]:
    """Average ranks (1-based) and the sizes of each group of tied values."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    tie_sizes = []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        tie_sizes.append(j - i + 1)
        i = j + 1
    return ranks, tie_sizes


def _u_counts(n1: int, n2: int) -> list[int]:
    """Number of arrangements of n1 x's and n2 y's giving each U = 0..n1*n2 (no ties).

    Recurrence on the largest value: it is an x (adds n2 to U) or a y (adds nothing).
    """
    # table[j] = counts for (i, j) at the current i
    table = [[1] for _ in range(n2 + 1)]  # i = 0: U is always 0
    for i in range(1, n1 + 1):
        new = [[1]]  # j = 0: U is always 0
        for j in range(1, n2 + 1):
            with_x = [0] * j + table[j]  # largest is an x: U += j
            with_y = new[j - 1]
            size = i * j + 1
            new.append([
                (with_x[u] if u < len(with_x) else 0) + (with_y[u] if u < len(with_y) else 0)
                for u in range(size)
            ])
        table = new
    return table[n2]


# --------------------------------------------------------------------------- commits


def resolve_commit(loaded: LoadedResults, ref: str, machine: str | None = None) -> str:
    """A full sha or unique prefix (≥ 4 hex digits) of a commit with results -> full sha.

    Raises ValueError for an unknown or ambiguous ref, listing what is there.
    """
    commits = loaded.commits
    if machine is not None:
        commits = commits[commits["machine"] == machine]
    known = list(dict.fromkeys(commits.sort_values("date", ascending=False)["commit"]))
    where = f" on machine {machine!r}" if machine is not None else ""
    text = ref.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{4,64}", text):
        raise ValueError(
            f"{ref!r} is not a commit sha or a prefix of one (4+ hex digits).\n"
            "HINT: pass `git rev-parse REF` (safeattn-gate resolves branch names itself)."
        )
    matches = [c for c in known if c.startswith(text)]
    if not matches:
        listing = ", ".join(c[:12] for c in known[:8]) or "none"
        raise ValueError(
            f"no results for commit {ref!r}{where}.\n"
            f"Commits with results{where} (newest first): {listing}"
        )
    if len(matches) > 1:
        raise ValueError(
            f"commit prefix {ref!r} is ambiguous{where}: "
            + ", ".join(c[:12] for c in matches)
        )
    return matches[0]


def parent_commit(loaded: LoadedResults, commit: str, machine: str) -> str | None:
    """The commit before ``commit`` in ``loaded.commits`` order on ``machine`` (None for the
    first one or an unknown commit)."""
    rows = loaded.commits[loaded.commits["machine"] == machine].sort_values("order")
    shas = list(rows["commit"])
    if commit not in shas:
        return None
    i = shas.index(commit)
    return shas[i - 1] if i > 0 else None


def machine_arch(info: dict[str, Any]) -> str | None:
    """The GPU architecture (``"sm90"``) a machine's results were measured on, from its
    ``machine.json`` or environment sidecars, or None when they don't say.

    Accepted keys: ``compute_capability`` / ``capability`` (``"9.0"``, ``[9, 0]``, ``90``)
    and ``gpu_arch`` / ``cuda_arch`` / ``arch`` (``"sm90"``, ``"sm_90"``). asv's own
    ``arch`` (``"x86_64"``) is the CPU and is ignored.
    """
    candidates: list[dict[str, Any]] = [info]
    for sidecar in (info.get("sidecars") or {}).values():
        if isinstance(sidecar, dict):
            candidates.append(sidecar)
            candidates.extend(v for v in sidecar.values() if isinstance(v, dict))
    for entry in candidates:
        for key in ("compute_capability", "capability", "gpu_arch", "cuda_arch", "arch"):
            arch = _arch_from(entry.get(key))
            if arch is not None:
                return arch
    return None


def _arch_from(value: Any) -> str | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
        isinstance(v, int) for v in value
    ):
        return arch_name((value[0], value[1]))
    if isinstance(value, int) and not isinstance(value, bool):
        return arch_name(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if m := re.fullmatch(r"sm_?(\d{2,3})a?", text):
            return arch_name(int(m.group(1)))
        if m := re.fullmatch(r"(\d+)\.(\d)", text):
            return arch_name((int(m.group(1)), int(m.group(2))))
        if re.fullmatch(r"\d{2,3}", text):
            return arch_name(int(text))
    return None


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
        row[_CONFIG_CHANGE] = None
        _note_config_change(row, base_launches, head_launches)
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
        geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
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
        changed = sum(bool(r.get(_CONFIG_CHANGE)) for r in members)
        known = any(r.get(_CONFIG_CHANGE) is not None for r in members)
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
            _CONFIG_CHANGE: change,
        })
    return out


# ---------------------------------------------------------------- launched configs

_CONFIG_CHANGE = "config_change"  # see COMPARE_COLUMNS
_FLAGGED = frozenset({"failure", "regression", "improvement"})


def launched_configs(info: dict[str, Any], commit: str) -> dict[tuple[str, str], dict]:
    """``{(suite, param_key): {kernel: config}}`` of one commit on one machine: the
    ``safeattn_launches`` of its ``versions-<sha>.json`` sidecar (``info``: the machine's
    entry of ``LoadedResults.machines``); empty when not recorded."""
    sidecar = (info.get("sidecars") or {}).get(f"versions-{commit}.json")
    records = sidecar.get("safeattn_launches") if isinstance(sidecar, dict) else None
    out: dict[tuple[str, str], dict] = {}
    for record in records if isinstance(records, list) else []:
        try:
            key = (str(record["suite"]), format_param_key(record["params"]))
            out[key] = {str(k): str(v) for k, v in record["configs"].items()}
        except (KeyError, TypeError, AttributeError):
            continue  # a malformed record says nothing
    return out


def _kernels_measured(row: dict[str, Any]) -> tuple[str, ...] | None:
    """The kernels whose config a row's figure depends on (None: all of them)."""
    if "kernel" in row["params"]:  # LiveResourcesSuite: one kernel per row
        return (str(row["params"]["kernel"]),)
    if row["metric"] == "forward_ms":
        return ("forward",)
    if row["metric"] == "backward_ms":
        return ("bwd_preprocess", "bwd_dkdv", "bwd_dq")
    return None


def _note_config_change(row: dict[str, Any], base: dict, head: dict) -> None:
    """Record in ``row`` (and, if it is flagged, in its reason) which of the kernels behind a
    safeattn row ran with another config on head than on base."""
    if row["peer"]:
        return
    key = (row["suite"], format_param_key(row["params"]))
    if key not in base or key not in head:
        return
    b, h = base[key], head[key]
    kernels = _kernels_measured(row) or sorted(set(b) | set(h))
    changed = [f"{k} {b.get(k, '-')} → {h.get(k, '-')}" for k in kernels if b.get(k) != h.get(k)]
    row[_CONFIG_CHANGE] = ", ".join(changed)
    if changed and row["verdict"] in _FLAGGED:
        row["reason"] += f"; config changed: {row[_CONFIG_CHANGE]}"


def _kind_of(benchmark: str, metric: str | None) -> str | None:
    if metric in METRICS:
        return METRICS[metric].kind
    method = benchmark.rsplit(".", 1)[-1]
    if method.startswith("time_"):
        return "speed"
    if method.startswith(("mem_", "peakmem_")):
        return "memory"
    return None


def _ratio(base: float, head: float, better: str) -> float:
    """How many times worse head is than base (> 1 = worse)."""
    worse, good = (head, base) if better == "lower" else (base, head)
    if worse == good:
        return 1.0
    if good == 0:
        return math.inf if worse > 0 else 0.0
    return worse / good


def _arch_limit(
    row: dict[str, Any], machine_arch_name: str | None
) -> tuple[str | None, int | None]:
    """(arch, shared-memory opt-in limit) for a shared_bytes row: the row's own ``arch``
    parameter (static audit) or else the machine's GPU (live rows)."""
    arch = _arch_from(row["params"].get("arch")) if "arch" in row["params"] else None
    arch = arch or machine_arch_name
    limits = ARCHS.get(arch) if arch else None
    return arch, (limits.smem_optin_bytes if limits else None)


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
    kind = _kind_of(any_row["benchmark"], metric)
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
        result["ratio"] = _ratio(b["value"], h["value"], better)

    # Absolute rules on head first: they hold whatever the base was.
    if head_ok:
        value = h["value"]
        if metric is not None and metric.must_be_zero and value > 0:
            return "failure", f"{metric.label} is {value:g}: must be 0 for safeattn"
        if result["metric"] == "shared_bytes":
            row_arch, limit = _arch_limit(h, arch)
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


# ---------------------------------------------------------------- sensitivity

SENSITIVITY_FACTORS: tuple[float, ...] = (1.0, 1.02, 1.05, 1.08, 1.10, 1.15, 1.20, 1.30, 1.50)
# What plant_nonfinite writes: one trial in a hundred non-finite (any value above 0 must
# fail for safeattn; a small one shows the rule has no hidden tolerance).
PLANTED_NONFINITE_RATE = 0.01


def own_speed_rows(table: pd.DataFrame, machine: str, commit: str) -> pd.Series:
    """Boolean mask over ``table`` (``LoadedResults.table``): the rows of ``commit`` on
    ``machine`` that are safeattn's own lower-is-better speed rows (not a peer's: a row
    without an ``impl`` parameter counts as safeattn's, as in :func:`compare`)."""
    kinds = [_kind_of(b, m) for b, m in zip(table["benchmark"], table["metric"], strict=True)]
    speed = pd.Series(kinds, index=table.index).eq("speed") & table["better"].eq("lower")
    if IMPL_PARAM in table.columns:
        impl = table[IMPL_PARAM]
        own = impl.isna() | impl.eq(OWN_IMPL)
    else:
        own = pd.Series(True, index=table.index)
    return (table["machine"] == machine) & (table["commit"] == commit) & speed & own


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
    impl = table[IMPL_PARAM] if IMPL_PARAM in table.columns else pd.Series(None, table.index)
    candidates = table[
        (table["machine"] == machine)
        & (table["commit"] == commit)
        & table["metric"].eq("nonfinite_rate")
        & (impl.isna() | impl.eq(OWN_IMPL))
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
    :func:`group_rows`), ``groups_flagged`` and ``blocks`` (whether the gate would exit 1
    on speed). At factor 1.0 ``flagged`` and ``groups_flagged`` are the A/A false alarms.
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
    own_speed = result[(result["kind"] == "speed") & ~result["peer"].astype(bool)]
    is_group = own_speed["param_key"] == GROUP_PARAM_KEY
    compared = own_speed[~is_group & own_speed["ratio"].notna()]
    groups = own_speed[is_group]
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
