"""Run the CPU-capable asv suite for real, once per test process, and read what it wrote.

Several test files (this suite's, the results loader's, the gate's end-to-end test) need
genuine asv output of this repository. :func:`asv_cpu_run` produces it through the same
command users run (``python tools/run.py --same --quick``), into a directory that
lives as long as the test process, and caches it per benchmark selection; under
pytest-xdist, per test session: the workers share one run (tests/conftest.py names the
directory in :data:`SHARED_DIR_ENV`).
"""

from __future__ import annotations

import atexit
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The package files benchmarks/_truth.py loads by path (_load_truth): part of the suite.
TRUTH_FILES = (
    "regress/metrics.py",
    "regress/workloads.py",
    "safeattn/gpu_limits.py",
    "safeattn/audit_cache.py",  # the static audit's cache (standard library only)
)
RUN_TIMEOUT_S = 900  # the full CPU part takes ~1-3 min on 2 cores; fail clearly, not hang
# A directory the whole test session shares (its xdist workers too), set by tests/conftest.py.
SHARED_DIR_ENV = "SAFEATTN_TEST_SHARED_DIR"


@dataclass(frozen=True)
class AsvRun:
    """One finished ``tools/run.py`` invocation.

    ``results``: the asv results directory; ``machine``: the machine directory's name;
    ``commit``: HEAD when the run started (what the results are recorded as);
    ``log``: run.py's and asv's combined output; ``seconds``: wall time.
    """

    results: Path
    machine: str
    commit: str
    log: str
    seconds: float

    @property
    def machine_dir(self) -> Path:
        return self.results / self.machine

    def result_files(self) -> list[Path]:
        """asv's per-commit result files (not machine.json, not the versions sidecars)."""
        return sorted(
            p
            for p in self.machine_dir.glob("*.json")
            if p.name != "machine.json" and not p.name.startswith("versions-")
        )

    def benchmarks(self) -> dict:
        """results/benchmarks.json: per benchmark its params, unit, type, version."""
        data = json.loads((self.results / "benchmarks.json").read_text())
        data.pop("version", None)
        return data

    def values(self, benchmark: str) -> dict[tuple, float | None]:
        """{parameter combination (as asv stores them: repr strings): value} of one
        benchmark in the newest result file."""
        import itertools

        data = json.loads(self.result_files()[-1].read_text())
        columns = data["result_columns"]
        row = dict(zip(columns, data["results"][benchmark], strict=False))
        combos = list(itertools.product(*row["params"])) if row["params"] else [()]
        return dict(zip(combos, row["result"], strict=True))


@cache
def asv_cpu_run(bench: tuple[str, ...] = ()) -> AsvRun:
    """Run the CPU-capable benchmarks (or those matching the asv ``-b`` regexes in
    ``bench``) through asv in quick mode, for the current working tree recorded as HEAD.
    Cached per process and selection, and per session under $SAFEATTN_TEST_SHARED_DIR (two
    xdist workers: the second waits for the first's run and reads it, rather than running
    asv again beside it). Raises RuntimeError with asv's output if the run fails."""
    shared = os.environ.get(SHARED_DIR_ENV)
    if not shared:
        results = Path(tempfile.mkdtemp(prefix="safeattn-asv-results-"))
        atexit.register(shutil.rmtree, results, ignore_errors=True)
        return _run_asv(bench, results)
    key = hashlib.sha256(json.dumps(bench).encode()).hexdigest()[:12]
    where = Path(shared) / f"asv-cpu-run-{key}"
    with open(f"{where}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        record = where / "run.json"
        if record.exists():
            fields = json.loads(record.read_text())
            return AsvRun(**{**fields, "results": Path(fields["results"])})
        shutil.rmtree(where, ignore_errors=True)  # a failed earlier attempt
        run = _run_asv(bench, where / "results")
        record.write_text(json.dumps({**run.__dict__, "results": str(run.results)}))
        return run


def _run_asv(bench: tuple[str, ...], results: Path) -> AsvRun:
    results.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, str(REPO / "tools" / "run.py"), "--same", "--quick"]
    cmd += [f"--bench={b}" for b in bench] + ["--results", str(results)]
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)  # the CPU suites set it themselves, per process
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
    start = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    seconds = time.monotonic() - start
    log = proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise RuntimeError(f"tools/run.py failed ({proc.returncode}):\n{log[-6000:]}")
    machines = [p.name for p in results.iterdir() if (p / "machine.json").exists()]
    if len(machines) != 1:
        raise RuntimeError(f"expected one machine directory in {results}, got {machines}\n{log}")
    return AsvRun(results=results, machine=machines[0], commit=head, log=log, seconds=seconds)


def torchless_python() -> str | None:
    """An interpreter of this Python's version that cannot import torch (e.g. Debian's
    /usr/bin/python3.11 beside a pyenv build), or None. A venv made from it, with torch in
    the venv only, is the GPU machines' layout: asv's virtualenv, created with
    ``--system-site-packages`` from the same base, then sees torch only through what
    tools/run.py passes in ``ASV_PYTHONPATH``."""
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    own = {os.path.realpath(sys.executable), os.path.realpath(sys._base_executable)}
    dirs = [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin", "/usr/local/bin"]
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"
    for directory in dict.fromkeys(dirs):
        candidate = shutil.which(name, path=directory)
        if candidate is None or os.path.realpath(candidate) in own:
            continue
        checks = [[candidate, "-c", probe], [candidate, "-m", "venv", "--help"]]
        if all(subprocess.run(c, capture_output=True).returncode == 0 for c in checks):
            return candidate
    return None


@dataclass(frozen=True)
class VenvLayout:
    """A clone of this repository and a venv whose site-packages holds torch (a link to this
    interpreter's), made from an interpreter without torch: see :func:`make_venv_layout`."""

    clone: Path
    python: Path  # the venv's interpreter
    env: dict  # PATH starts with the venv's bin (asv picks its ``pythonX.Y`` there)


def make_venv_layout(root: Path, base_python: str) -> VenvLayout:
    """Build the GPU machines' layout under ``root`` in a few seconds, without a download:
    ``base_python -m venv --without-pip``, its site-packages replaced by a link to the
    directory that holds this interpreter's torch (and asv, triton, ...), and a ``git clone``
    of this repository with the working tree's benchmarks/, tools/, asv.conf.json and
    :data:`TRUTH_FILES` copied over (the suite and its runner under test; the package
    measured is the clone's HEAD)."""
    import torch

    venv = root / "venv"
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = site / "site-packages"
    shutil.rmtree(site)
    site.symlink_to(Path(torch.__file__).resolve().parent.parent, target_is_directory=True)
    clone = root / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    for suite_dir in ("benchmarks", "tools"):  # the suite and the runner that drives it
        shutil.rmtree(clone / suite_dir)
        shutil.copytree(
            REPO / suite_dir, clone / suite_dir, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy2(REPO / "asv.conf.json", clone / "asv.conf.json")
    # The suite's own sources of truth, which benchmarks/_truth.py loads by path from the
    # suite's checkout (not from the package measured).
    for truth in TRUTH_FILES:
        (clone / truth).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / truth, clone / truth)
    if (REPO / ".whl").is_dir():  # offline wheels for the benchmark virtualenv (run.py)
        shutil.copytree(REPO / ".whl", clone / ".whl")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    return VenvLayout(clone=clone, python=venv / "bin" / "python", env=env)


# --- synthetic asv results (for GPU suites this CPU cannot run) ----------------------------

# asv 0.6's result row fields, in the order its result files name them.
RESULT_COLUMNS = (
    "result", "params", "version", "started_at", "duration", "stats_ci_99_a",
    "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat", "samples",
    "profile",
)


def write_asv_results(
    results: Path,
    machine: str,
    commit: str,
    date_ms: int,
    benchmarks: dict[str, tuple[list[str], list[list], dict, str]],
) -> Path:
    """Write one commit's results in asv 0.6's format (result file, machine.json and
    benchmarks.json entries) without running asv: for the GPU suites, which a CPU machine
    cannot run. ``benchmarks``: name -> (param_names, param values per parameter, {combo:
    value}, version), a value being a list of samples (stored as asv stores a track_'s
    samples protocol: the median, a 99 % interval, the samples), a number, NaN (skipped) or
    None (failed). Returns the result file."""
    import itertools
    import math
    import statistics

    (results / machine).mkdir(parents=True, exist_ok=True)
    (results / machine / "machine.json").write_text(
        json.dumps({"machine": machine, "arch": "x86_64", "version": 1})
    )
    described_path = results / "benchmarks.json"
    described = json.loads(described_path.read_text()) if described_path.exists() else {}
    rows = {}
    for name, (names, values, measured, version) in benchmarks.items():
        params = [[repr(v) for v in vals] for vals in values]
        described[name] = {"name": name, "param_names": names, "params": params,
                           "type": "track", "unit": "unit", "version": version}
        fields: dict[str, list] = {k: [] for k in ("result", "ci_a", "ci_b", "samples")}
        for combo in itertools.product(*values):
            value = measured.get(combo, math.nan)
            if isinstance(value, list):
                mid = statistics.median(value)
                fields["result"].append(mid)
                fields["ci_a"].append(min(value))
                fields["ci_b"].append(max(value))
                fields["samples"].append(value)
            else:
                fields["result"].append(value)
                fields["ci_a"].append(None)
                fields["ci_b"].append(None)
                fields["samples"].append(None)
        rows[name] = [fields["result"], params, version, date_ms, 1.0, fields["ci_a"],
                      fields["ci_b"], None, None, None, None, fields["samples"]]
    described["version"] = 2
    described_path.write_text(json.dumps(described, indent=1))
    data = {
        "commit_hash": commit, "env_name": "existing-py", "date": date_ms,
        "params": {"machine": machine}, "python": "3.11", "requirements": {}, "env_vars": {},
        "result_columns": list(RESULT_COLUMNS), "results": rows, "durations": {}, "version": 2,
    }
    path = results / machine / f"{commit[:8]}-existing-py.json"
    # asv writes NaN for a skipped benchmark (json.dumps allows it, as asv's own writer).
    path.write_text(json.dumps(data))
    return path
