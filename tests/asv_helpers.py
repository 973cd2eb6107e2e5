"""Run the CPU-capable asv suite for real, once per test process, and read what it wrote.

Several test files (this suite's, the results loader's, the gate's end-to-end test) need
genuine asv output of this repository. :func:`asv_cpu_run` produces it through the same
command users run (``python benchmarks/run.py --same --quick``), into a directory that
lives as long as the test process, and caches it per benchmark selection.
"""

from __future__ import annotations

import atexit
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
RUN_TIMEOUT_S = 900  # the full CPU part takes ~1-3 min on 2 cores; fail clearly, not hang


@dataclass(frozen=True)
class AsvRun:
    """One finished ``benchmarks/run.py`` invocation.

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
    Cached per process and selection; the directory is removed when the process exits.
    Raises RuntimeError with asv's output if the run fails."""
    results = Path(tempfile.mkdtemp(prefix="safeattn-asv-results-"))
    atexit.register(shutil.rmtree, results, ignore_errors=True)
    cmd = [sys.executable, str(REPO / "benchmarks" / "run.py"), "--same", "--quick"]
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
        raise RuntimeError(f"benchmarks/run.py failed ({proc.returncode}):\n{log[-6000:]}")
    machines = [p.name for p in results.iterdir() if (p / "machine.json").exists()]
    if len(machines) != 1:
        raise RuntimeError(f"expected one machine directory in {results}, got {machines}\n{log}")
    return AsvRun(results=results, machine=machines[0], commit=head, log=log, seconds=seconds)


def torchless_python() -> str | None:
    """An interpreter of this Python's version that cannot import torch (e.g. Debian's
    /usr/bin/python3.11 beside a pyenv build), or None. A venv made from it, with torch in
    the venv only, is the GPU machines' layout: asv's virtualenv, created with
    ``--system-site-packages`` from the same base, then sees torch only through what
    benchmarks/run.py passes in ``ASV_PYTHONPATH``."""
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
    of this repository with the working tree's benchmarks/ and asv.conf.json copied over
    (the suite under test; the package measured is the clone's HEAD)."""
    import torch

    venv = root / "venv"
    subprocess.run([base_python, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = site / "site-packages"
    shutil.rmtree(site)
    site.symlink_to(Path(torch.__file__).resolve().parent.parent, target_is_directory=True)
    clone = root / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    shutil.rmtree(clone / "benchmarks")
    shutil.copytree(
        REPO / "benchmarks", clone / "benchmarks", ignore=shutil.ignore_patterns("__pycache__")
    )
    shutil.copy2(REPO / "asv.conf.json", clone / "asv.conf.json")
    if (REPO / ".whl").is_dir():  # offline wheels for the benchmark virtualenv (run.py)
        shutil.copytree(REPO / ".whl", clone / ".whl")
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    return VenvLayout(clone=clone, python=venv / "bin" / "python", env=env)
