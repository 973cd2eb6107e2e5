"""How the runner invokes asv: the commits to measure (git), asv's config, the benchmark
environment (offline prerequisites, the host's packages) and an asv run that echoes the
suites' progress file as it grows (asv shows a setup_cache's output only when it fails)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tools.runner import REPO, log
from tools.runner.status import Status

QUICK_ENV = "SAFEATTN_BENCH_QUICK"  # read by benchmarks/_env.py
PROGRESS_ENV = "SAFEATTN_BENCH_PROGRESS"  # read by benchmarks/_grid.py
LAUNCHES_ENV = "SAFEATTN_BENCH_LAUNCHES"  # read by benchmarks/_launches.py


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()


def commits_in(spec: str) -> list[str]:
    """Full hashes of an ``A..B`` range (oldest first), or of one revision (``X`` or ``X^!``)."""
    if ".." in spec:
        hashes = git("rev-list", "--first-parent", "--reverse", spec).split()
    else:  # one revision, also written as asv does: "<rev>^!"
        hashes = [git("rev-parse", "--verify", spec.removesuffix("^!") + "^{commit}")]
    if not hashes:
        raise SystemExit(f"[run] no commits in {spec!r}")
    return hashes


def check_branches() -> None:
    """Stop with a hint when a branch asv.conf.json names is not a local branch here: asv
    then fails every commit with "Unknown branch" (a detached or single-branch clone)."""
    import json5  # an asv dependency: asv.conf.json has comments

    conf = json5.loads((REPO / "asv.conf.json").read_text())
    for branch in conf.get("branches", []):
        try:
            git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}")
        except subprocess.CalledProcessError:
            raise SystemExit(
                f"[run] asv.conf.json measures branch {branch!r}, which this clone does not "
                f"have as a local branch (asv would fail every commit).\nHINT: git branch "
                f"{branch} <commit> (or git checkout -B {branch} <commit>), then run again"
            ) from None


def write_config(results: Path, workdir: Path) -> Path:
    """asv.conf.json with absolute paths and ``results_dir`` = ``results``."""
    import json5  # an asv dependency: asv.conf.json has comments

    conf = json5.loads((REPO / "asv.conf.json").read_text())
    conf["repo"] = str(REPO)
    for key in ("benchmark_dir", "env_dir", "html_dir"):
        conf[key] = str(REPO / conf[key])
    conf["results_dir"] = str(results)
    path = workdir / "asv.conf.json"
    path.write_text(json.dumps(conf, indent=2))
    return path


def host_paths() -> list[str]:
    """Where this Python finds torch, triton and asv's own helpers, for the benchmark
    virtualenv to see too (through ``ASV_PYTHONPATH``; asv drops ``PYTHONPATH``):

    - the ``PYTHONPATH`` entries (e.g. ``/tmp/site`` with asv's wheels on a GPU machine);
    - this interpreter's site-packages when it is itself a venv, since a virtualenv made from
      it with ``--system-site-packages`` sees only the *base* interpreter's packages.

    A directory holding a ``safeattn`` package (this checkout, a non-editable install) is
    left out with a warning: it would shadow the commit under test.
    """
    import site

    candidates = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if sys.prefix != sys.base_prefix:
        candidates += site.getsitepackages()
    paths = []
    for entry in dict.fromkeys(candidates):
        if not Path(entry).is_dir():
            continue
        if (Path(entry) / "safeattn" / "__init__.py").exists():
            log(f"WARNING: not exposing {entry} to the benchmark environment: it holds safeattn")
            continue
        paths.append(entry)
    return paths


# What asv's virtualenv environment pip-installs before building (asv 0.6: environment.py
# base requirements, plus our pyproject's build requirements). Offline, each must already be
# importable here, or its wheel be in .whl/ (used as pip's find-links).
ENV_PREREQUISITES = ("pip", "wheel", "build", "asv_runner", "pympler", "setuptools", "virtualenv")


def check_offline_prerequisites(env: dict) -> None:
    import importlib.util

    wheels = REPO / ".whl"
    if wheels.is_dir():
        env["PIP_FIND_LINKS"] = str(wheels)
    missing = [m for m in ENV_PREREQUISITES if importlib.util.find_spec(m) is None]
    in_wheels = {p.name.split("-")[0].lower() for p in wheels.glob("*.whl")}
    missing = [m for m in missing if m.lower() not in in_wheels]
    if missing:
        raise SystemExit(
            f"[run] the benchmark virtualenv is built offline and needs {', '.join(missing)} "
            f"importable here.\nHINT: python -m pip install {' '.join(missing)} (or put their "
            f"wheels in {wheels}); or use --same, which builds nothing."
        )


def asv(args: list[str], env: dict, config: Path, status: Status | None = None) -> int:
    """Run asv with ``args``; echo the suites' progress file as it grows (and hand each
    line to ``status``); exit status."""
    cmd = [sys.executable, "-m", "asv", *args, "--config", str(config)]
    log("$ " + " ".join(cmd))
    progress = Path(env[PROGRESS_ENV]) if PROGRESS_ENV in env else None
    offset = progress.stat().st_size if progress and progress.exists() else 0
    on_line = status.step if status is not None else None
    proc = subprocess.Popen(cmd, cwd=REPO, env=env)
    while proc.poll() is None:
        time.sleep(0.5)
        if progress is not None:
            offset = echo_progress(progress, offset, on_line)
    if progress is not None:
        echo_progress(progress, offset, on_line)
    return proc.returncode


def echo_progress(path: Path, offset: int, on_line: Callable[[str], None] | None = None) -> int:
    """Print the complete lines the suites appended to the progress file since ``offset``
    (asv shows a setup_cache's output only when it fails), handing each to ``on_line``;
    returns the new offset."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read()
    except OSError:
        return offset
    complete = chunk[: chunk.rfind(b"\n") + 1]
    if complete:  # on a line of its own: asv may have left its cursor mid-line
        text = complete.decode(errors="replace")
        sys.stdout.write("\n" + text)
        sys.stdout.flush()
        if on_line is not None:
            for line in text.splitlines():
                if line.strip():
                    on_line(line)
    return offset + len(complete)
