"""The dashboard in a real browser: ``streamlit run`` on localhost, headless Chromium.

Checks the health endpoint, loads every page, fails on any Streamlit exception box, and
saves a screenshot per page (under pytest's tmp dir; ``DASHBOARD_SCREENSHOTS=DIR`` keeps
them elsewhere). With ``CI=true`` a missing Chromium is a failure, not a skip.
"""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import pytest

# _serve also puts the checkout on sys.path: `dashboard` is not an installed package.
from _serve import require_chromium

from dashboard.browser import Chromium, serve
from dashboard.sample_results import cached_sample_results
from dashboard.views import PAGES, page_path

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def chromium() -> str:
    return require_chromium()


@pytest.fixture(scope="module")
def results_dir() -> Path:
    # Real asv runs (dashboard.sample_results), made once per process and shared with
    # the AppTest module.
    return cached_sample_results()


def test_every_page_loads_in_chromium(
    chromium: str, results_dir: Path, tmp_path: Path
) -> None:
    shots = Path(os.environ.get("DASHBOARD_SCREENSHOTS", tmp_path))
    shots.mkdir(parents=True, exist_ok=True)
    with serve(results_dir) as base:
        with urllib.request.urlopen(f"{base}/_stcore/health", timeout=10) as r:
            assert r.status == 200 and r.read().decode().strip() == "ok"
        with Chromium(chromium) as browser:
            for name, title in PAGES.items():
                seen = browser.check_page(f"{base}/{page_path(name)}")
                (shots / f"{name}.png").write_bytes(seen.png)
                assert not seen.exceptions, f"{name}: {seen.exceptions}"
                assert not seen.dialogs, f"{name}: {seen.dialogs}"  # e.g. "Page not found"
                # the page really rendered (not a blank or an error screen)
                assert seen.title, f"{name}: no heading"
                assert seen.png.startswith(b"\x89PNG") and len(seen.png) > 10_000
                assert title.lower() in seen.title.lower(), seen.title
                # st.navigation drew the sidebar: every page's title and the results field
                # (a direct visit to /<page> must not bypass the entry point)
                for other in PAGES.values():
                    assert other in seen.sidebar, f"{name}: {other!r} not in the sidebar"
                assert "asv results directory" in seen.sidebar, seen.sidebar


def test_the_check_catches_an_exception_box(chromium: str, tmp_path: Path) -> None:
    """The exception check is not vacuous: a page that raises is caught."""
    broken = tmp_path / "broken_app.py"
    broken.write_text(
        "import streamlit as st\n"
        "st.title('broken')\n"
        "raise RuntimeError('planted failure')\n"
    )
    with serve(tmp_path, app=broken) as base, Chromium(chromium) as browser:
        seen = browser.check_page(base)
    assert seen.exceptions and "planted failure" in seen.exceptions[0]
