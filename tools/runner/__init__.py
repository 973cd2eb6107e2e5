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

Here: the repository root and the runner's log line, which every piece shares.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent


def log(message: str) -> None:
    print(f"[run] {message}", flush=True)
