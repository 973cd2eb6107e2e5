"""A benchmark run in flight, as the dashboard shows it while ``make demo`` measures this
machine: suite, step, elapsed time and a progress bar.

``tools/run.py --status FILE`` keeps ``FILE`` up to date (its ``Status`` class
documents the keys); the dashboard reads the path from ``SAFEATTN_BENCH_STATUS``, which
``tools/demo.py`` sets for both. Without that variable nothing is shown.

:func:`read_status` and :func:`describe` are plain functions (tests call them); only
:func:`show` uses Streamlit.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

# The runner's (tools/runner/status.py) names, written again here because the dashboard ships
# without tools/ (its image copies dashboard/ and regress/); tests/test_demo_progress.py
# asserts they agree.
STATUS_ENV = "SAFEATTN_BENCH_STATUS"
STATUS_SCHEMA = "safeattn-bench-status/1"
REFRESH_S = 2.0


def read_status(path: str | Path | None = None) -> dict | None:
    """The run's status (a dict), or None when there is no (readable) status file."""
    path = path or os.environ.get(STATUS_ENV)
    if not path:
        return None
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):  # not written yet, or being replaced
        return None
    return data if data.get("schema") == STATUS_SCHEMA else None


@dataclass(frozen=True)
class Progress:
    headline: str  # e.g. "Benchmarking cpu-amd-epyc: suite 1 of 3, StaticAuditSuite"
    step: str  # the suite's last progress line
    elapsed_s: float
    fraction: float  # 0..1, for the bar
    finished: bool
    failed: bool


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


def describe(status: dict, now: float | None = None) -> Progress:
    """What to show for ``status``: a headline, the step, elapsed seconds and a fraction
    (suites done, plus the running suite's own ``i/n`` where it reports one)."""
    now = time.time() if now is None else now
    machine = status.get("machine") or "this machine"
    suites = status.get("suites") or []
    commits = max(1, int(status.get("commits") or 1))
    total = max(1, len(suites) * commits)
    finished = status.get("finished") is not None
    end = status["finished"] if finished else now
    elapsed = end - float(status.get("started") or end)
    if finished:
        code = status.get("exit_status")
        failed = code not in (0, None)
        verdict = f"failed (exit status {code})" if failed else "finished"
        headline = f"Benchmark of {machine} {verdict} after {_clock(elapsed)}"
        return Progress(headline, status.get("step", ""), elapsed, 1.0, True, failed)
    done = int(status.get("done") or 0)
    fraction = done / total
    if status.get("suite") and status.get("step_fraction") is not None:
        fraction += float(status["step_fraction"]) / total
    if status.get("suite"):
        where = f"suite {status.get('suite_index', '?')} of {len(suites)}, {status['suite']}"
        if commits > 1:
            where = f"commit {status.get('commit_index', '?')} of {commits}, " + where
    else:
        where = "setting up"
    headline = f"Benchmarking {machine}: {where}"
    return Progress(headline, status.get("step", ""), elapsed, min(1.0, fraction), False, False)


def show() -> None:
    """Show the run in flight at the top of the page, refreshed every couple of seconds;
    when it finishes, rerun the whole app once so that the new results appear."""
    if not os.environ.get(STATUS_ENV):
        return
    import streamlit as st

    @st.fragment(run_every=REFRESH_S)
    def _panel() -> None:
        status = read_status()
        if status is None:
            st.caption("Benchmark of this machine: starting…")
            return
        shown = describe(status)
        if shown.finished:
            if shown.failed:
                st.error(f"{shown.headline}: see make demo's output.")
            else:
                st.success(f"{shown.headline}: its results are on every page.")
            # Seen running in this session: rerun the whole app once, so that the pages
            # (cached on the results directory's mtime) load the new machine's results.
            if st.session_state.pop("_bench_was_running", False):
                st.rerun(scope="app")
            return
        st.session_state["_bench_was_running"] = True
        st.progress(shown.fraction, text=f"{shown.headline} · {_clock(shown.elapsed_s)} elapsed")
        st.caption(f"step: {shown.step or '…'}")

    _panel()
