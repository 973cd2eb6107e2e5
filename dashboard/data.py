"""Which asv result files a page needs, and loading just those (no UI code).

A results directory of 1,000 commits × 2 GPUs × the full grid holds millions of result
rows; parsing all of it for every page would take minutes. The pages only ever need a
window of commits: the overview the newest two per machine, compare the two chosen,
history the newest N. So the dashboard first indexes the directory cheaply — machine,
commit and date of every result file, read from the file's first bytes — and then runs
the one loader, :func:`regress.results.load_results`, on a view of the directory
holding only the files of the chosen commits (symbolic links, same relative paths, so
its problem reports name the real files).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from regress.results import LoadedResults, load_results

# asv writes result files compactly with these keys first (asv/results.py Results.save):
# the header gives commit and date without parsing the whole file.
_HEADER_BYTES = 4096
_COMMIT = re.compile(r'"commit_hash":\s*"([0-9a-f]{7,64})"')
_DATE = re.compile(r'"date":\s*(\d+)')
_RESULT_FILE = re.compile(r"^[0-9a-f]{8}-.+\.json$")
_SHA_IN_NAME = re.compile(r"[0-9a-f]{40}")

INDEX_COLUMNS = ["machine", "commit", "date", "order", "path"]


@dataclass
class ResultsIndex:
    """Every result file of a results directory, without its results.

    ``files``: one row per result file: machine, commit (full sha), date (UTC), order
    (per machine, 0 = oldest, by date then sha) and path (relative to the directory).
    ``problems``: ``"path: why"`` for result files whose header cannot be read or that are
    truncated; those files are left out.
    """

    root: Path
    files: pd.DataFrame
    problems: list[str] = field(default_factory=list)
    _labels: dict[str, dict[str, str]] = field(default_factory=dict, repr=False)

    def machines(self) -> list[str]:
        return sorted(set(self.files["machine"]))

    def commits(self, machine: str) -> list[str]:
        """Full shas with results on ``machine``, newest first."""
        rows = self.files[self.files["machine"] == machine]
        rows = rows.drop_duplicates("commit").sort_values("order", ascending=False)
        return list(rows["commit"])

    def newest(self, machine: str, n: int) -> list[str]:
        return self.commits(machine)[:n]

    def label(self, machine: str, sha: str) -> str:
        """``"1a2b3c4d · 2026-11-21 12:00"`` for select boxes."""
        if machine not in self._labels:  # once per machine: a select box asks per option
            rows = self.files[self.files["machine"] == machine].drop_duplicates("commit")
            self._labels[machine] = {
                c: f"{c[:8]} · {d:%Y-%m-%d %H:%M}"
                for c, d in zip(rows["commit"], rows["date"], strict=True)
            }
        return self._labels[machine].get(sha, sha[:8])


def index_results(results_dir: str | Path) -> ResultsIndex:
    """Index ``results_dir`` (FileNotFoundError if it is not a directory)."""
    root = Path(results_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"asv results directory {str(root)!r} does not exist")
    records, problems = [], []
    for machine_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for path in sorted(machine_dir.glob("*.json")):
            if not _RESULT_FILE.match(path.name):
                continue
            rel = path.relative_to(root).as_posix()
            header = _header(path)
            if header is None:
                problems.append(f"{rel}: no commit_hash/date in the file (corrupt or not asv)")
                continue
            if not _complete(path):
                # A partial write: reported on every page, whichever commits it loads.
                problems.append(f"{rel}: truncated (the JSON object is not closed); skipped")
                continue
            commit, date_ms = header
            records.append({"machine": machine_dir.name, "commit": commit,
                            "date": pd.Timestamp(date_ms, unit="ms", tz="UTC"), "path": rel})
    files = pd.DataFrame.from_records(records, columns=[c for c in INDEX_COLUMNS if c != "order"])
    files = files.sort_values(["machine", "date", "commit"], kind="stable")
    order = files.drop_duplicates(["machine", "commit"]).copy()
    order["order"] = order.groupby("machine").cumcount()
    files = files.merge(order[["machine", "commit", "order"]], on=["machine", "commit"])
    return ResultsIndex(root=root, files=files[INDEX_COLUMNS].reset_index(drop=True),
                        problems=problems)


def _header(path: Path) -> tuple[str, int] | None:
    try:
        with open(path, "rb") as f:
            head = f.read(_HEADER_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None
    commit, date = _COMMIT.search(head), _DATE.search(head)
    if commit and date:
        return commit.group(1), int(date.group(1))
    try:  # not asv's usual key order: fall back to parsing the file
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return str(data["commit_hash"]), int(data["date"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _complete(path: Path) -> bool:
    """Whether the file ends like a JSON object (cheap: reads the last bytes only)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - 64))
            return f.read().rstrip().endswith(b"}")
    except OSError:
        return False


def load_commits(
    index: ResultsIndex, wanted: dict[str, list[str]], benchmarks: set[str] | None = None
) -> LoadedResults:
    """Load only the result files of ``wanted`` (machine -> full shas) with the one loader.

    Machines missing from ``wanted`` are left out entirely. Per machine the view keeps
    ``machine.json`` and the environment sidecars that belong to a wanted commit (a sha in
    their name) or to no commit in particular. With ``benchmarks``, each result file is
    copied with only those benchmarks' rows (a long history of one metric then loads a
    small part of each file); a file that does not parse is linked as it is, for the
    loader to report.
    """
    root = index.root.resolve()
    view = Path(tempfile.mkdtemp(prefix="safeattn-dashboard-view-"))
    try:
        if (root / "benchmarks.json").exists():
            os.symlink(root / "benchmarks.json", view / "benchmarks.json")
        files = index.files
        for machine, shas in wanted.items():
            (view / machine).mkdir()
            chosen = files[(files["machine"] == machine) & files["commit"].isin(shas)]
            result_files = set(chosen["path"])
            links = set(result_files)
            for path in (root / machine).glob("*.json"):
                if _RESULT_FILE.match(path.name):
                    continue
                named = _SHA_IN_NAME.findall(path.name)
                if not named or any(s in shas for s in named):
                    links.add(f"{machine}/{path.name}")
            for rel in links:
                subset = benchmarks is not None and rel in result_files
                if not (subset and _write_subset(root / rel, view / rel, benchmarks)):
                    os.symlink(root / rel, view / rel)
        return load_results(view)
    finally:
        _remove_view(view)


def _write_subset(source: Path, target: Path, benchmarks: set[str]) -> bool:
    """Copy an asv result file keeping only ``benchmarks`` (False if it does not parse)."""
    try:
        with open(source, encoding="utf-8") as f:
            content = json.load(f)
        content["results"] = {k: v for k, v in content["results"].items() if k in benchmarks}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    target.write_text(json.dumps(content), encoding="utf-8")
    return True


def _remove_view(view: Path) -> None:
    for dirpath, _, filenames in os.walk(view, topdown=False):
        for name in filenames:
            os.unlink(os.path.join(dirpath, name))
        os.rmdir(dirpath)
