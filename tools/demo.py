"""``make demo``: serve the dashboard at once, then benchmark this machine beside it.

    python -m tools.demo [--port 8501] [run.py arguments ...]

1. Starts ``streamlit run dashboard/app.py`` over ``results/`` (the committed GPU history)
   and prints ``[demo] dashboard on http://localhost:8501 ...`` straight away; a second
   ``[demo]`` line says when it answers.
2. Runs ``tools/run.py`` (this machine's HEAD, every suite it has; extra arguments, then
   those in ``$SAFEATTN_DEMO_RUN_ARGS``, go to run.py) with ``--status``: the dashboard
   shows the run's suite, step, elapsed time and a progress bar, and this machine's results
   once it finishes.
3. Keeps serving until Ctrl-C (SIGINT) or SIGTERM, which stop both: the benchmark with
   every process it started, and Streamlit.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # `python tools/demo.py` as well as `python -m tools.demo`
    sys.path.insert(0, str(REPO))

from tools.runner.status import STATUS_ENV  # noqa: E402

# More run.py arguments, for a caller that cannot add them to `make demo`'s command line
# (tests/test_demo.py: --quick, as it checks the pipeline, not the numbers).
RUN_ARGS_ENV = "SAFEATTN_DEMO_RUN_ARGS"


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def _children(pid: int) -> list[int]:
    """Every process descended from ``pid`` (Linux /proc), deepest last."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    found, todo = [], [pid]
    while todo:
        kids = parents.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop(proc: subprocess.Popen | None, wait_s: float = 10.0) -> None:
    """SIGTERM ``proc`` and everything it started (asv and its benchmark processes), then
    SIGKILL whatever is left after ``wait_s``."""
    if proc is None or proc.poll() is not None:
        return
    pids = [proc.pid, *_children(proc.pid)]  # before any dies and its children move away
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            proc.poll()  # reap our own child
            pids = [pid for pid in pids if _alive(pid)]
            if not pids:
                return
            time.sleep(0.2)


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
            return response.read().decode().strip() == "ok"
    except OSError:
        return False


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8501)
    args, run_args = parser.parse_known_args(argv)
    run_args += shlex.split(os.environ.get(RUN_ARGS_ENV, ""))
    url = f"http://localhost:{args.port}"

    signal.signal(signal.SIGTERM, _interrupt)  # as Ctrl-C: one way out, the finally below
    status_dir = tempfile.mkdtemp(prefix="safeattn-demo-")
    status = Path(status_dir) / "status.json"
    env = dict(os.environ, SAFEATTN_RESULTS=str(REPO / "results"), **{STATUS_ENV: str(status)})
    server = bench = None
    try:
        server = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", "dashboard/app.py",
             f"--server.port={args.port}", "--server.headless=true",
             "--browser.gatherUsageStats=false"],
            cwd=REPO, env=env,
        )  # fmt: skip
        say(f"dashboard on {url} (the GPU history now; this machine's run below appears "
            "there as it goes and when it finishes). Ctrl-C stops both.")  # fmt: skip
        started = time.monotonic()
        bench = subprocess.Popen(
            [sys.executable, "tools/run.py", "--status", str(status), *run_args],
            cwd=REPO, env=env,
        )  # fmt: skip
        announced = False
        while bench.poll() is None:
            if not announced and answers(url):
                say(f"dashboard answers on {url} ({time.monotonic() - started:.0f} s)")
                announced = True
            if server.poll() is not None:
                say(f"the dashboard stopped (exit status {server.returncode}); stopping the run")
                return 1
            time.sleep(0.5)
        outcome = "finished" if bench.returncode == 0 else f"failed (exit {bench.returncode})"
        say(f"benchmark {outcome} after {time.monotonic() - started:.0f} s; its results are "
            f"on {url}. Ctrl-C stops the dashboard.")  # fmt: skip
        server.wait()
        return server.returncode or bench.returncode
    except KeyboardInterrupt:
        say("stopping the benchmark and the dashboard")
        return 130
    finally:
        stop(bench)
        stop(server)
        shutil.rmtree(status_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
