"""asv ``results/`` directory -> one tidy pandas table (no UI code: the gate and the
dashboard both import this).

asv 0.6 writes, under the results directory:

- ``benchmarks.json``: per benchmark its ``param_names``, ``params``, ``type`` and ``unit``;
- ``<machine>/machine.json``: what ``asv machine`` recorded;
- ``<machine>/<commit[:8]>-<env_name>.json``: one commit on one environment. Its
  ``results`` map a benchmark name to a row whose fields are named by ``result_columns``
  (``result, params, version, started_at, duration, stats_ci_99_a, stats_ci_99_b,
  stats_q_25, stats_q_75, stats_number, stats_repeat, samples, profile``); trailing
  fields that are all ``None`` are dropped. ``result`` holds one value per combination of
  ``params`` (their Cartesian product, first parameter slowest): ``null`` when the
  benchmark failed, ``NaN`` when it was skipped (asv cannot tell a skipped combination
  from a benchmark that returned NaN). ``date`` is the commit date in milliseconds.

Any other ``*.json`` under a machine directory is an environment sidecar (e.g. the GPU the
suite ran on) and is merged into :attr:`LoadedResults.machines` under ``"sidecars"``.

A corrupt, partial or unreadable file never stops the load: it is reported in
:attr:`LoadedResults.problems` as ``"<path relative to the results dir>: why"`` and the
rest still loads; the gate fails closed on problems that touch the commits it compares.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from regress.metrics import metric_for

# The columns of LoadedResults.table that every load has (parameter columns come after).
BASE_COLUMNS: tuple[str, ...] = (
    "machine",
    "commit",
    "date",
    "benchmark",
    "suite",
    "metric",
    "unit",
    "better",
    "params",
    "param_key",
    "value",
    "ci_low",
    "ci_high",
    "samples",
    "status",
    "env_name",
)
COMMIT_COLUMNS: tuple[str, ...] = ("machine", "commit", "date", "order")

# asv names a result file <first 8 hex digits of the commit>-<environment name>.json.
_RESULT_FILE = re.compile(r"^[0-9a-f]{8}-.+\.json$")
_ASV_RESULTS_API_VERSION = 2


@dataclass
class LoadedResults:
    """Everything under one asv results directory.

    ``table``: one row per (machine, commit, env, benchmark, parameter combination), with
    the columns of :data:`BASE_COLUMNS` followed by one column per parameter name seen.
    ``machines``: machine name -> ``machine.json`` contents, plus ``"sidecars"``
    (file name -> contents of any other JSON in that machine's directory).
    ``commits``: per (machine, commit) its ``date`` (UTC) and ``order`` (0 = oldest).
    ``problems``: ``"path: why"`` for each corrupt/partial/unreadable file or row.
    """

    table: pd.DataFrame
    machines: dict[str, dict] = field(default_factory=dict)
    commits: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=COMMIT_COLUMNS))
    problems: list[str] = field(default_factory=list)

    @property
    def param_names(self) -> list[str]:
        """The parameter columns of ``table``, in the order first seen."""
        return [c for c in self.table.columns if c not in BASE_COLUMNS]


def results_mtime(results_dir: str | Path) -> float:
    """Newest modification time of anything under ``results_dir`` (0.0 if it is absent).

    A cheap cache key: any asv run adds or rewrites a file there.
    """
    root = Path(results_dir)
    if not root.exists():
        return 0.0
    newest = root.stat().st_mtime
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            try:
                newest = max(newest, os.stat(os.path.join(dirpath, name)).st_mtime)
            except OSError:  # removed while we walked: the next call sees the new state
                continue
    return newest


def load_results(results_dir: str | Path) -> LoadedResults:
    """Read every asv result file under ``results_dir`` into a :class:`LoadedResults`.

    Raises FileNotFoundError when ``results_dir`` is not a directory; every other defect
    (a corrupt JSON file, a row whose arrays do not match its parameters, ...) is recorded
    in ``problems`` and the rest still loads.
    """
    root = Path(results_dir)
    if not root.is_dir():
        raise FileNotFoundError(
            f"asv results directory {str(root)!r} does not exist or is not a directory.\n"
            "HINT: pass the directory asv wrote (asv.conf.json 'results_dir', e.g. results/)."
        )
    problems: list[str] = []
    benchmarks = _load_benchmarks_json(root, problems)

    records: list[dict[str, Any]] = []
    param_order: dict[str, None] = {}  # ordered set of parameter names
    machines: dict[str, dict] = {}
    run_order: dict[tuple[str, str], float] = {}  # (machine, commit) -> first started_at

    for machine_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        json_files = sorted(machine_dir.glob("*.json"))
        if not json_files:
            continue
        machine = machine_dir.name
        info: dict[str, Any] = {}
        sidecars: dict[str, Any] = {}
        for path in json_files:
            rel = path.relative_to(root).as_posix()
            if path.name == "machine.json":
                data = _read_json(path, rel, problems)
                if isinstance(data, dict):
                    info.update(data)
                elif data is not None:
                    problems.append(f"{rel}: expected a JSON object, got {type(data).__name__}")
            elif _RESULT_FILE.match(path.name):
                for rec in _load_result_file(path, rel, machine, benchmarks, problems):
                    records.append(rec)
                    for name in rec["params"]:
                        param_order.setdefault(name)
                    key = (machine, rec["commit"])
                    started = rec.pop("_started_at")
                    if started is not None:
                        run_order[key] = min(run_order.get(key, math.inf), started)
                    else:
                        run_order.setdefault(key, math.inf)
            else:
                data = _read_json(path, rel, problems)
                if data is not None:
                    sidecars[path.name] = data
        if "machine.json" not in {p.name for p in json_files}:
            problems.append(f"{machine_dir.relative_to(root).as_posix()}/machine.json: missing")
        info["sidecars"] = sidecars
        machines[machine] = info

    table = _build_table(records, list(param_order))
    commits = _build_commits(table, run_order)
    return LoadedResults(table=table, machines=machines, commits=commits, problems=problems)


def format_param_key(params: dict[str, Any]) -> str:
    """``{"impl": "safeattn", "head_dim": 128}`` -> ``"impl=safeattn head_dim=128"``."""
    return " ".join(f"{name}={value}" for name, value in params.items())


def _read_json(path: Path, rel: str, problems: list[str]) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{rel}: unreadable ({exc})")
    except json.JSONDecodeError as exc:
        problems.append(f"{rel}: not valid JSON ({exc})")
    return None


def _load_benchmarks_json(root: Path, problems: list[str]) -> dict[str, dict]:
    path = root / "benchmarks.json"
    if not path.exists():
        problems.append("benchmarks.json: missing (parameter names and units unknown)")
        return {}
    data = _read_json(path, "benchmarks.json", problems)
    if not isinstance(data, dict):
        if data is not None:
            problems.append("benchmarks.json: expected a JSON object")
        return {}
    described = {}
    for name, entry in data.items():
        if not isinstance(entry, dict):
            continue  # e.g. the file's "version"
        names = entry.get("param_names", [])
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
            problems.append(f"benchmarks.json: {name}: 'param_names' is not a list of names")
            entry = {k: v for k, v in entry.items() if k != "param_names"}
        if not isinstance(entry.get("unit", ""), str):
            problems.append(f"benchmarks.json: {name}: 'unit' is not a string")
            entry = {k: v for k, v in entry.items() if k != "unit"}
        described[name] = entry
    return described


def _parse_param(text: Any) -> Any:
    """asv stores parameter values as their repr: ``"'bf16'"`` -> ``"bf16"``, ``"128"``
    -> ``128``. Anything that is not a Python literal stays the string asv wrote."""
    if not isinstance(text, str):
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def _finite_or_none(x: Any) -> float | None:
    """asv writes ±Infinity for a CI it could not estimate (e.g. ``--quick``)."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        return float(x)
    return None


def _default_unit(benchmark: str, declared: str | None) -> str:
    if declared and declared != "unit":
        return declared
    method = benchmark.rsplit(".", 1)[-1]
    if method.startswith("time_"):
        return "seconds"
    if method.startswith(("mem_", "peakmem_")):
        return "bytes"
    return declared or "unit"


def _default_better(benchmark: str) -> str | None:
    """Direction for benchmarks outside the metric registry: asv's own time/mem kinds are
    lower-is-better by definition; an unregistered ``track_`` has no known direction."""
    method = benchmark.rsplit(".", 1)[-1]
    if method.startswith(("time_", "mem_", "peakmem_")):
        return "lower"
    return None


def _load_result_file(
    path: Path, rel: str, machine: str, benchmarks: dict[str, dict], problems: list[str]
) -> list[dict[str, Any]]:
    data = _read_json(path, rel, problems)
    if data is None:
        return []
    if not isinstance(data, dict):
        problems.append(f"{rel}: expected a JSON object, got {type(data).__name__}")
        return []
    missing = [k for k in ("commit_hash", "env_name", "date", "result_columns", "results")
               if k not in data]
    if missing:
        problems.append(f"{rel}: not an asv result file (missing keys: {', '.join(missing)})")
        return []
    if data.get("version") != _ASV_RESULTS_API_VERSION:
        problems.append(
            f"{rel}: asv results format version {data.get('version')!r}, expected "
            f"{_ASV_RESULTS_API_VERSION} (run `asv update`)"
        )
        return []
    if not isinstance(data["env_name"], str):
        problems.append(f"{rel}: env_name {data['env_name']!r} is not a string")
        return []
    commit = data["commit_hash"]
    if not (isinstance(commit, str) and re.fullmatch(r"[0-9a-f]{7,64}", commit)):
        problems.append(f"{rel}: commit_hash {commit!r} is not a hex sha")
        return []
    try:
        date = pd.Timestamp(int(data["date"]), unit="ms", tz="UTC")
    except (TypeError, ValueError, OverflowError):
        problems.append(f"{rel}: date {data['date']!r} is not milliseconds since the epoch")
        return []
    columns = data["result_columns"]
    if not (isinstance(columns, list) and all(isinstance(c, str) for c in columns)) or (
        not isinstance(data["results"], dict)
    ):
        problems.append(f"{rel}: 'result_columns' must be a list of names, 'results' an object")
        return []

    records: list[dict[str, Any]] = []
    for benchmark, row in data["results"].items():
        try:
            records.extend(
                _expand_row(benchmark, row, columns, benchmarks.get(benchmark, {}),
                            machine, commit, date, data["env_name"])
            )
        except _RowError as exc:
            problems.append(f"{rel}: {benchmark}: {exc}")
    return records


class _RowError(ValueError):
    pass


def _expand_row(
    benchmark: str,
    row: Any,
    columns: list[str],
    declared: dict[str, Any],
    machine: str,
    commit: str,
    date: pd.Timestamp,
    env_name: str,
) -> list[dict[str, Any]]:
    """One asv result row -> one record per parameter combination."""
    if not isinstance(row, list):
        raise _RowError(f"row is a {type(row).__name__}, expected a list")
    fields = dict(zip(columns, row, strict=False))  # asv drops trailing None fields
    raw_params = fields.get("params") or []
    if not isinstance(raw_params, list) or not all(
        isinstance(p, list) and all(isinstance(v, str) for v in p) for p in raw_params
    ):
        raise _RowError("'params' is not a list of lists of parameter reprs")
    combos = list(itertools.product(*raw_params))  # [()] when not parameterised
    names = list(declared.get("param_names") or [])
    if len(names) != len(raw_params):
        # benchmarks.json is missing or from another version of the suite: keep the
        # values, under positional names, rather than guess.
        names = [f"param{i + 1}" for i in range(len(raw_params))]

    def per_combo(key: str) -> list[Any]:
        values = fields.get(key)
        if values is None:
            return [None] * len(combos)
        if not isinstance(values, list) or len(values) != len(combos):
            n = len(values) if isinstance(values, list) else type(values).__name__
            raise _RowError(f"'{key}' has {n} entries for {len(combos)} parameter combinations")
        return values

    results, ci_a, ci_b, samples = (
        per_combo(k) for k in ("result", "stats_ci_99_a", "stats_ci_99_b", "samples")
    )
    started = fields.get("started_at")
    metric = metric_for(benchmark)
    unit = metric.unit if metric else _default_unit(benchmark, declared.get("unit"))
    better = metric.better if metric else _default_better(benchmark)
    suite = benchmark.rsplit(".", 1)[0]

    records = []
    for i, combo in enumerate(combos):
        params = {name: _parse_param(v) for name, v in zip(names, combo, strict=True)}
        raw = results[i]
        if raw is None:
            value, status = math.nan, "failed"
        elif isinstance(raw, (int, float)) and not isinstance(raw, bool):
            value = float(raw)
            status = "skipped" if math.isnan(value) else "ok"
        else:
            raise _RowError(f"result {i} is {raw!r}, expected a number, NaN or null")
        sample_list = samples[i]
        if sample_list is not None:
            if not isinstance(sample_list, list) or not all(
                isinstance(s, (int, float)) for s in sample_list
            ):
                raise _RowError(f"samples {i} is not a list of numbers")
            sample_list = [float(s) for s in sample_list if _finite_or_none(s) is not None]
        records.append(
            {
                "machine": machine,
                "commit": commit,
                "date": date,
                "benchmark": benchmark,
                "suite": suite,
                "metric": metric.name if metric else None,
                "unit": unit,
                "better": better,
                "params": params,
                "param_key": format_param_key(params),
                "value": value,
                "ci_low": _finite_or_none(ci_a[i]) if status == "ok" else None,
                "ci_high": _finite_or_none(ci_b[i]) if status == "ok" else None,
                "samples": sample_list or None,
                "status": status,
                "env_name": env_name,
                "_started_at": started if isinstance(started, (int, float)) else None,
            }
        )
    return records


def _build_table(records: list[dict[str, Any]], param_names: list[str]) -> pd.DataFrame:
    table = pd.DataFrame.from_records(records, columns=list(BASE_COLUMNS))
    # object dtype keeps None as None (not NaN) and integer parameters as integers even
    # where other benchmarks lack that parameter.
    for name in ("metric", "better"):
        table[name] = pd.Series([r[name] for r in records], index=table.index, dtype=object)
    for name in param_names:
        table[name] = pd.Series(
            [r["params"].get(name) for r in records], index=table.index, dtype=object
        )
    table["value"] = table["value"].astype(float)
    table["ci_low"] = table["ci_low"].astype(float)
    table["ci_high"] = table["ci_high"].astype(float)
    table["date"] = pd.to_datetime(table["date"], utc=True)
    return table.sort_values(
        ["machine", "date", "commit", "benchmark", "param_key", "env_name"], kind="stable"
    ).reset_index(drop=True)


def _build_commits(
    table: pd.DataFrame, run_order: dict[tuple[str, str], float]
) -> pd.DataFrame:
    if table.empty:
        return pd.DataFrame(columns=list(COMMIT_COLUMNS))
    commits = table[["machine", "commit", "date"]].drop_duplicates(["machine", "commit"])
    # Git dates have one-second resolution: commits made in the same second are ordered
    # by when asv first ran them.
    commits = commits.assign(
        _run=[
            run_order.get((m, c), math.inf)
            for m, c in zip(commits.machine, commits.commit, strict=True)
        ]
    )
    commits = commits.sort_values(["machine", "date", "_run", "commit"], kind="stable")
    commits["order"] = commits.groupby("machine").cumcount()
    return commits.drop(columns="_run").reset_index(drop=True)
