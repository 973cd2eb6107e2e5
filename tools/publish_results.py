r"""Publish one machine's asv results to a git branch that many GPU runners share:
``python tools/publish_results.py [options]``.

    python tools/publish_results.py                          # this checkout's HEAD
    python tools/publish_results.py --commit 15daeaa4 --machine nvidia-h200
    python tools/publish_results.py --all-commits --machine nvidia-h200   # a backfill

Each GPU runner measures a commit into its own ``results/`` and calls this to add its files to
one store: the branch ``benchmark-results`` (``--branch``) of ``origin`` (``--remote``), an
orphan branch that holds only ``results/`` (created by the first publish). The dashboard
follows that branch (``tools/follow_results.py``).

Why several runners pushing at once never lose a result:

- asv writes one file per machine and commit (``<machine>/<sha8>-<env>.json``, the
  ``versions-<sha>.json`` sidecar, the machine's ``machine.json``), so runners never write
  the same file unless they measure the same machine *and* commit (then, as in one results
  directory, the last run wins). Only ``benchmarks.json`` is shared: it is merged as a union
  (``tools/runner/results.union_benchmarks``: this machine's descriptions
  win for the benchmarks it has, the branch keeps the others).
- Every attempt fetches the branch's tip and builds a new commit on it; the push is a plain
  fast-forward push, never forced. If another runner pushed first, the push is rejected, and
  the next attempt fetches again and rebuilds on the new tip, after a short random pause
  (``--attempts``, ``--backoff-s``); after the last attempt it stops with an error.

The commit is built with git's plumbing and a temporary index file (``read-tree`` of the tip,
``update-index`` with this machine's files, ``write-tree``, ``commit-tree``): nothing is
checked out, so the checkout's working tree, index and ``HEAD`` stay as they were, and the
push goes through the checkout's own remote configuration (the credentials that
``actions/checkout`` stored), which a temporary clone would not have. Only git (through
subprocess) and the standard library are used.

Exit status: 0 published (or the branch already had every file), 1 the push failed (rejected
every time, or git failed), 2 bad input (no results directory, no files for that machine or
commit). ``SAFEATTN_PUBLISH_RACE_DELAY_S`` (a test hook) waits that many seconds between the
first fetch and the first push, to make two runners' attempts overlap.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

if not __package__:  # run as a script (python tools/publish_results.py): import tools.runner
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # from the repository root

from tools.runner.results import union_benchmarks

DEFAULT_REMOTE = "origin"
DEFAULT_BRANCH = "benchmark-results"
BRANCH_DIR = "results"  # the one folder at the top of the results branch
RACE_DELAY_ENV = "SAFEATTN_PUBLISH_RACE_DELAY_S"
# Used for the results commits when git knows no identity (a CI runner without user.email).
FALLBACK_IDENTITY = ("safeattn results", "safeattn-results@localhost")
_FULL_SHA = re.compile(r"[0-9a-f]{40}")
# What git says (LC_ALL=C) when a push lost a race: the branch moved since our fetch
# ("[rejected] ... (fetch first)", "non-fast-forward"), or a concurrent push held or moved the
# ref on the remote ("[remote rejected] ... (failed to update ref)", "cannot lock ref").
_REJECTED = re.compile(r"rejected|non-fast-forward|fetch first|cannot lock ref|stale info")


class PublishError(RuntimeError):
    """The results could not be published (git failed, or every push was rejected)."""


def log(message: str) -> None:
    print(f"[publish] {message}", flush=True)


def _git(repo: Path, *args: str, stdin: bytes | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """``git -C repo args``, never raising; LC_ALL=C so that its messages can be matched."""
    full_env = {**os.environ, **(env or {}), "LC_ALL": "C"}
    return subprocess.run(["git", "-C", str(repo), *args], input=stdin, capture_output=True,
                          env=full_env, check=False)


def _git_out(repo: Path, *args: str, stdin: bytes | None = None,
             env: dict[str, str] | None = None) -> str:
    """``git -C repo args``' stdout, stripped; :class:`PublishError` with its stderr if it fails."""
    proc = _git(repo, *args, stdin=stdin, env=env)
    if proc.returncode != 0:
        raise PublishError(f"git {' '.join(args)} failed in {repo}:\n{_output(proc)}")
    return proc.stdout.decode().strip()


def _output(proc: subprocess.CompletedProcess[bytes]) -> str:
    return (proc.stdout + proc.stderr).decode(errors="replace").strip()


# ------------------------------------------------------------------ what this machine has


def resolve_commits(repo: Path, revisions: Sequence[str]) -> list[str]:
    """Full hashes of ``revisions``; a full hash is taken as it is (results of a commit this
    checkout does not have can still be published)."""
    shas = []
    for rev in revisions:
        if _FULL_SHA.fullmatch(rev):
            shas.append(rev)
            continue
        proc = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
        if proc.returncode != 0:
            raise ValueError(f"{rev!r} is not a commit of the repository {repo}")
        shas.append(proc.stdout.decode().strip())
    return list(dict.fromkeys(shas))


def _result_files(machine_dir: Path) -> dict[str, list[Path]]:
    """asv's result files of one machine directory, by the full commit hash they record."""
    by_commit: dict[str, list[Path]] = {}
    for path in sorted(machine_dir.glob("*.json")):
        if path.name == "machine.json" or path.name.startswith("versions-"):
            continue
        try:
            commit = json.loads(path.read_text()).get("commit_hash")
        except (OSError, ValueError, AttributeError) as exc:
            raise ValueError(f"{path} is not a readable asv result file ({exc})") from None
        if isinstance(commit, str) and commit:
            by_commit.setdefault(commit, []).append(path)
    return by_commit


def machines_with(results: Path, commits: Sequence[str]) -> list[str]:
    """The machines of ``results`` with a result file for any of ``commits`` (asv names a
    result file after the commit's first 8 characters)."""
    _check_results_dir(results)
    return sorted(
        d.name for d in results.iterdir()
        if d.is_dir() and any(next(d.glob(f"{sha[:8]}-*.json"), None) for sha in commits)
    )


def _check_results_dir(results: Path) -> None:
    if not results.is_dir():
        raise ValueError(f"no results directory {results} (run tools/run.py first, or pass "
                         "--results DIR)")


def machine_files(results: Path, machine: str, commits: Sequence[str]) -> dict[str, Path]:
    """What to publish: ``{path on the branch: local file}`` for ``machine``'s result files
    of ``commits``, their ``versions-<sha>.json`` sidecars and its ``machine.json``. Raises
    ValueError, saying what there is instead, when the directory, the machine or a commit's
    result file is missing."""
    _check_results_dir(results)
    machine_dir = results / machine
    if not machine_dir.is_dir():
        there = sorted(d.name for d in results.iterdir() if d.is_dir())
        raise ValueError(f"no files for machine {machine!r} in {results} "
                         f"(machines there: {', '.join(there) or 'none'})")
    by_commit = _result_files(machine_dir)
    files: dict[str, Path] = {}
    for sha in commits:
        if sha not in by_commit:
            have = ", ".join(c[:8] for c in sorted(by_commit)) or "none"
            raise ValueError(f"no result file for commit {sha[:8]} of machine {machine!r} in "
                             f"{machine_dir} (commits there: {have})")
        sidecar = machine_dir / f"versions-{sha}.json"
        for path in [*by_commit[sha], *([sidecar] if sidecar.exists() else [])]:
            files[f"{BRANCH_DIR}/{machine}/{path.name}"] = path
    if (machine_dir / "machine.json").exists():
        files[f"{BRANCH_DIR}/{machine}/machine.json"] = machine_dir / "machine.json"
    return files


# -------------------------------------------------------------------------- git plumbing


def fetch_tip(repo: Path, remote: str, branch: str) -> str | None:
    """The branch's tip on ``remote``, fetched into this repository; None if it has no such
    branch yet."""
    proc = _git(repo, "fetch", "--no-tags", "--quiet", remote, f"refs/heads/{branch}")
    if proc.returncode != 0:
        if "couldn't find remote ref" in _output(proc):
            return None
        raise PublishError(f"could not fetch {branch} from {remote}:\n{_output(proc)}")
    return _git_out(repo, "rev-parse", "FETCH_HEAD")


def _identity(repo: Path) -> dict[str, str]:
    """Environment for ``commit-tree``: the fallback identity when git has none."""
    idents = ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT")
    if all(_git(repo, "var", ident).returncode == 0 for ident in idents):
        return {}
    name, email = FALLBACK_IDENTITY
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


def build_commit(repo: Path, tip: str | None, files: dict[str, Path],
                 benchmarks: dict | None, message: str) -> str | None:
    """A commit on ``tip`` (or an orphan) whose tree is ``tip``'s with ``files`` added or
    replaced and ``results/benchmarks.json`` the union; None when that tree is ``tip``'s
    (the branch already has everything). Written to ``repo``'s object store only."""
    with tempfile.TemporaryDirectory(prefix="safeattn-publish-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git_out(repo, "read-tree", *([tip] if tip else ["--empty"]), env=env)
        entries = dict(files)
        if benchmarks is not None:
            theirs = _branch_benchmarks(repo, tip) if tip else None
            merged = Path(tmp) / "benchmarks.json"
            merged.write_text(json.dumps(union_benchmarks(benchmarks, theirs), indent=4,
                                         sort_keys=True) + "\n")
            entries[f"{BRANCH_DIR}/benchmarks.json"] = merged
        paths = list(entries)
        stdin = "".join(f"{entries[p].resolve()}\n" for p in paths).encode()
        # --no-filters: the bytes as they are, whatever the checkout's .gitattributes say.
        blobs = _git_out(repo, "hash-object", "-w", "--no-filters", "--stdin-paths",
                         stdin=stdin).split()
        index_info = "".join(f"100644 {blob}\t{p}\n" for p, blob in zip(paths, blobs, strict=True))
        _git_out(repo, "update-index", "--add", "--index-info", stdin=index_info.encode(), env=env)
        tree = _git_out(repo, "write-tree", env=env)
    if tip and tree == _git_out(repo, "rev-parse", f"{tip}^{{tree}}"):
        return None
    parents = ["-p", tip] if tip else []
    return _git_out(repo, "commit-tree", tree, *parents, "-m", message, env=_identity(repo))


def _branch_benchmarks(repo: Path, tip: str) -> dict | None:
    """The branch's benchmarks.json at ``tip``, or None where it has none."""
    proc = _git(repo, "cat-file", "blob", f"{tip}:{BRANCH_DIR}/benchmarks.json")
    if proc.returncode != 0:
        return None
    try:
        return json.loads(proc.stdout)
    except ValueError as exc:
        raise PublishError(f"{BRANCH_DIR}/benchmarks.json at {tip[:8]} is not JSON ({exc})"
                           ) from None


def _message(machine: str, commits: Sequence[str], n_files: int) -> str:
    shown = " ".join(sha[:8] for sha in commits[:6])
    more = f" (+{len(commits) - 6} more)" if len(commits) > 6 else ""
    return (f"results: {machine} {shown}{more}\n\n{n_files} file(s) published by "
            f"tools/publish_results.py from {socket.gethostname()}.")


# ------------------------------------------------------------------------------ publish


@dataclass(frozen=True)
class Published:
    commit: str  # the branch's tip afterwards
    attempts: int  # how many attempts it took (1: no other runner got in the way)
    pushed: bool  # False: the branch already had every file, nothing was pushed


def publish(results: Path, machine: str, commits: Sequence[str], *, repo: Path = Path("."),
            remote: str = DEFAULT_REMOTE, branch: str = DEFAULT_BRANCH, attempts: int = 6,
            backoff_s: float = 1.0, before_push: Callable[[int], None] | None = None,
            say: Callable[[str], None] = log) -> Published:
    """Add ``machine``'s files for ``commits`` (full hashes) from ``results`` to ``branch``
    of ``remote``, pushing from the git repository ``repo``; see the module docstring.
    ``before_push(attempt)`` runs just before each push (tests line runners up with it).
    Raises ValueError for bad input and :class:`PublishError` when it could not push."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    files = machine_files(results, machine, commits)
    bench_json = results / "benchmarks.json"
    benchmarks = None
    if bench_json.exists():
        try:
            benchmarks = json.loads(bench_json.read_text())
        except ValueError as exc:
            raise ValueError(f"{bench_json} is not JSON ({exc})") from None
    else:
        say(f"no {bench_json}: the branch's benchmarks.json stays as it is")
    message = _message(machine, commits, len(files))
    say(f"{machine}: {len(files)} file(s) for {', '.join(c[:8] for c in commits)} from "
        f"{results} -> {remote} {branch}")
    last = ""
    for attempt in range(1, attempts + 1):
        where = f"attempt {attempt}/{attempts}"
        tip = fetch_tip(repo, remote, branch)
        if attempt == 1 and float(os.environ.get(RACE_DELAY_ENV) or 0) > 0:
            time.sleep(float(os.environ[RACE_DELAY_ENV]))
        commit = build_commit(repo, tip, files, benchmarks, message)
        base = f"{branch} at {tip[:8]}" if tip else f"no {branch} yet (a new orphan branch)"
        if commit is None:
            say(f"{where}: {base} already has every file: nothing to push")
            return Published(str(tip), attempt, pushed=False)
        if before_push is not None:
            before_push(attempt)
        proc = _git(repo, "push", "--porcelain", remote, f"{commit}:refs/heads/{branch}")
        if proc.returncode == 0:
            say(f"{where}: {base}: pushed {commit[:8]}")
            return Published(commit, attempt, pushed=True)
        last = _output(proc)
        if not _REJECTED.search(last):
            raise PublishError(f"git push to {remote} failed (not a race, not retried):\n{last}")
        if attempt < attempts:
            pause = backoff_s * random.uniform(0.5, 1.5)
            say(f"{where}: {base}: push rejected (another runner pushed first?); fetching "
                f"again in {pause:.1f} s")
            time.sleep(pause)
        else:
            say(f"{where}: {base}: push rejected")
    raise PublishError(
        f"gave up after {attempts} attempts: every push to {remote} {branch} was rejected "
        f"(other runners kept pushing, or the remote refuses this branch; nothing was "
        f"force-pushed). git's last answer:\n{last}"
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.all_commits:
            if args.machine is None:
                raise ValueError("--all-commits needs --machine")
            machine = args.machine
            _check_results_dir(args.results)
            machine_dir = args.results / machine
            commits = sorted(_result_files(machine_dir)) if machine_dir.is_dir() else []
            if not commits:
                machine_files(args.results, machine, [])  # no such machine: says which there are
                raise ValueError(f"no result files for machine {machine!r} in {machine_dir}")
        else:
            commits = resolve_commits(args.repo, args.commit or ["HEAD"])
            machine = args.machine or _only_machine(args.results, commits)
        publish(args.results, machine, commits, repo=args.repo, remote=args.remote,
                branch=args.branch, attempts=args.attempts, backoff_s=args.backoff_s)
    except ValueError as exc:
        print(f"[publish] error: {exc}", file=sys.stderr)
        return 2
    except PublishError as exc:
        print(f"[publish] error: {exc}", file=sys.stderr)
        return 1
    return 0


def _only_machine(results: Path, commits: Sequence[str]) -> str:
    """The one machine of ``results`` with results for ``commits`` (a runner's checkout holds
    the committed history of every machine, but results of the commit it just measured only
    from itself)."""
    found = machines_with(results, commits)
    if len(found) != 1:
        what = f"several machines ({', '.join(found)})" if found else "no machine"
        raise ValueError(f"{what} in {results} has results for "
                         f"{', '.join(c[:8] for c in commits)}: name one with --machine")
    return found[0]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Publish one machine's asv results to a shared git branch.")
    parser.add_argument("--results", type=Path, default=Path("results"),
                        help="the local asv results directory (default: results)")
    parser.add_argument("--machine", help="asv machine name (default: the one machine of "
                        "--results with results for the commits)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--commit", action="append",
                       help="a measured commit (repeatable; default: HEAD)")
    which.add_argument("--all-commits", action="store_true",
                       help="every commit the machine has results for (needs --machine)")
    parser.add_argument("--repo", type=Path, default=Path("."),
                        help="the git repository to push from (default: .)")
    parser.add_argument("--remote", default=DEFAULT_REMOTE, help="default: origin")
    parser.add_argument("--branch", default=DEFAULT_BRANCH, help="default: benchmark-results")
    parser.add_argument("--attempts", type=int, default=6,
                        help="fetch-commit-push attempts before giving up (default: 6)")
    parser.add_argument("--backoff-s", type=float, default=1.0,
                        help="mean pause before a retry, randomised ±50%% (default: 1)")
    return parser


if __name__ == "__main__":
    sys.exit(main())
