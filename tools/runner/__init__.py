"""The pieces of the asv runner ``tools/run.py`` (which keeps the command line and the order
of work), one responsibility each:

- ``machine``: what this machine is (GPU or CPU, software versions) and its asv name;
- ``suites``: the suites and groups a run selects, their anchored ``-b`` regexes, and the
  suites a commit already has results for;
- ``invocation``: the commits (git), asv's config and benchmark environment, and an asv
  run that echoes the suites' progress file;
- ``status``: the JSON status file the dashboard shows while a run goes;
- ``results``: what a run writes beside asv's results (the versions sidecars with the
  launched configs; benchmarks.json kept a union).

- ``gpus``: all GPUs of a host (``--gpus``): one run per GPU, commits from a shared queue.

Here: the repository root, the runner's log line and a cross-process lock, which every
piece shares.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import tempfile
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


@contextlib.contextmanager
def locked(what: Path | str) -> Iterator[None]:
    """Hold a host-wide exclusive lock named after ``what`` (a path or a name) while the
    block runs: runs of one host (``--gpus``) serialise their writes to a shared results
    directory, git worktree and asv's machine file. The lock file lives in the system
    temporary folder, not beside the results (which the dashboard and git read)."""
    name = hashlib.sha256(str(Path(what).resolve() if isinstance(what, Path) else what).encode())
    path = Path(tempfile.gettempdir()) / f"safeattn-run-{name.hexdigest()[:16]}.lock"
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def log(message: str) -> None:
    print(f"[run] {message}", flush=True)
