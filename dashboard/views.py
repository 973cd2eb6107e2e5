"""What each dashboard page shows, as plain functions of the loaded asv results (no UI code).

The pages only lay out what these functions return, so the tests check the numbers here
and the gate's logic stays in one place: every verdict comes from
:func:`safeattn.regress.compare.compare`, metric directions and labels from
:mod:`safeattn.regress.metrics`, architecture limits from :mod:`safeattn.gpu_limits`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd

from safeattn.gpu_limits import ARCHS
from safeattn.regress import workloads
from safeattn.regress.compare import (
    VERDICTS,
    Policy,
    compare,
    machine_arch,
    parent_commit,
)
from safeattn.regress.metrics import (
    IMPL_PARAM,
    METRICS,
    OWN_IMPL,
    attended_flops,
    attention_flops,
    tflops,
)
from safeattn.regress.results import LoadedResults, format_param_key

# The app's pages: URL path (and file app_pages/<name>.py) -> navigation title. The
# default page is served at the app's root URL (Streamlit ignores its url_path).
DEFAULT_PAGE = "overview"
PAGES: dict[str, str] = {
    "overview": "Overview",
    "history": "History",
    "compare": "Compare",
    "peers": "Peers",
    "resources": "Resources",
    "numerics": "Numerics",
}


def page_path(name: str) -> str:
    """The URL path of a page: ``""`` for the default page, else its name."""
    return "" if name == DEFAULT_PAGE else name


# Time metrics and the pass whose FLOPs they time (for TFLOP/s).
TIME_METRIC_PASSES: dict[str, str] = {
    "forward_ms": "forward",
    "backward_ms": "backward",
    "fwd_bwd_ms": "fwd_bwd",
}
# Parameters the history page offers as filters, in this order (when the data has them).
FILTER_PARAMS: tuple[str, ...] = (
    "dtype", "head_dim", "seq_len", "causal", "mask", "padding", IMPL_PARAM,
)
# The masked-attention speed suite: its rows have a mask kind, not a shape (TFLOP/s on
# attended pairs, safeattn.regress.workloads).
MASKED_SUITE = "speed.MaskedSpeedSuite"
RESOURCE_METRICS: tuple[str, ...] = ("shared_bytes", "registers", "spills")
SAFETY_METRICS: tuple[str, ...] = tuple(n for n, m in METRICS.items() if m.kind == "safety")
# Parameter names (first found wins) that give the FLOP count's batch and head count.
_BATCH_PARAMS = ("batch", "batch_size", "B")
_HEADS_PARAMS = ("heads", "num_heads", "n_heads", "H")
_SEQ_Q_PARAMS = ("seq_q", "seq_len_q", "seq_len")
_SEQ_K_PARAMS = ("seq_k", "seq_len_k", "seq_len")


def short(sha: str | None) -> str:
    """A full sha -> its first 8 hex digits (asv's own file-name prefix)."""
    return sha[:8] if sha else "—"


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


# --------------------------------------------------------------------------- overview


@dataclass
class MachineHealth:
    """The overview of one machine: its newest commit judged against the one before.

    ``comparison``: :func:`compare` rows (empty when there is no parent commit).
    ``counts``: verdict -> number of rows, every verdict of ``VERDICTS`` present.
    ``safety``: safeattn and peer rows of the must-be-zero rates at head, one row per
    (metric, param_key) with ``value``. ``error``: why the comparison could not be made.
    """

    machine: str
    title: str
    head: str
    head_date: pd.Timestamp
    parent: str | None
    comparison: pd.DataFrame
    counts: dict[str, int]
    safety: pd.DataFrame
    error: str | None = None

    def rows(self, verdict: str) -> pd.DataFrame:
        """The comparison rows with one verdict, worst ratio first."""
        rows = self.comparison[self.comparison["verdict"] == verdict]
        return rows.sort_values("ratio", ascending=verdict == "improvement", na_position="last")


def overview(loaded: LoadedResults, policy: Policy) -> list[MachineHealth]:
    """Per machine: the newest commit against its parent, with the gate's verdicts."""
    out = []
    for machine in machines(loaded):
        shas = commits_newest_first(loaded, machine)
        head = shas[0]
        parent = parent_commit(loaded, head, machine)
        comparison = pd.DataFrame(columns=["verdict", "ratio"])
        error = None
        if parent is not None:
            try:
                comparison = compare(loaded, parent, head, machine, policy)
            except Exception as exc:  # one machine's failure must not hide the others
                error = f"comparison failed: {exc!r}"
        counts = {v: int((comparison["verdict"] == v).sum()) for v in VERDICTS}
        head_rows = _rows(loaded, machine, head)
        out.append(
            MachineHealth(
                machine=machine,
                title=machine_title(loaded, machine),
                head=head,
                head_date=head_rows["date"].iloc[0],
                parent=parent,
                comparison=comparison,
                counts=counts,
                safety=head_rows[head_rows["metric"].isin(SAFETY_METRICS)],
                error=error,
            )
        )
    return out


def _rows(loaded: LoadedResults, machine: str, commit: str) -> pd.DataFrame:
    t = loaded.table
    return t[(t["machine"] == machine) & (t["commit"] == commit)]


def nonfinite_summary(safety: pd.DataFrame) -> pd.DataFrame:
    """Safety rows -> per (metric, impl): rows measured, rows above 0, the worst rate.

    safeattn first, then peers; ``impl`` is ``"—"`` for benchmarks without an impl.
    """
    if safety.empty:
        return pd.DataFrame(columns=["metric", "impl", "rows", "above_zero", "worst"])
    impl = safety["params"].map(lambda p: p.get(IMPL_PARAM, "—"))
    frame = safety.assign(impl=impl, above=safety["value"] > 0)
    summary = (
        frame.groupby(["metric", "impl"], sort=False)
        .agg(rows=("value", "size"), above_zero=("above", "sum"), worst=("value", "max"))
        .reset_index()
    )
    summary["own"] = summary["impl"] == OWN_IMPL
    return summary.sort_values(["own", "metric", "impl"], ascending=[False, True, True]).drop(
        columns="own"
    )


# ---------------------------------------------------------------------------- history


def benchmarks(loaded: LoadedResults) -> list[str]:
    """Benchmark names, metrics of the registry first (in registry order), then the rest."""
    names = set(loaded.table["benchmark"])
    order = {m: i for i, m in enumerate(METRICS)}
    metric_of = dict(zip(loaded.table["benchmark"], loaded.table["metric"], strict=False))
    return sorted(names, key=lambda b: (order.get(metric_of.get(b), len(order)), b))


def benchmark_labels(loaded: LoadedResults) -> dict[str, str]:
    """Benchmark name -> its metric label, in :func:`benchmarks` order."""
    metric_of = dict(zip(loaded.table["benchmark"], loaded.table["metric"], strict=False))
    return {b: metric_label(metric_of[b], b) for b in benchmarks(loaded)}


def filter_options(rows: pd.DataFrame, params: tuple[str, ...] = FILTER_PARAMS) -> dict:
    """Parameter -> the values present in ``rows`` (sorted), for each of ``params`` present."""
    options = {}
    for name in params:
        if name in rows.columns:
            values = [v for v in rows[name].dropna().unique()]
            if values:
                options[name] = sorted(values, key=_sort_key)
    return options


def _sort_key(value: Any) -> tuple:
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def apply_filters(rows: pd.DataFrame, filters: dict[str, list]) -> pd.DataFrame:
    """Keep rows whose parameter is in the chosen values (an empty choice keeps all)."""
    for name, chosen in filters.items():
        if chosen and name in rows.columns:
            rows = rows[rows[name].isin(chosen)]
    return rows


def history(
    loaded: LoadedResults,
    benchmark: str,
    machine_names: list[str],
    filters: dict[str, list],
    last_n: int | None = None,
) -> pd.DataFrame:
    """One benchmark over commits: one row per (machine, commit, parameter combination).

    Columns: machine, commit, short, date, order, param_key, series (machine + param_key,
    one chart line each), value, ci_low, ci_high, status, unit, and the parameter columns.
    ``last_n`` keeps each machine's newest ``last_n`` commits.
    """
    t = loaded.table
    rows = t[(t["benchmark"] == benchmark) & t["machine"].isin(machine_names)]
    rows = apply_filters(rows, filters)
    rows = rows.merge(loaded.commits[["machine", "commit", "order"]], on=["machine", "commit"],
                      how="left")
    if last_n is not None:
        newest = rows.groupby("machine")["order"].transform("max")
        rows = rows[rows["order"] > newest - last_n]
    rows = rows.assign(short=rows["commit"].str[:8])
    rows["series"] = rows["machine"] + " · " + rows["param_key"]
    return rows.sort_values(["machine", "order", "param_key"]).reset_index(drop=True)


def add_tflops(rows: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    """Add a ``tflops`` column to time rows (DESIGN.md's FLOP count over the measured time).

    Batch and head count come from ``batch``/``heads`` parameters when the benchmark has
    them, else, for the GPU speed grid (``speed.SpeedSuite``: seq_len and head_dim
    parameters only), from the suite's own shape rule ``benchmarks._common.gpu_problem``.
    ``speed.MaskedSpeedSuite`` rows count the FLOPs of their workload's attended pairs
    only (``safeattn.regress.workloads``). Returns ``(rows, None)``, or ``(rows
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


def shape_label(params: dict[str, Any]) -> str:
    """A peer row's shape for people: its parameters without ``impl``, a mask kind and a
    padding by their workload labels: ``"dtype=bfloat16 head_dim=128 mask=left padding
    0–60 % + causal, ..."``."""
    labels = {
        "mask": {k: w.label for k, w in workloads.MASK_WORKLOADS.items()},
        "padding": workloads.PADDING_LABELS,
    }
    shown = {
        name: labels.get(name, {}).get(value, value)
        for name, value in params.items()
        if name != IMPL_PARAM
    }
    return format_param_key(shown)


def _gpu_problem() -> Any:
    """The GPU speed grid's ``(seq_len, head_dim, gqa) -> (batch, heads_q, heads_kv)``
    rule, from the suite itself (None when the benchmarks are not importable here)."""
    try:
        from benchmarks._common import gpu_problem
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


def history_verdicts(
    loaded: LoadedResults, rows: pd.DataFrame, policy: Policy
) -> pd.DataFrame:
    """The gate's verdict of every commit in ``rows`` against its parent, per series.

    Uses :func:`compare` on consecutive commits of each machine, restricted to the
    benchmark in ``rows`` (so it costs one small comparison per commit shown). Returns
    machine, commit, param_key, series, verdict, ratio, reason for every pair.
    """
    if rows.empty:
        return pd.DataFrame(columns=["machine", "commit", "param_key", "series", "verdict"])
    benchmark = rows["benchmark"].iloc[0]
    t = loaded.table
    # Only this benchmark's rows: compare() then judges just what the chart shows.
    narrow = replace(loaded, table=t[t["benchmark"] == benchmark])
    out = []
    for machine, shown in rows.groupby("machine"):
        shas = list(dict.fromkeys(shown.sort_values("order")["commit"]))
        for head in shas:
            parent = parent_commit(loaded, head, machine)
            if parent is None:
                continue
            c = compare(narrow, parent, head, machine, policy)
            c = c[c["param_key"].isin(set(shown["param_key"]))]
            out.append(c.assign(commit=head, parent=parent))
    if not out:
        return pd.DataFrame(columns=["machine", "commit", "param_key", "series", "verdict"])
    verdicts = pd.concat(out, ignore_index=True)
    verdicts["series"] = verdicts["machine"] + " · " + verdicts["param_key"]
    return verdicts[["machine", "commit", "parent", "param_key", "series", "verdict", "ratio",
                     "reason"]]


# ---------------------------------------------------------------------------- compare


def verdict_counts(comparison: pd.DataFrame) -> dict[str, int]:
    """Verdict -> number of rows, in :data:`VERDICTS` order (zeros included)."""
    return {v: int((comparison["verdict"] == v).sum()) for v in VERDICTS}


# ------------------------------------------------------------------------------ peers


def peer_ratios(loaded: LoadedResults, machine: str, commit: str) -> pd.DataFrame:
    """safeattn against each peer on one machine and commit, per shape.

    One row per (benchmark, shape, peer) where both safeattn and the peer have a value:
    ``ratio`` = how many times worse safeattn is than the peer in the metric's own
    direction (> 1 = safeattn worse; for a time, safeattn time ÷ peer time), and
    ``speedup`` = 1 / ratio. ``shape`` is the param_key without the impl parameter,
    ``label`` the same for people (:func:`shape_label`: mask kinds and paddings described).
    Safety rates (must be 0) are left to :func:`numerics`.
    """
    rows = _rows(loaded, machine, commit)
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
    own = rows[rows["impl"] == OWN_IMPL][["benchmark", "shape", "value"]]
    peers = rows[rows["impl"] != OWN_IMPL]
    pairs = peers.merge(own, on=["benchmark", "shape"], suffixes=("_peer", "_own"))
    if pairs.empty:
        return pd.DataFrame(columns=columns)
    lower = pairs["better"] == "lower"
    ratio = pd.Series(
        [_worse_ratio(o, p, lw) for o, p, lw in
         zip(pairs["value_own"], pairs["value_peer"], lower, strict=True)],
        index=pairs.index,
    )
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
        "ratio": ratio,
        "speedup": 1.0 / ratio,
    })
    return out.sort_values(["benchmark", "peer", "shape"]).reset_index(drop=True)


def _worse_ratio(own: float, peer: float, lower_is_better: bool) -> float:
    worse, good = (own, peer) if lower_is_better else (peer, own)
    if worse == good:
        return 1.0
    if good == 0:
        return math.inf
    return worse / good


# -------------------------------------------------------------------------- resources


def resources(loaded: LoadedResults, machine: str, commit: str) -> pd.DataFrame:
    """Shared memory, registers and spills per kernel and architecture, against the limit.

    The architecture is the row's ``arch`` parameter (static audit, cross-compiled) or
    else the machine's own GPU (live). ``limit``: the architecture's shared-memory opt-in
    maximum, its registers-per-thread maximum, or 0 for spills (any spill is worth
    seeing); ``used`` = value ÷ limit; ``over`` = value > limit; ``config`` = the row's
    parameters without the architecture.
    """
    rows = _rows(loaded, machine, commit)
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


# --------------------------------------------------------------------------- numerics


def family_names() -> list[str] | None:
    """The adversarial family names (keys of ``safeattn.families.FAMILIES``), in its order.

    Imported on demand: that module builds test inputs with torch, which only the numerics
    page needs. None when it cannot be imported (e.g. a dashboard-only install).
    """
    try:
        from safeattn.families import FAMILIES
    except ImportError:
        return None
    return list(FAMILIES)


def numerics(
    loaded: LoadedResults, machine: str, commit: str, family_order: list[str] | None = None
) -> pd.DataFrame:
    """Non-finite and wrong-result rates per adversarial family × dtype × implementation.

    One row per safety-metric result: metric, label, family, dtype, impl, value, status,
    ``known_family`` (the family is one of ``family_order``, the names of
    ``safeattn.families.FAMILIES``). Rows are ordered by ``family_order``.
    """
    rows = _rows(loaded, machine, commit)
    rows = rows[rows["metric"].isin(SAFETY_METRICS)]
    columns = ["metric", "label", "family", "dtype", "impl", "value", "status", "known_family"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    order = {f: i for i, f in enumerate(family_order or [])}
    out = pd.DataFrame({
        "metric": rows["metric"],
        "label": rows["metric"].map(lambda m: METRICS[m].label),
        "family": rows["params"].map(lambda p: str(p.get("family", "—"))),
        "dtype": rows["params"].map(lambda p: str(p.get("dtype", "—"))),
        "impl": rows["params"].map(lambda p: str(p.get(IMPL_PARAM, OWN_IMPL))),
        "value": rows["value"],
        "status": rows["status"],
    })
    out["known_family"] = out["family"].isin(order) if order else True
    out["_order"] = out["family"].map(lambda f: order.get(f, len(order)))
    out["_own"] = out["impl"] != OWN_IMPL
    return (
        out.sort_values(["metric", "_order", "family", "dtype", "_own", "impl"])
        .drop(columns=["_order", "_own"])
        .reset_index(drop=True)
    )
