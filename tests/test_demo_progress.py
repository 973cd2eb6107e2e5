"""The pieces of ``make demo`` that run without a browser: tools/run.py's status file
and what the dashboard makes of it (dashboard/progress.py), and the launcher's stopping of a
process tree (tools/demo.py). ``tests/test_demo.py`` runs the whole of it."""

from __future__ import annotations

import json
import subprocess
import sys
import time

# _serve puts the checkout on sys.path: `dashboard` and `benchmarks` are not installed.
from _serve import REPO

from dashboard import progress
from tools import demo
from tools.runner import status as run_status


def test_status_file_follows_the_run_and_the_dashboard_reads_it(tmp_path):
    path = tmp_path / "status.json"
    status = run_status.Status(path)
    status.update(machine="cpu-test", suites=["StaticAuditSuite", "InterpreterSpeedSuite"])
    assert progress.describe(progress.read_status(path)).headline.endswith("setting up")
    status.update(commits=1, commit_index=1, suite="StaticAuditSuite", suite_index=1)
    status.step("[audit] 30/120 compiled")
    shown = progress.describe(progress.read_status(path), now=status.data["started"] + 75)
    assert shown.headline == "Benchmarking cpu-test: suite 1 of 2, StaticAuditSuite"
    assert shown.step == "[audit] 30/120 compiled"
    assert shown.fraction == 0.125 and shown.elapsed_s == 75 and not shown.finished
    status.update(done=1, suite="InterpreterSpeedSuite", suite_index=2)
    status.step("[speed-cpu] forward float32 D=64 done (3.1 s)")  # no i/n: the suite's share
    assert progress.describe(progress.read_status(path)).fraction == 0.5
    status.update(done=2, finished=status.data["started"] + 130, exit_status=0)
    shown = progress.describe(progress.read_status(path), now=status.data["started"] + 999)
    assert shown.finished and not shown.failed and shown.fraction == 1.0
    assert shown.headline == "Benchmark of cpu-test finished after 2:10"
    status.update(exit_status=2)
    assert progress.describe(progress.read_status(path)).failed


def test_no_status_no_display(tmp_path, monkeypatch):
    monkeypatch.delenv(progress.STATUS_ENV, raising=False)
    assert progress.read_status() is None
    (tmp_path / "half.json").write_text('{"schema": "safeattn-bench-')  # mid-write
    assert progress.read_status(tmp_path / "half.json") is None
    (tmp_path / "other.json").write_text(json.dumps({"schema": "something-else/1"}))
    assert progress.read_status(tmp_path / "other.json") is None
    assert progress.STATUS_ENV == run_status.STATUS_ENV == demo.STATUS_ENV
    assert progress.STATUS_SCHEMA == run_status.STATUS_SCHEMA


def test_run_py_writes_its_status_and_a_failure_ends_it(tmp_path):
    """A run that cannot start (a GPU suite on a CPU machine) still leaves a finished,
    failed status for the dashboard, not a bar stuck mid-way."""
    path = tmp_path / "status.json"
    cmd = [sys.executable, "tools/run.py", "--status", str(path), "-s", "SpeedSuite",
           "--results", str(tmp_path / "results")]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)
    status = json.loads(path.read_text())
    if proc.returncode == 0:  # a GPU machine measured it: a finished, successful run
        assert status["exit_status"] == 0 and status["finished"]
        return
    assert "need a usable CUDA GPU" in proc.stderr + proc.stdout
    assert status["finished"] and status["exit_status"] == 1
    assert progress.describe(status).failed


def test_stop_ends_a_process_and_everything_it_started():
    script = (
        "import subprocess, sys, time;"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']);"
        "time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 20
    while not demo._children(parent.pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    [child] = demo._children(parent.pid)
    demo.stop(parent, wait_s=5)
    assert parent.poll() is not None
    assert not demo._alive(child)
