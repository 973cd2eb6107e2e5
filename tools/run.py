r"""Benchmark this machine with asv: ``python tools/run.py [options]``.

    python tools/run.py                      # HEAD, every suite this machine has
    python tools/run.py --range HEAD~4..HEAD # a commit range (asv's A..B syntax)
    python tools/run.py --skip-existing      # ... leaving suites already measured here
    python tools/run.py --same               # the safeattn importable here, as HEAD
    python tools/run.py --suite gpu          # the GPU suites (or cpu, or suite names)
    python tools/run.py --same -s NumericsSuite --budget-s 480 --mirror "$OUT"
    python tools/run.py --quick -b '^speed\.InterpreterSpeedSuite\.'  # asv -b regexes

Select with ``--suite`` (:data:`SUITES`, :data:`GROUPS`) or with anchored ``-b`` regexes:
asv matches ``-b`` with ``re.search``, so ``-b NumericsSuite`` also selects
``InterpreterNumericsSuite`` (on a GPU machine, the slow interpreter suite). ``--suite
NumericsSuite`` is ``-b '^numerics\.NumericsSuite\.'``.

What it does, in order (each step prints a ``[run]`` line; asv prints its own progress):

1. Names the machine after its GPU model (``nvidia-h100-80gb-hbm3``) or, without a usable
   GPU, its CPU model (``cpu-intel-xeon-platinum-8481c``) and registers it with
   ``asv machine --yes``.
2. For each commit (oldest first), for each selected suite (in :data:`SUITES` order: GPU
   suites cheapest first, then the CPU-capable ones), runs one ``asv run --show-stderr
   --record-samples`` (the gate's rank test reads the samples) and prints its wall time.
   One asv run per suite costs a few seconds of discovery each, and buys:

   - progress: asv saves results when a run ends, and shows a setup_cache's output only if
     it fails; the suites append one line per grid entry (with its seconds) to a progress
     file that this script prints as it grows (``_common.progress``);
   - a budget: ``--budget-s S`` starts no suite after S seconds from this script's start;
   - resuming: ``--skip-existing`` skips the suites that already have results for a commit
     on this machine (and passes asv's ``--skip-existing`` for the rest), so a call cut
     short by a budget or a kill loses at most the suite in flight;
   - ``--mirror DIR`` copies the results directory into ``DIR`` after every suite (e.g.
     ``$OUT`` on a machine that hands back only that folder).

   A suite whose asv run fails does not stop the others; the exit status is then 1.
   asv runs with ``--launch-method forkserver``: it imports the suite once and forks a
   process per benchmark, ~0.03 s instead of a fresh interpreter's ~0.2 s, which matters
   with over a thousand cheap look-up processes per commit (benchmarks/_common.py). Forking
   is safe because nothing initialises CUDA or imports safeattn/triton at import time; every
   measurement starts CUDA in its own forked process. ``--launch-method spawn`` is the
   conservative fallback. Two ways to get the code under test:

   - default: asv's virtualenv environment (asv.conf.json). It sees the machine's torch and
     triton (``VIRTUALENV_SYSTEM_SITE_PACKAGES=true``, plus ``ASV_PYTHONPATH`` for
     ``PYTHONPATH``'s entries and, when this Python is itself a venv, whose packages that
     flag cannot reach, its site-packages: :func:`host_paths`; asv 0.6.6 drops those entries
     again inside its benchmark processes, and ``_common.restore_pythonpath`` puts them
     back) and builds and installs each commit with ``pip --no-index --no-deps
     --no-build-isolation``, with ``PIP_NO_INDEX=1`` set: no network needed.
   - ``--same``: no build at all. Each commit is checked out into a temporary git worktree
     (removed afterwards) and imported from there (``ASV_PYTHONPATH``), with
     ``asv run --python=same --set-commit-hash <sha>``; without ``--range`` the current
     working tree is measured and recorded as HEAD (a dirty tree is warned about).
3. Writes ``results/<machine>/versions-<commit sha>.json`` for every commit this run
   measured: GPU, driver, CUDA, cuDNN, torch, triton, Python and asv versions (asv's
   ``machine.json`` has fixed fields; :func:`versions` documents this file's), and the
   kernel configs each safeattn combination of the GPU suites launched (:func:`launches_of`).
4. Keeps ``results/benchmarks.json`` (which asv rewrites from what this machine discovers)
   a union: GPU suites measured elsewhere stay described after a CPU-only run.

5. With ``--status FILE`` (or ``SAFEATTN_BENCH_STATUS=FILE``), keeps a small JSON file of
   where the run is (:class:`Status`: commit, suite, last progress line, elapsed, done):
   the dashboard shows it as a progress bar while ``make demo`` measures this machine.

On a machine without a GPU only the CPU-capable suites exist (see benchmarks/_common.py).
``--results DIR`` writes elsewhere (the tests use it); ``--quick`` takes fewer samples and
trials and passes asv's ``--quick``: numbers for checking the suite, not for history.
What a commit's suites cost on a GPU: benchmarks/speed.py's module docstring ("Cost").
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SIDECAR_SCHEMA = "safeattn-bench-versions/1"
QUICK_ENV = "SAFEATTN_BENCH_QUICK"  # read by benchmarks/_common.py


def log(message: str) -> None:
    print(f"[run] {message}", flush=True)


def slug(text: str) -> str:
    """``"NVIDIA H100 80GB HBM3"`` -> ``"nvidia-h100-80gb-hbm3"``."""
    text = re.sub(r"\((r|tm|c)\)|\bcpu\b|@.*$", " ", text, flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvml_driver_version() -> str | None:
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        buf = ctypes.create_string_buffer(96)
        ok = nvml.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) == 0
        return buf.value.decode() if ok else None
    finally:
        nvml.nvmlShutdown()


def versions() -> dict:
    """The software and hardware a result was measured with (the sidecar file's content).

    Keys: ``schema``; ``machine`` (added by the caller); ``gpu`` (null without a usable
    GPU, else ``name``, ``count``, ``arch`` like ``"sm90"``, ``memory_bytes``);
    ``driver`` (NVIDIA driver, or null); ``cuda`` and ``cudnn`` (as torch reports them);
    ``torch``; ``triton``; ``python``; ``asv``; ``cpu``; ``platform``.
    """
    import asv
    import torch
    import triton

    gpu = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu = {
            "name": props.name,
            "count": torch.cuda.device_count(),
            "arch": f"sm{props.major}{props.minor}",
            "memory_bytes": int(props.total_memory),
        }
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "schema": SIDECAR_SCHEMA,
        "gpu": gpu,
        "driver": _nvml_driver_version(),
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "asv": asv.__version__,
        "cpu": cpu_model(),
        "platform": platform.platform(),
    }


def machine_name(info: dict) -> str:
    """GPU model for GPU machines, ``cpu-<model>`` otherwise."""
    if info["gpu"] is not None:
        return slug(info["gpu"]["name"])
    return "cpu-" + slug(info["cpu"])


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()


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


STATUS_ENV = "SAFEATTN_BENCH_STATUS"  # read by dashboard/progress.py
STATUS_SCHEMA = "safeattn-bench-status/1"
_FRACTION = re.compile(r"\b(\d+)\s*/\s*(\d+)\b")


class Status:
    """Where the run is, rewritten (atomically) at every step into a small JSON file.

    Keys: ``schema``; ``pid``; ``machine``; ``started`` and ``updated`` (Unix times);
    ``commits`` (how many) and ``commit_index`` (1-based) with ``commit`` (sha) and
    ``subject``; ``suites`` (names, in order) with ``suite`` and ``suite_index`` (1-based)
    and ``suite_started``; ``step`` (the last progress line a suite reported) and
    ``step_fraction`` (its ``i/n`` as a number, else null); ``done`` (suites finished, all
    commits); ``finished`` (Unix time, null while running) and ``exit_status``.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.data: dict = {"schema": STATUS_SCHEMA, "pid": os.getpid(), "started": time.time(),
                           "finished": None, "exit_status": None, "done": 0, "step": "",
                           "step_fraction": None}  # fmt: skip

    def update(self, **fields) -> None:
        self.data.update(fields, updated=time.time())
        if self.path is None:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps(self.data, indent=1))
            os.replace(tmp, self.path)
        except OSError as exc:  # a status display must never stop a benchmark run
            log(f"WARNING: cannot write the status file {self.path}: {exc}")
            self.path = None

    def step(self, line: str) -> None:
        match = _FRACTION.search(line)
        fraction = None
        if match and int(match.group(2)) > 0:
            fraction = min(1.0, int(match.group(1)) / int(match.group(2)))
        self.update(step=line.strip(), step_fraction=fraction)


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


def commits_in(spec: str) -> list[str]:
    """Full hashes of an ``A..B`` range (oldest first), or of one revision (``X`` or ``X^!``)."""
    if ".." in spec:
        hashes = git("rev-list", "--first-parent", "--reverse", spec).split()
    else:  # one revision, also written as asv does: "<rev>^!"
        hashes = [git("rev-parse", "--verify", spec.removesuffix("^!") + "^{commit}")]
    if not hashes:
        raise SystemExit(f"[run] no commits in {spec!r}")
    return hashes


def merge_benchmarks_json(path: Path, before: dict | None) -> None:
    """Put back descriptions of benchmarks this machine does not have (GPU suites after a
    CPU-only run); asv itself rewrites the file from this machine's discovery."""
    if before is None or not path.exists():
        return
    now = json.loads(path.read_text())
    missing = {k: v for k, v in before.items() if k not in now}
    if missing:
        now.update(missing)
        path.write_text(json.dumps(now, indent=4, sort_keys=True))
        log(f"benchmarks.json: kept {len(missing)} benchmark(s) not discovered on this machine")


def write_sidecars(
    results: Path, machine: str, started: float, info: dict, launches: Path | None = None
) -> list[str]:
    """versions-<sha>.json beside every result file that this run wrote. ``launches``: the
    folder of the ``launches-<sha>.jsonl`` files the GPU suites appended to
    (``$SAFEATTN_BENCH_LAUNCHES``), merged into ``safeattn_launches`` (see :func:`launches_of`)."""
    written = []
    for path in sorted((results / machine).glob("*.json")):
        if path.name == "machine.json" or path.name.startswith("versions-"):
            continue
        if path.stat().st_mtime < started:
            continue
        commit = json.loads(path.read_text()).get("commit_hash")
        if not commit:
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
    per safeattn combination of the GPU suites (benchmarks/_common.record_launch), those of
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


# Every suite with the name prefix its benchmarks share. Selections are anchored (asv -b is
# re.search: a bare "NumericsSuite" also matches InterpreterNumericsSuite, and a bare
# "SpeedSuite" MaskedSpeedSuite; the trailing dot keeps "speed.SpeedSuite." from matching
# anything longer). The order is the order a run measures them in: GPU suites first,
# cheapest first, so that a time budget (--budget-s) cuts the most expensive one, the
# masked-attention suites (issue 11) after the established four, so that a budgeted history
# run still measures those first; CPU-capable suites after them.
SUITES: dict[str, str] = {
    "LiveResourcesSuite": "resources.LiveResourcesSuite.",
    "SpeedSuite": "speed.SpeedSuite.",
    "MemorySuite": "memory.MemorySuite.",
    "NumericsSuite": "numerics.NumericsSuite.",
    "ModelStepSuite": "speed.ModelStepSuite.",
    "MaskedSpeedSuite": "speed.MaskedSpeedSuite.",
    "StaticAuditSuite": "resources.StaticAuditSuite.",
    "InterpreterSpeedSuite": "speed.InterpreterSpeedSuite.",
    "InterpreterNumericsSuite": "numerics.InterpreterNumericsSuite.",
}
GROUPS: dict[str, tuple[str, ...]] = {
    # Need a CUDA GPU (pruned from the grid without one: benchmarks/_common.py).
    "gpu": (
        "LiveResourcesSuite",
        "SpeedSuite",
        "MemorySuite",
        "NumericsSuite",
        "ModelStepSuite",
        "MaskedSpeedSuite",
    ),
    # Run anywhere; their figures do not depend on the GPU (the static audit cross-compiles
    # for every architecture), so a CPU machine can record them for every commit.
    "cpu": ("StaticAuditSuite", "InterpreterSpeedSuite", "InterpreterNumericsSuite"),
}
PROGRESS_ENV = "SAFEATTN_BENCH_PROGRESS"  # read by benchmarks/_common.py
LAUNCHES_ENV = "SAFEATTN_BENCH_LAUNCHES"  # read by benchmarks/_common.py


def suite_regex(suite: str) -> str:
    """The anchored asv ``-b`` regex of exactly one suite: ``^speed\\.SpeedSuite\\.``."""
    return "^" + re.escape(SUITES[suite])


def expand_suites(names: list[str], gpu: bool) -> list[str]:
    """Suite and group names -> suites in :data:`SUITES` order; default: all this machine has."""
    if not names:
        names = ["gpu", "cpu"] if gpu else ["cpu"]
    chosen = set()
    for name in names:
        chosen.update(GROUPS.get(name, (name,)))
    if not gpu and chosen & set(GROUPS["gpu"]):
        raise SystemExit(
            f"[run] {', '.join(sorted(chosen & set(GROUPS['gpu'])))} need a usable CUDA GPU, "
            "and this machine has none.\nHINT: --suite cpu, or run on a GPU machine."
        )
    return [s for s in SUITES if s in chosen]


def measured_suites(results: Path, machine: str, commit: str) -> set[str]:
    """Suites with at least one result for ``commit`` on ``machine`` (asv writes a suite's
    results together, at the end of its ``asv run``, so one means the suite ran)."""
    done: set[str] = set()
    for path in (results / machine).glob(f"{commit[:8]}-*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("commit_hash") != commit:
            continue
        names = data.get("results", {})
        done.update(s for s, prefix in SUITES.items() if any(n.startswith(prefix) for n in names))
    return done


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--range", help="commits to measure: A..B, or one revision (HEAD)")
    parser.add_argument("--same", action="store_true", help="no build: import from worktrees")
    parser.add_argument("--quick", action="store_true", help="fewer samples (checks, not data)")
    parser.add_argument(
        "--suite",
        "-s",
        action="append",
        default=[],
        choices=[*SUITES, *GROUPS],
        help="a suite or group (gpu, cpu) to measure, one asv run each (default: all here)",
    )
    parser.add_argument(
        "--bench", "-b", action="append", default=[], help="asv -b regex (one asv run)"
    )
    parser.add_argument(
        "--skip-existing", action="store_true", help="skip suites measured for a commit"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        default=0.0,
        help="start no suite after this many seconds (0: no limit); resume with --skip-existing",
    )
    parser.add_argument(
        "--mirror", type=Path, help="copy the results dir here after every suite (e.g. $OUT)"
    )
    parser.add_argument(
        "--launch-method",
        choices=("forkserver", "spawn"),
        default="forkserver",
        help="how asv starts each benchmark process (see the module docstring)",
    )
    parser.add_argument(
        "--no-prewarm",
        action="store_true",
        help="skip warming the compile caches in parallel before the GPU suites",
    )
    parser.add_argument("--results", type=Path, default=REPO / "results", help="results dir")
    parser.add_argument(
        "--status",
        type=Path,
        default=Path(os.environ[STATUS_ENV]) if os.environ.get(STATUS_ENV) else None,
        help=f"keep a JSON file of the run's progress here (default: ${STATUS_ENV}, if set)",
    )
    args = parser.parse_args(argv)
    if args.suite and args.bench:
        parser.error("--suite and --bench select benchmarks two ways: give one of them")

    started = time.time()
    status = Status(args.status)
    status.update(step="reading this machine's versions")
    try:
        code = _run(args, started, status)
    except BaseException:
        status.update(finished=time.time(), exit_status=1, step="stopped")
        raise
    status.update(finished=time.time(), exit_status=code)
    return code


def _run(args: argparse.Namespace, started: float, status: Status) -> int:
    info = versions()
    machine = machine_name(info)
    gpu = info["gpu"]["name"] if info["gpu"] else "none"
    log(f"machine {machine} (GPU {gpu}, torch {info['torch']}, triton {info['triton']})")
    if args.bench:
        selections = [("-b " + " -b ".join(args.bench), args.bench)]
    else:
        suites = expand_suites(args.suite, info["gpu"] is not None)
        selections = [(s, [suite_regex(s)]) for s in suites]
    status.update(machine=machine, suites=[name for name, _ in selections])
    results = args.results.resolve()
    results.mkdir(parents=True, exist_ok=True)
    bench_json = results / "benchmarks.json"
    before = json.loads(bench_json.read_text()) if bench_json.exists() else None

    env = dict(os.environ, PIP_NO_INDEX="1", PYTHONUNBUFFERED="1")
    env.pop(QUICK_ENV, None)
    if args.quick:
        env[QUICK_ENV] = "1"
    common = ["--machine", machine, "--launch-method", args.launch_method, "--show-stderr"]
    # Raw samples are kept: the gate's rank test compares commits sample by sample.
    common += ["--record-samples"] + ["--quick"] * args.quick
    # asv's own per-benchmark skip (a rerun after a kill, a suite whose grid grew).
    common += ["--skip-existing"] * args.skip_existing

    timings: list[tuple[str, str, str]] = []  # (commit, selection, outcome)
    failed = False
    with tempfile.TemporaryDirectory(prefix="safeattn-asv-") as tmp:
        config = write_config(results, Path(tmp))
        env[PROGRESS_ENV] = str(Path(tmp) / "progress.log")
        env.pop(STATUS_ENV, None)  # the status file is this script's alone
        status.update(step="registering the machine with asv")
        if asv(["machine", "--yes", "--machine", machine], env, config) != 0:
            raise SystemExit("[run] asv machine failed")
        if args.same:
            env_base = dict(env)
        else:
            check_offline_prerequisites(env)
            host = host_paths()
            if host:
                env["ASV_PYTHONPATH"] = os.pathsep.join(host)
                log(f"benchmark environment also sees {', '.join(host)}")
        if args.same and args.range is None:
            if git("status", "--porcelain", "--untracked-files=no"):
                log("WARNING: the working tree has uncommitted changes; recorded as HEAD anyway")
            targets = [git("rev-parse", "HEAD")]  # the working tree, recorded as HEAD
        else:
            targets = commits_in(args.range or "HEAD")

        gpu_suites = [name for name, _ in selections if name in GROUPS["gpu"]]
        if gpu_suites and not args.no_prewarm and not args.quick:
            status.update(step="prewarm: compiling the GPU suites' kernels")
            prewarm(env)
        status.update(commits=len(targets))

        for i, sha in enumerate(targets, 1):
            subject = git("log", "-1", "--format=%s", sha)
            log(f"commit {i}/{len(targets)} {sha[:8]}: {subject}")
            status.update(commit_index=i, commit=sha, subject=subject)
            todo = selections
            if args.skip_existing and not args.bench:
                done = measured_suites(results, machine, sha)
                todo = [(name, regexes) for name, regexes in selections if name not in done]
                if done:
                    log(f"already measured here, skipped: {', '.join(sorted(done))}")
            tree = None
            if args.same and args.range is not None:
                if not todo:
                    continue
                tree = Path(tmp) / "worktrees" / sha[:12]
                git("worktree", "add", "--detach", str(tree), sha)
            try:
                for name, regexes in todo:
                    elapsed = time.time() - started
                    if args.budget_s and elapsed >= args.budget_s:
                        log(
                            f"budget of {args.budget_s:.0f} s used ({elapsed:.0f} s): not starting "
                            f"{name} on {sha[:8]}; rerun with --skip-existing to resume"
                        )
                        timings.append((sha, name, "not started (budget)"))
                        raise _BudgetUsed
                    if args.same:
                        env = dict(env_base)
                        paths = [str(tree or REPO), os.environ.get("PYTHONPATH", "")]
                        env["ASV_PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
                        cmd = ["run", "--python=same", f"--set-commit-hash={sha}"]
                    else:
                        cmd = ["run", f"{sha}^!"]
                    suite_start = time.time()
                    index = [n for n, _ in selections].index(name) + 1
                    status.update(suite=name, suite_index=index, suite_started=suite_start,
                                  step="starting asv", step_fraction=None)  # fmt: skip
                    env[LAUNCHES_ENV] = str(Path(tmp) / f"launches-{sha}.jsonl")
                    code = asv(
                        [*cmd, *common, *(f"--bench={r}" for r in regexes)], env, config, status
                    )
                    seconds = time.time() - suite_start
                    outcome = f"{seconds:.0f} s" + (f" (asv exit status {code})" if code else "")
                    failed = failed or code != 0
                    timings.append((sha, name, outcome))
                    log(f"{name} on {sha[:8]}: {outcome}")
                    status.update(done=status.data["done"] + 1)
                    write_sidecars(results, machine, started, info, Path(tmp))
                    if args.mirror:
                        shutil.copytree(results, args.mirror / results.name, dirs_exist_ok=True)
            except _BudgetUsed:
                break
            finally:
                if tree is not None:
                    git("worktree", "remove", "--force", str(tree))

    merge_benchmarks_json(bench_json, before)
    done = write_sidecars(results, machine, started, info)
    if args.mirror:
        shutil.copytree(results, args.mirror / results.name, dirs_exist_ok=True)
    log(f"versions sidecars for {len(done)} commit(s): {', '.join(c[:8] for c in done)}")
    for sha, name, outcome in timings:
        log(f"  {sha[:8]}  {name:<26} {outcome}")
    log(f"done in {time.time() - started:.0f} s; results in {results / machine}")
    return 1 if failed else 0


def prewarm(env: dict) -> None:
    """Compile the GPU suites' kernels in parallel processes first (tools/prewarm.py):
    the suites then find them in Triton's and Inductor's disk caches."""
    start = time.time()
    log("prewarm: compiling the GPU suites' kernels in parallel (--no-prewarm skips this)")
    code = subprocess.run(
        [sys.executable, "-m", "tools.prewarm"], cwd=REPO, env=env
    ).returncode
    log(f"prewarm: {time.time() - start:.0f} s" + (f" (exit status {code})" if code else ""))


class _BudgetUsed(Exception):
    """Raised inside the commit loop when --budget-s is used up."""


if __name__ == "__main__":
    sys.exit(main())
