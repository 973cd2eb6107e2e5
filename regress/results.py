"""asv ``results/`` directory -> one tidy pandas table, and the lookups the gate and the
dashboard make in it (a commit from a sha prefix, the commit before). No UI code: the gate
and the dashboard both import this.

Reading asv's own files (their format, one result file's rows) is
:mod:`regress.asv_files`; this module walks the directory, assembles the table and orders
the commits. Any other ``*.json`` under a machine directory is an environment sidecar
(e.g. the GPU the suite ran on) and is merged into :attr:`LoadedResults.machines` under
``"sidecars"``.

A corrupt, partial or unreadable file never stops the load: it is reported in
:attr:`LoadedResults.problems` as ``"<path relative to the results dir>: why"`` and the
rest still loads; the gate fails closed on problems that touch the commits it compares.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from regress.asv_files import RESULT_FILE, load_benchmarks_json, load_result_file, read_json

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
    benchmarks = load_benchmarks_json(root, problems)

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
                data = read_json(path, rel, problems)
                if isinstance(data, dict):
                    info.update(data)
                elif data is not None:
                    problems.append(f"{rel}: expected a JSON object, got {type(data).__name__}")
            elif RESULT_FILE.match(path.name):
                for rec in load_result_file(path, rel, machine, benchmarks, problems):
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
                data = read_json(path, rel, problems)
                if data is not None:
                    sidecars[path.name] = data
        if "machine.json" not in {p.name for p in json_files}:
            problems.append(f"{machine_dir.relative_to(root).as_posix()}/machine.json: missing")
        info["sidecars"] = sidecars
        machines[machine] = info

    table = _build_table(records, list(param_order))
    commits = _build_commits(table, run_order)
    return LoadedResults(table=table, machines=machines, commits=commits, problems=problems)


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


# ---------------------------------------------------------------------- lookups


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
