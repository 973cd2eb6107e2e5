"""Reading asv's files: a result file -> records (one per parameter combination), and
``benchmarks.json`` -> what each benchmark declares. :mod:`regress.results` walks the
directory and assembles these records into the tidy table.

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

A defect in a file or row never raises here: it is appended to ``problems`` as
``"<path relative to the results dir>: why"`` and the rest of the file still reads.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

import pandas as pd

from regress.metrics import asv_builtin_kind, metric_for

# asv names a result file <first 8 hex digits of the commit>-<environment name>.json.
RESULT_FILE = re.compile(r"^[0-9a-f]{8}-.+\.json$")
_ASV_RESULTS_API_VERSION = 2


def format_param_key(params: dict[str, Any]) -> str:
    """``{"impl": "safeattn", "head_dim": 128}`` -> ``"impl=safeattn head_dim=128"``."""
    return " ".join(f"{name}={value}" for name, value in params.items())


def read_json(path: Path, rel: str, problems: list[str]) -> Any:
    """The JSON in ``path``, or None with the reason appended to ``problems``."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{rel}: unreadable ({exc})")
    except json.JSONDecodeError as exc:
        problems.append(f"{rel}: not valid JSON ({exc})")
    return None


def load_benchmarks_json(root: Path, problems: list[str]) -> dict[str, dict]:
    """``benchmarks.json`` under ``root``: benchmark name -> its entry (malformed
    ``param_names`` or ``unit`` dropped, and said in ``problems``)."""
    path = root / "benchmarks.json"
    if not path.exists():
        problems.append("benchmarks.json: missing (parameter names and units unknown)")
        return {}
    data = read_json(path, "benchmarks.json", problems)
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


def _shared_or_fresh(value: Any, text: str) -> Any:
    """``value`` (parsed from ``text``) where records may share it: a hashable literal; a
    mutable one (a list, a dict, a tuple holding one) parsed again for each record."""
    try:
        hash(value)
    except TypeError:
        return _parse_param(text)
    return value


def _finite_or_none(x: Any) -> float | None:
    """asv writes ±Infinity for a CI it could not estimate (e.g. ``--quick``)."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        return float(x)
    return None


def _default_unit(benchmark: str, declared: str | None) -> str:
    if declared and declared != "unit":
        return declared
    kind = asv_builtin_kind(benchmark)
    if kind == "speed":
        return "seconds"
    if kind == "memory":
        return "bytes"
    return declared or "unit"


def _default_better(benchmark: str) -> str | None:
    """Direction for benchmarks outside the metric registry: asv's own time/mem kinds are
    lower-is-better by definition; an unregistered ``track_`` has no known direction."""
    return "lower" if asv_builtin_kind(benchmark) is not None else None


def load_result_file(
    path: Path, rel: str, machine: str, benchmarks: dict[str, dict], problems: list[str]
) -> list[dict[str, Any]]:
    """The records of one asv result file (``rel``: its path for ``problems``), one per
    benchmark and parameter combination, with the loader's columns plus ``_started_at``
    (when asv started the run, to order commits of the same date)."""
    data = read_json(path, rel, problems)
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

    # Each parameter's values parsed once per row, not once per combination (a grid row
    # repeats each value across all combinations: ~4M literal_evals for one A/A report).
    parsed = {v: _parse_param(v) for values in raw_params for v in values}
    records = []
    for i, combo in enumerate(combos):
        params = {n: _shared_or_fresh(parsed[v], v) for n, v in zip(names, combo, strict=True)}
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
