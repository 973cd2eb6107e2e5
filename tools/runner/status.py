"""The run's status file (``--status FILE`` or ``$SAFEATTN_BENCH_STATUS``): where the run
is, rewritten at every step; the dashboard shows it as a progress bar while ``make demo``
measures this machine (dashboard/progress.py reads it)."""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from tools.runner import log

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
