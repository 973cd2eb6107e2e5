r"""Benchmark this machine with asv: ``python tools/run.py [options]``.

    python tools/run.py                      # HEAD, every suite this machine has
    python tools/run.py --range HEAD~4..HEAD # a commit range (asv's A..B syntax)
    python tools/run.py --skip-existing      # ... leaving suites already measured here
    python tools/run.py --same               # the safeattn importable here, as HEAD
    python tools/run.py --suite gpu          # the GPU suites (or cpu, or suite names)
    python tools/run.py --same -s NumericsSuite --budget-s 480 --mirror "$OUT"
    python tools/run.py --quick -b '^speed\.InterpreterSpeedSuite\.'  # asv -b regexes
    python tools/run.py --gpus all --range HEAD~8..HEAD --same  # every GPU of this host

Select with ``--suite`` (``runner.suites.SUITES``, ``GROUPS``) or with anchored ``-b`` regexes:
asv matches ``-b`` with ``re.search``, so ``-b NumericsSuite`` also selects
``InterpreterNumericsSuite`` (on a GPU machine, the slow interpreter suite). ``--suite
NumericsSuite`` is ``-b '^numerics\.NumericsSuite\.'``.

This file keeps the command line and the order of work; each step's own code lives in
``tools/runner/`` (the machine, the suites, asv's invocation, the status file, the files
written beside the results).

What it does, in order (each step prints a ``[run]`` line; asv prints its own progress):

1. Names the machine after its GPU model (``nvidia-h100-80gb-hbm3``) or, without a usable
   GPU, its CPU model (``cpu-intel-xeon-platinum-8481c``) and registers it with
   ``asv machine --yes``.
2. For each commit (oldest first), for each selected suite (in ``SUITES`` order: GPU
   suites cheapest first, then the CPU-capable ones), runs one ``asv run --show-stderr
   --record-samples`` (the gate's rank test reads the samples) and prints its wall time.
   One asv run per suite costs a few seconds of discovery each, and buys:

   - progress: asv saves results when a run ends, and shows a setup_cache's output only if
     it fails; the suites append one line per grid entry (with its seconds) to a progress
     file that this script prints as it grows (``benchmarks/_grid.progress``);
   - a budget: ``--budget-s S`` starts no suite after S seconds from this script's start;
   - resuming: ``--skip-existing`` skips the suites that already have results for a commit
     on this machine (and passes asv's ``--skip-existing`` for the rest), so a call cut
     short by a budget or a kill loses at most the suite in flight;
   - ``--mirror DIR`` copies the results directory into ``DIR`` after every suite (e.g.
     ``$OUT`` on a machine that hands back only that folder).

   A suite whose asv run fails does not stop the others; the exit status is then 1.
   asv runs with ``--launch-method forkserver``: it imports the suite once and forks a
   process per benchmark, ~0.03 s instead of a fresh interpreter's ~0.2 s, which matters
   with over a thousand cheap look-up processes per commit (benchmarks/_grid.py). Forking
   is safe because nothing initialises CUDA or imports safeattn/triton at import time; every
   measurement starts CUDA in its own forked process. ``--launch-method spawn`` is the
   conservative fallback. Two ways to get the code under test:

   - default: asv's virtualenv environment (asv.conf.json). It sees the machine's torch and
     triton (``VIRTUALENV_SYSTEM_SITE_PACKAGES=true``, plus ``ASV_PYTHONPATH`` for
     ``PYTHONPATH``'s entries and, when this Python is itself a venv, whose packages that
     flag cannot reach, its site-packages: ``runner.invocation.host_paths``; asv 0.6.6 drops
     those entries again inside its benchmark processes, and ``_env.restore_pythonpath`` puts them
     back) and builds and installs each commit with ``pip --no-index --no-deps
     --no-build-isolation``, with ``PIP_NO_INDEX=1`` set: no network needed.
   - ``--same``: no build at all. Each commit is checked out into a temporary git worktree
     (removed afterwards) and imported from there (``ASV_PYTHONPATH``), with
     ``asv run --python=same --set-commit-hash <sha>``; without ``--range`` the current
     working tree is measured and recorded as HEAD (a dirty tree is warned about).
3. Writes ``results/<machine>/versions-<commit sha>.json`` for every commit this run
   measured: GPU, driver, CUDA, cuDNN, torch, triton, Python and asv versions (asv's
   ``machine.json`` has fixed fields; ``runner.machine.versions`` documents this file's),
   and the kernel configs each safeattn combination of the GPU suites launched
   (``runner.results.launches_of``).
4. Keeps ``results/benchmarks.json`` (which asv rewrites from what this machine discovers)
   a union: GPU suites measured elsewhere stay described after a CPU-only run, and during
   it: asv writes into a staging copy, and each suite's files reach ``results/`` when it
   ends (``runner.results.stage`` / ``publish``).

5. With ``--gpus all|0,1,...``, runs one ``tools/run.py`` per commit and GPU instead, all GPUs
   at once, commits handed out from a shared queue (``runner.gpus``; its docstring says how
   results stay whole when several runs write ``results/``).

6. With ``--status FILE`` (or ``SAFEATTN_BENCH_STATUS=FILE``), keeps a small JSON file of
   where the run is (``runner.status.Status``: commit, suite, last progress line, elapsed, done):
   the dashboard shows it as a progress bar while ``make demo`` measures this machine.

On a machine without a GPU only the CPU-capable suites exist (see benchmarks/_env.py).
``--results DIR`` writes elsewhere (the tests use it); ``--quick`` takes fewer samples and
trials and passes asv's ``--quick``: numbers for checking the suite, not for history.
What a commit's suites cost on a GPU: benchmarks/speed.py's module docstring ("Cost").
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if not __package__:  # run as a script (python tools/run.py): tools.runner is imported from
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root

from tools.runner import REPO, gpus, locked, log
from tools.runner.invocation import (
    LAUNCHES_ENV,
    PROGRESS_ENV,
    QUICK_ENV,
    asv,
    check_branches,
    check_offline_prerequisites,
    commits_in,
    git,
    host_paths,
    write_config,
)
from tools.runner.machine import machine_name, versions
from tools.runner.results import publish, stage, write_sidecars
from tools.runner.status import STATUS_ENV, Status
from tools.runner.suites import GROUPS, SUITES, expand_suites, measured_suites, suite_regex


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
        "--gpus", help="measure on several GPUs of this host at once: all, or indices (0,1)"
    )
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
    check_branches()
    if args.gpus:
        return _run_gpus(args, started)
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
        # asv writes into a staging copy; results/ gets each suite's files when it ends
        # (tools.runner.results.stage says why).
        staging = Path(tmp) / "results"
        staged = stage(results, staging, machine)
        config = write_config(staging, Path(tmp))
        env[PROGRESS_ENV] = str(Path(tmp) / "progress.log")
        env.pop(STATUS_ENV, None)  # the status file is this script's alone
        status.update(step="registering the machine with asv")
        register(machine, env, config)
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
            prewarm(env, gpu_suites)
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
                with locked("git-worktrees"):  # one git lock at a time (runs of --gpus)
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
                    publish(staging, results, machine, staged)
                    write_sidecars(results, machine, started, info, Path(tmp), set(targets))
                    if args.mirror:
                        shutil.copytree(results, args.mirror / results.name, dirs_exist_ok=True)
            except _BudgetUsed:
                break
            finally:
                if tree is not None:
                    with locked("git-worktrees"):
                        git("worktree", "remove", "--force", str(tree))
        publish(staging, results, machine, staged)  # machine.json of a run that measured none

    done = write_sidecars(results, machine, started, info, commits=set(targets))
    if args.mirror:
        shutil.copytree(results, args.mirror / results.name, dirs_exist_ok=True)
    log(f"versions sidecars for {len(done)} commit(s): {', '.join(c[:8] for c in done)}")
    for sha, name, outcome in timings:
        log(f"  {sha[:8]}  {name:<26} {outcome}")
    log(f"done in {time.time() - started:.0f} s; results in {results / machine}")
    return 1 if failed else 0


def register(machine: str, env: dict, config: Path) -> None:
    """``asv machine --yes`` unless ``machine`` is registered already: asv rewrites
    ~/.asv-machine.json in place, so runs of ``--gpus`` starting together take turns and only
    the first one writes it."""
    import json

    path = Path.home() / ".asv-machine.json"
    with locked("asv-machine-file"):
        try:
            known = machine in json.loads(path.read_text())
        except (OSError, ValueError):
            known = False
        if not known and asv(["machine", "--yes", "--machine", machine], env, config) != 0:
            raise SystemExit("[run] asv machine failed")


def _run_gpus(args: argparse.Namespace, started: float) -> int:
    """``--gpus``: one ``tools/run.py`` per commit on each chosen GPU (``runner.gpus``)."""
    try:
        chosen = gpus.select(args.gpus, gpus.list_gpus())
    except ValueError as exc:
        raise SystemExit(f"[run] {exc}") from None
    if args.same and args.range is None and git("status", "--porcelain", "--untracked-files=no"):
        log("WARNING: --gpus measures commits: uncommitted changes in the working tree are not")
    targets = commits_in(args.range or "HEAD")
    models = sorted({g.name for g in chosen})
    log(f"{len(targets)} commit(s) on {len(chosen)} GPU(s): "
        + "; ".join(f"{m}: {sum(g.name == m for g in chosen)}" for m in models))  # fmt: skip
    selected = [a for name in args.suite for a in ("--suite", name)]
    selected += [a for regex in args.bench for a in ("--bench", regex)]
    gpu_suites = [name for name in expand_suites(args.suite, True) if name in GROUPS["gpu"]]
    if gpu_suites and not args.bench and not args.no_prewarm and not args.quick:
        prewarm(dict(os.environ, PYTHONUNBUFFERED="1"), gpu_suites)  # once: shared caches
    deadline = started + args.budget_s if args.budget_s else None

    def command(sha: str) -> list[str]:
        cmd = [sys.executable, str(REPO / "tools" / "run.py"), "--range", f"{sha}^!",
               "--no-prewarm", "--results", str(args.results.resolve()),
               "--launch-method", args.launch_method, *selected]  # fmt: skip
        cmd += ["--same"] * args.same + ["--quick"] * args.quick
        cmd += ["--skip-existing"] * args.skip_existing
        if deadline is not None:
            cmd += ["--budget-s", f"{max(deadline - time.time(), 1):.0f}"]
        return cmd

    jobs = gpus.run_all(chosen, targets, command, lambda line: print(line, flush=True), deadline)
    if args.mirror:
        shutil.copytree(args.results, args.mirror / args.results.name, dirs_exist_ok=True)
    for gpu in chosen:
        mine = [j for j in jobs if j.gpu == gpu]
        busy = sum(j.seconds for j in mine)
        log(f"  gpu{gpu.index} ({gpu.name}): {len(mine)} commit(s), busy {busy:.0f} s")
    failed = [j for j in jobs if j.exit_status != 0]
    for job in failed:
        log(f"  FAILED: {job.commit[:8]} on gpu{job.gpu.index} (exit status {job.exit_status})")
    log(f"done in {time.time() - started:.0f} s on {len(chosen)} GPU(s); "
        f"results in {args.results.resolve()}")  # fmt: skip
    if len(jobs) < len(targets) * len(models):
        log(f"{len(targets) * len(models) - len(jobs)} commit run(s) not started (budget): "
            "rerun with --skip-existing to resume")  # fmt: skip
    return 1 if failed else 0


def prewarm(env: dict, suites: list[str]) -> None:
    """Compile the kernels of the selected GPU ``suites`` in parallel processes first
    (tools/prewarm.py): the suites then find them in Triton's and Inductor's disk caches."""
    start = time.time()
    log("prewarm: compiling the GPU suites' kernels in parallel (--no-prewarm skips this)")
    selected = [arg for suite in suites for arg in ("--suite", suite)]
    cmd = [sys.executable, "-m", "tools.prewarm", *selected]
    code = subprocess.run(cmd, cwd=REPO, env=env).returncode
    log(f"prewarm: {time.time() - start:.0f} s" + (f" (exit status {code})" if code else ""))


class _BudgetUsed(Exception):
    """Raised inside the commit loop when --budget-s is used up."""


if __name__ == "__main__":
    sys.exit(main())
