r"""Keep a results directory up to date from the results branch that the GPU runners publish
to (``tools/publish_results.py``): ``python tools/follow_results.py [options]``.

    python tools/follow_results.py --remote https://github.com/OWNER/safeattn.git \
        --dest /srv/safeattn-results --interval-s 60
    python tools/follow_results.py --remote ../safeattn --dest /tmp/results --once

Every ``--interval-s`` seconds it fetches ``--branch`` (default ``benchmark-results``) into a
bare repository of its own (``--git-dir``) and, when the branch moved, copies the branch's
``results/`` into ``--dest``, the directory the dashboard serves (``SAFEATTN_RESULTS``).
docker-compose.yml's ``results-follower`` service runs it beside the dashboard.

Why not a checkout whose ``results/`` is the served directory: ``git checkout`` rewrites a
file in place, and the dashboard could read it half-written; and in Docker the served
directory is a mount, which cannot be swapped for a new one. So each new or changed file is
written beside its target under a hidden temporary name (not ``*.json``: the dashboard
ignores it) and renamed over it, one atomic step per file; unchanged files are not touched
(the dashboard's caches are keyed on the newest modification time under the directory).
``benchmarks.json`` goes first (a union, so it describes every result file already there),
the machines' files next, files the branch deleted since the last update after them.

Last, ``.follow-status.json`` in ``--dest`` records the update (``STATUS_SCHEMA``: the branch,
its commit, ``updated_at``, files written and removed), and the dashboard shows "results
updated ..." from it. It is written only when the branch moved, for the same cache reason:
a quiet branch leaves the directory alone. Options default to environment variables
(``SAFEATTN_FOLLOW_REMOTE``, ``..._BRANCH``, ``..._GIT_DIR``, ``..._INTERVAL_S``,
``SAFEATTN_RESULTS``), which is how the compose service sets them. A failed fetch is logged
and tried again next time; SIGTERM (``docker stop``) or Ctrl-C ends the loop after
the update in progress.

Standalone on purpose (the standard library and git only, nothing from this repository): the
follower image holds this one file.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

STATUS_NAME = ".follow-status.json"  # also dashboard/follow_status.py (no tools/ there)
STATUS_SCHEMA = "safeattn-follow-status/1"
BRANCH_DIR = "results"  # the branch's one folder (tools/publish_results.py)
TMP_SUFFIX = ".follow-tmp"
DEFAULT_BRANCH = "benchmark-results"
DEFAULT_GIT_DIR = Path.home() / ".cache" / "safeattn" / "follow.git"


class FollowError(RuntimeError):
    """The branch could not be fetched or read (the next interval tries again)."""


def log(message: str) -> None:
    print(f"[follow] {message}", flush=True)


def _git(git_dir: Path, *args: str, stdin: bytes | None = None) -> bytes:
    """``git --git-dir=git_dir args``' stdout; :class:`FollowError` with git's message."""
    proc = subprocess.run(["git", f"--git-dir={git_dir}", *args], input=stdin,
                          capture_output=True, env={**os.environ, "LC_ALL": "C"}, check=False)
    if proc.returncode != 0:
        raise FollowError(f"git {' '.join(args)}: {proc.stderr.decode(errors='replace').strip()}")
    return proc.stdout


def redact(remote: str) -> str:
    """``remote`` without a password or token (``https://user:token@host/...``): the status
    file is shown on the dashboard."""
    parts = urllib.parse.urlsplit(remote)
    if parts.username is None and parts.password is None:
        return remote
    host = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    return urllib.parse.urlunsplit(parts._replace(netloc=host))


def fetch(remote: str, branch: str, git_dir: Path) -> str:
    """The branch's tip, fetched from ``remote`` into the bare repository ``git_dir`` (made
    on first use)."""
    if not (git_dir / "HEAD").exists():
        git_dir.mkdir(parents=True, exist_ok=True)
        _git(git_dir, "init", "--bare", "--quiet")
    ref = f"refs/remotes/follow/{branch}"
    try:
        _git(git_dir, "fetch", "--no-tags", "--quiet", remote, f"+refs/heads/{branch}:{ref}")
    except FollowError as exc:
        if "couldn't find remote ref" in str(exc):
            raise FollowError(f"{redact(remote)} has no branch {branch} yet (no runner has "
                              "published)") from None
        raise
    return _git(git_dir, "rev-parse", ref).decode().strip()


def tree_files(git_dir: Path, commit: str) -> dict[str, str]:
    """``{path under results/: blob id}`` of the commit's regular files."""
    out = _git(git_dir, "ls-tree", "-r", "-z", "--full-tree", commit, f"{BRANCH_DIR}/")
    files = {}
    for entry in out.split(b"\0"):
        if not entry:
            continue
        meta, path = entry.decode().split("\t", 1)
        mode, kind, blob = meta.split()
        rel = path.removeprefix(f"{BRANCH_DIR}/")
        parts = rel.split("/")
        if kind != "blob" or mode not in ("100644", "100755") or rel == STATUS_NAME:
            continue
        if any(p in ("", ".", "..") for p in parts):  # nothing outside the served dir
            continue
        files[rel] = blob
    return files


def _blob_id(data: bytes, algorithm: str) -> str:
    """git's object id of a blob holding ``data`` (to compare a served file without git)."""
    return hashlib.new(algorithm, b"blob %d\0" % len(data) + data).hexdigest()


def read_blobs(git_dir: Path, blobs: list[str]) -> dict[str, bytes]:
    """The contents of ``blobs``, read with one ``git cat-file --batch``."""
    out = _git(git_dir, "cat-file", "--batch", stdin="".join(f"{b}\n" for b in blobs).encode())
    contents, pos = {}, 0
    for blob in blobs:
        header_end = out.index(b"\n", pos)
        size = out[pos:header_end].decode().split()[2]  # "<id> blob <size>"
        start = header_end + 1
        contents[blob] = out[start:start + int(size)]
        pos = start + int(size) + 1  # the newline after the contents
    return contents


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` in one rename: a reader sees the old file or the new."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}{TMP_SUFFIX}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def read_status(dest: Path) -> dict:
    """The status file in ``dest`` ({} when absent or unreadable)."""
    try:
        status = json.loads((dest / STATUS_NAME).read_text())
    except (OSError, ValueError):
        return {}
    return status if isinstance(status, dict) and status.get("schema") == STATUS_SCHEMA else {}


@dataclass(frozen=True)
class Update:
    commit: str
    written: list[str]  # paths under dest, in the order written
    removed: list[str]

    @property
    def changed(self) -> bool:
        return bool(self.written or self.removed)


def sync(git_dir: Path, commit: str, dest: Path, previous: str | None) -> Update:
    """Make ``dest`` hold the commit's ``results/``: changed files replaced one by one (see
    the module docstring), files in ``previous``'s tree but not in ``commit``'s removed."""
    dest.mkdir(parents=True, exist_ok=True)
    for stale in [*dest.glob(f".*{TMP_SUFFIX}"), *dest.glob(f"*/.*{TMP_SUFFIX}")]:
        stale.unlink(missing_ok=True)  # left by a follower killed mid-write
    algorithm = _git(git_dir, "rev-parse", "--show-object-format").decode().strip() or "sha1"
    wanted = tree_files(git_dir, commit)
    changed = []
    for rel, blob in wanted.items():
        target = dest / rel
        if not (target.is_file() and _blob_id(target.read_bytes(), algorithm) == blob):
            changed.append(rel)
    # benchmarks.json first: it must describe every result file the dashboard can see.
    changed.sort(key=lambda rel: (rel != "benchmarks.json", rel))
    contents = read_blobs(git_dir, sorted({wanted[rel] for rel in changed}))
    for rel in changed:
        write_atomic(dest / rel, contents[wanted[rel]])
    removed = []
    if previous and previous != commit:
        try:
            before = tree_files(git_dir, previous)
        except FollowError:  # a fresh --git-dir does not have it: nothing to remove
            before = {}
        for rel in sorted(set(before) - set(wanted)):
            if (dest / rel).is_file():
                (dest / rel).unlink()
                removed.append(rel)
    return Update(commit, changed, removed)


def follow_once(remote: str, branch: str, dest: Path, git_dir: Path) -> Update | None:
    """Fetch once and update ``dest`` if the branch moved (None: it had not)."""
    commit = fetch(remote, branch, git_dir)
    status = read_status(dest)
    if status.get("commit") == commit:
        return None
    update = sync(git_dir, commit, dest, status.get("commit"))
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    committed = _git(git_dir, "show", "-s", "--format=%cI", commit).decode().strip()
    status = {"schema": STATUS_SCHEMA, "remote": redact(remote), "branch": branch,
              "commit": commit, "committed_at": committed, "updated_at": now,
              "written": len(update.written), "removed": len(update.removed)}
    write_atomic(dest / STATUS_NAME, (json.dumps(status, indent=2) + "\n").encode())
    return update


def follow(remote: str, branch: str, dest: Path, git_dir: Path, interval_s: float,
           stop: threading.Event) -> None:
    """:func:`follow_once` every ``interval_s`` seconds until ``stop`` is set."""
    log(f"following {redact(remote)} {branch} into {dest} every {interval_s:g} s")
    while not stop.is_set():
        try:
            update = follow_once(remote, branch, dest, git_dir)
        except (FollowError, OSError) as exc:
            log(f"not updated: {exc}")
        else:
            if update is None:
                log("up to date")
            else:
                log(f"{branch} at {update.commit[:8]}: {len(update.written)} file(s) written, "
                    f"{len(update.removed)} removed")
        stop.wait(interval_s)


def main(argv: list[str] | None = None) -> int:
    env = os.environ.get
    parser = argparse.ArgumentParser(
        description="Keep a results directory up to date from the results branch.")
    parser.add_argument("--remote", default=env("SAFEATTN_FOLLOW_REMOTE"),
                        help="git URL or path of the repository ($SAFEATTN_FOLLOW_REMOTE)")
    parser.add_argument("--branch", default=env("SAFEATTN_FOLLOW_BRANCH") or DEFAULT_BRANCH)
    parser.add_argument("--dest", type=Path, default=Path(env("SAFEATTN_RESULTS") or "results"),
                        help="the directory the dashboard serves ($SAFEATTN_RESULTS)")
    parser.add_argument("--git-dir", type=Path,
                        default=Path(env("SAFEATTN_FOLLOW_GIT_DIR") or DEFAULT_GIT_DIR),
                        help="the follower's bare repository ($SAFEATTN_FOLLOW_GIT_DIR)")
    parser.add_argument("--interval-s", type=float,
                        default=float(env("SAFEATTN_FOLLOW_INTERVAL_S") or 60))
    parser.add_argument("--once", action="store_true", help="update once, then exit")
    args = parser.parse_args(argv)
    if not args.remote:
        parser.error("no remote: pass --remote or set SAFEATTN_FOLLOW_REMOTE")
    if args.once:
        try:
            update = follow_once(args.remote, args.branch, args.dest, args.git_dir)
        except (FollowError, OSError) as exc:
            print(f"[follow] error: {exc}", file=sys.stderr)
            return 1
        log("up to date" if update is None else f"{len(update.written)} file(s) written")
        return 0
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):  # docker stop, Ctrl-C: finish the update
        signal.signal(signum, lambda *_: stop.set())
    follow(args.remote, args.branch, args.dest, args.git_dir, args.interval_s, stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
