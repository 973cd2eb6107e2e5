"""Helpers shared by the tests that serve the dashboard with ``streamlit run`` and look at
it (``test_compose.py``, ``test_dashboard_browser.py``, ``test_demo.py``): the CI rule for
a missing Chromium or Playwright, an HTTP GET, and waiting for Streamlit's health endpoint.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# `dashboard` is not an installed package (only `safeattn` is): import it from the checkout.
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools.browser import find_chromium  # noqa: E402

ON_CI = os.environ.get("CI") == "true"


def require_chromium() -> str:
    """Chromium's path, once Playwright (which drives it) is importable too; with ``CI=true``
    a missing one fails the test, else skips it."""
    if importlib.util.find_spec("playwright") is None:
        if ON_CI:
            pytest.fail("Playwright is missing on CI: the test extra installs it")
        pytest.skip("Playwright is not installed (pip install -e '.[test]')")
    path = find_chromium()
    if path is None:
        if ON_CI:
            pytest.fail("Chromium is missing on CI: .ci/run installs Debian's chromium package")
        pytest.skip("no Chromium on this machine (apt-get install -y chromium)")
    return path


def http_get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.status, response.read().decode(errors="replace")


def wait_for_health(
    base: str,
    server: subprocess.Popen,
    log_path: Path,
    timeout_s: float,
    what: str,
    progress: Callable[[], None] | None = None,
    progress_every_s: float = 30.0,
) -> None:
    """Poll ``{base}/_stcore/health`` until it answers ``ok``.

    Fails the test, with the tail of ``log_path`` (the server's output), as soon as
    ``server`` exits or after ``timeout_s``; ``what`` names the command in that message.
    ``progress`` (if given) is called every ``progress_every_s`` seconds while waiting.
    """
    start = time.monotonic()
    last_progress = start
    while True:
        try:
            if http_get(f"{base}/_stcore/health")[1].strip() == "ok":
                return
        except OSError:
            pass
        now = time.monotonic()
        if server.poll() is not None or now > start + timeout_s:
            pytest.fail(
                f"{what} did not answer ok on {base}/_stcore/health "
                f"(exit code {server.poll()}, after {now - start:.0f} s):\n"
                + log_path.read_text(errors="replace")[-4000:]
            )
        if progress is not None and now - last_progress >= progress_every_s:
            progress()
            last_progress = now
        time.sleep(0.3)
