"""What a run writes beside asv's own results: a versions sidecar per commit measured (with
the kernel configs the GPU suites launched), and results/benchmarks.json kept a union of
every machine's benchmarks.

Several runs may write one results directory at once (``tools/run.py --gpus``: one run per
GPU): :func:`publish` holds a lock while it writes, and copies only the files its own asv
run changed, so that no run puts back a stale copy of a file that another run updated."""

from __future__ import annotations

import datetime
import hashlib
import json
import shutil
from pathlib import Path

from tools.runner import locked, log


def stage(results: Path, staging: Path, machine: str) -> dict[str, bytes]:
    """Give asv a private copy to write into: ``results``' benchmarks.json and this machine's
    files under ``staging``. asv rewrites ``benchmarks.json`` from what this machine
    discovers as soon as it starts (a CPU machine discovers no GPU suite), so writing into
    ``results`` directly left a dashboard reading it during the run (``make demo``) without
    the GPU suites' descriptions until the run ended. :func:`publish` copies back.

    Returns the digest of every machine file copied (:func:`publish` skips those asv left
    as they were)."""
    (staging / machine).mkdir(parents=True, exist_ok=True)
    copied: dict[str, bytes] = {}
    with locked(results):
        if (results / "benchmarks.json").exists():
            shutil.copy2(results / "benchmarks.json", staging / "benchmarks.json")
        for path in (results / machine).glob("*.json") if (results / machine).is_dir() else ():
            shutil.copy2(path, staging / machine / path.name)
            copied[path.name] = _digest(staging / machine / path.name)
    return copied


def _digest(path: Path) -> bytes:
    return hashlib.sha256(path.read_bytes()).digest()


def publish(
    staging: Path, results: Path, machine: str, staged: dict[str, bytes] | None = None
) -> list[str]:
    """Copy what asv wrote under ``staging`` (see :func:`stage`) into ``results``: this
    machine's new or changed files, each replaced in one rename, and ``benchmarks.json``
    as the union of both (this machine's discovery wins for the benchmarks it has).
    ``staged``: :func:`stage`'s digests; a file asv left as staged is not copied (another
    run may have updated it since). Returns the names of the files copied."""
    (results / machine).mkdir(parents=True, exist_ok=True)
    copied = []
    with locked(results):
        for path in sorted((staging / machine).glob("*.json")):
            if staged is not None and staged.get(path.name) == _digest(path):
                continue
            target = results / machine / path.name
            if target.exists() and target.read_bytes() == path.read_bytes():
                continue
            tmp = target.with_name(target.name + ".tmp")
            shutil.copy2(path, tmp)
            tmp.replace(target)
            copied.append(path.name)
        discovered = staging / "benchmarks.json"
        bench_json = results / "benchmarks.json"
        if discovered.exists():
            before = json.loads(bench_json.read_text()) if bench_json.exists() else None
            tmp = bench_json.with_name("benchmarks.json.tmp")
            shutil.copy2(discovered, tmp)
            merge_benchmarks_json(tmp, before)
            tmp.replace(bench_json)
    return copied


def merge_benchmarks_json(path: Path, before: dict | None) -> None:
    """Put back descriptions of benchmarks this machine does not have (GPU suites after a
    CPU-only run); asv itself rewrites the file from this machine's discovery."""
    if before is None or not path.exists():
        return
    now = json.loads(path.read_text())
    kept = len(before.keys() - now.keys())
    if kept:
        path.write_text(json.dumps(union_benchmarks(now, before), indent=4, sort_keys=True))
        log(f"benchmarks.json: kept {kept} benchmark(s) not discovered on this machine")


def union_benchmarks(ours: dict, theirs: dict | None) -> dict:
    """benchmarks.json's rule wherever two meet (a run's discovery and results/, a runner's
    and the results branch: tools/publish_results.py): ours, plus their descriptions of
    the benchmarks ours lacks."""
    return {**(theirs or {}), **ours}


def write_sidecars(
    results: Path, machine: str, started: float, info: dict, launches: Path | None = None,
    commits: set[str] | None = None,
) -> list[str]:  # fmt: skip
    """versions-<sha>.json beside every result file that this run wrote (of ``commits``
    only, when given: other runs may be writing the same folder). ``launches``: the
    folder of the ``launches-<sha>.jsonl`` files the GPU suites appended to
    (``$SAFEATTN_BENCH_LAUNCHES``), merged into ``safeattn_launches`` (see :func:`launches_of`)."""
    written = []
    for path in sorted((results / machine).glob("*.json")):
        if path.name == "machine.json" or path.name.startswith("versions-"):
            continue
        if path.stat().st_mtime < started:
            continue
        commit = json.loads(path.read_text()).get("commit_hash")
        if not commit or (commits is not None and commit not in commits):
            continue
        out = results / machine / f"versions-{commit}.json"
        sidecar = dict(info, machine=machine, commit=commit, result_file=path.name)
        sidecar["recorded_at"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
        records = launches_of(out, launches / f"launches-{commit}.jsonl" if launches else None)
        if records:
            sidecar["safeattn_launches"] = records
        out.write_text(json.dumps(sidecar, indent=2, sort_keys=True) + "\n")
        written.append(commit)
    return written


def launches_of(sidecar: Path, new: Path | None) -> list[dict]:
    """A commit's ``safeattn_launches``: one ``{"suite", "params", "configs", "sources"}``
    per safeattn combination of the GPU suites (benchmarks/_launches.record_launch), those of
    the sidecar already written (an earlier suite, an earlier run resumed with
    --skip-existing) updated by the lines in ``new``. The gate reads them to say which
    config a flagged row ran with on each commit."""
    merged: dict[str, dict] = {}
    try:
        old = json.loads(sidecar.read_text()).get("safeattn_launches") or []
    except (OSError, ValueError, AttributeError):
        old = []
    lines = new.read_text().splitlines() if new is not None and new.exists() else []
    for record in [*old, *map(_json_or_none, lines)]:
        if isinstance(record, dict) and {"suite", "params", "configs"} <= set(record):
            merged[json.dumps([record["suite"], record["params"]], sort_keys=True)] = record
    return [merged[k] for k in sorted(merged)]


def _json_or_none(line: str):
    """A JSON line, or None for a torn one (a benchmark process killed mid-write)."""
    try:
        return json.loads(line)
    except ValueError:
        return None
