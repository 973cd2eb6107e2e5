"""When the results last came from the shared results branch, as the sidebar says it:
"Results updated 2026-11-28 12:00 UTC (5 min ago) from benchmark-results at 1a2b3c4d".

``tools/follow_results.py`` (the ``results-follower`` compose service) keeps the served
results directory up to date from the branch that the GPU runners publish to and writes
``.follow-status.json`` there after each update. Without that file (a results directory
nobody follows) nothing is shown.

:func:`read_status` and :func:`describe` are plain functions (tests call them); only
:func:`show` uses Streamlit.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

# The follower's names, written again here because the dashboard image ships without tools/;
# tests/test_publish_results.py asserts they agree.
STATUS_NAME = ".follow-status.json"
STATUS_SCHEMA = "safeattn-follow-status/1"


def read_status(results_dir: str | Path) -> dict | None:
    """The follower's status in ``results_dir``, or None (absent, being replaced, foreign)."""
    try:
        status = json.loads((Path(results_dir) / STATUS_NAME).read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) and status.get("schema") == STATUS_SCHEMA else None


def _ago(seconds: float) -> str:
    if seconds < 60:
        return "just now"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 2 * 86400:
        return f"{int(seconds // 3600)} h ago"
    return f"{int(seconds // 86400)} days ago"


def describe(status: dict, now: datetime.datetime | None = None) -> str | None:
    """The sidebar's line for ``status``, or None when it has no readable update time."""
    try:
        updated = datetime.datetime.fromisoformat(str(status["updated_at"]))
    except (KeyError, ValueError):
        return None
    if updated.tzinfo is None:
        updated = updated.replace(tzinfo=datetime.timezone.utc)
    now = now or datetime.datetime.now(datetime.timezone.utc)
    when = updated.astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    line = f"Results updated {when} ({_ago((now - updated).total_seconds())})"
    branch, commit = status.get("branch"), status.get("commit")
    if branch and commit:
        line += f" from `{branch}` at `{str(commit)[:8]}`"
    return line


def show(results_dir: str | Path) -> None:
    """The line under the results-directory field, if a follower keeps that directory."""
    status = read_status(results_dir)
    line = describe(status) if status else None
    if line:
        import streamlit as st

        st.sidebar.caption(line)
