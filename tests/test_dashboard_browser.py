"""The dashboard in a real browser: ``streamlit run`` on localhost over the project's GPU
history in ``results/``, Debian's Chromium driven by Playwright (:mod:`tools.browser`).

A person's path through it: open the root URL, reach every page through the sidebar's
navigation, follow the overview's link to a commit pair, switch the GPU on the
single-machine pages, narrow the history and the peers pages with their machine and
benchmark pickers and flip the history's toggles. After every step the page must have
finished its script run without a Streamlit exception box or an error dialog, still show
its heading, and carry the widgets' values in its URL (views are shareable). The checks
are about structure (headings, machine names, URLs), not chart contents. Each step's
screenshot lands under pytest's tmp dir (``DASHBOARD_SCREENSHOTS=DIR`` keeps them). With
``CI=true`` a missing Chromium or Playwright is a failure, not a skip.
"""

from __future__ import annotations

import os
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

# _serve also puts the checkout on sys.path: `dashboard` is not an installed package.
from _serve import REPO, require_chromium

from dashboard.views import DEFAULT_PAGE, PAGES, page_path
from tools.browser import Chromium, PageCheck, serve

if TYPE_CHECKING:
    from playwright.sync_api import Locator

pytestmark = pytest.mark.browser

RESULTS = REPO / "results"
# The committed GPU history (README: "Screenshots over the project's real GPU history").
GPU_MACHINES = ("nvidia-h100-80gb-hbm3", "nvidia-h200")
# Pages with one machine picker (a select box) whose value the whole page follows.
SINGLE_MACHINE_PAGES = ("compare", "resources", "numerics")
MACHINE_LABEL = re.compile("machine", re.IGNORECASE)
BENCHMARK_LABEL = re.compile("benchmark", re.IGNORECASE)


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    require_chromium()
    missing = [m for m in GPU_MACHINES if not (RESULTS / m / "machine.json").is_file()]
    assert not missing, f"no committed GPU history for {missing} in {RESULTS}"
    with serve(RESULTS) as url:
        yield url


@pytest.fixture(scope="module")
def browser(base: str) -> Iterator[Chromium]:
    with Chromium(require_chromium(), width=1400, height=1000) as chromium:
        yield chromium


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = Path(os.environ.get("DASHBOARD_SCREENSHOTS") or tmp_path_factory.mktemp("shots"))
    out.mkdir(parents=True, exist_ok=True)
    return out


def healthy(seen: PageCheck, name: str, shots: Path, step: str) -> PageCheck:
    """Save the screenshot; fail on an exception box, a dialog or a page without heading."""
    (shots / f"{name}-{step}.png").write_bytes(seen.png)
    where = f"{name} ({step}, {seen.url})"
    assert not seen.exceptions, f"{where}: exception box:\n" + "\n".join(seen.exceptions)
    assert not seen.dialogs, f"{where}: dialog:\n" + "\n".join(seen.dialogs)
    assert seen.title, f"{where}: no heading; the page shows:\n{seen.text[:2000]}"
    assert PAGES[name].lower() in seen.title.lower(), f"{where}: heading {seen.title!r}"
    assert seen.png.startswith(b"\x89PNG") and len(seen.png) > 10_000, where
    return seen


def query(url: str) -> dict[str, list[str]]:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)


def query_values(url: str) -> set[str]:
    return {v for values in query(url).values() for v in values}


def widget(browser: Chromium, kind: str, label: re.Pattern[str]) -> Locator:
    """The one ``kind`` widget (``stSelectbox``, ``stMultiSelect``) whose label matches."""
    page = browser.page
    found = page.get_by_test_id(kind).filter(has=page.get_by_role("combobox", name=label))
    assert found.count() == 1, f"{page.url}: {found.count()} {kind} labelled {label.pattern!r}"
    return found.first


def machine_picker(browser: Chromium, kind: str = "stSelectbox") -> Locator:
    """The page's machine picker: the ``kind`` widget whose label names a machine."""
    return widget(browser, kind, MACHINE_LABEL)


def test_health_endpoint(base: str) -> None:
    with urllib.request.urlopen(f"{base}/_stcore/health", timeout=10) as r:
        assert r.status == 200 and r.read().decode().strip() == "ok"


def test_navigation_reaches_every_page(browser: Chromium, base: str, shots: Path) -> None:
    seen = healthy(browser.check_page(base), DEFAULT_PAGE, shots, "root")
    # The overview names every GPU of the history.
    missing = [m for m in GPU_MACHINES if m not in seen.text]
    assert not missing, f"the overview does not name {missing}:\n{seen.text[:3000]}"
    nav = browser.page.get_by_test_id("stSidebarNavLink")
    assert len(nav.all_inner_texts()) == len(PAGES), nav.all_inner_texts()
    # Every page through its navigation link, then back to the first.
    for name in [*PAGES, DEFAULT_PAGE]:
        seen = healthy(browser.click(nav.filter(has_text=PAGES[name])), name, shots, "nav")
        path = urllib.parse.urlsplit(seen.url).path.strip("/")
        assert path == page_path(name), f"{name}: the address bar shows {seen.url}"
        # st.navigation drew the sidebar on every page: each title and the results field
        for title in PAGES.values():
            assert title in seen.sidebar, f"{name}: {title!r} not in the sidebar"
        assert "asv results directory" in seen.sidebar, seen.sidebar


def test_overview_links_to_a_commit_pair(browser: Chromium, base: str, shots: Path) -> None:
    healthy(browser.check_page(base), DEFAULT_PAGE, shots, "links")
    links = browser.page.get_by_test_id("stPageLink")
    assert links.count() >= 1, "the overview links to no other page"
    seen = healthy(browser.click(links.first), "compare", shots, "from-overview")
    machine = query(seen.url).get("machine", [""])[0]
    assert machine in GPU_MACHINES, f"the link opened {seen.url}"
    assert machine_picker(browser).get_by_role("combobox").input_value() == machine


@pytest.mark.parametrize("name", SINGLE_MACHINE_PAGES)
def test_machine_picker_switches_the_page(
    browser: Chromium, base: str, shots: Path, name: str
) -> None:
    healthy(browser.check_page(f"{base}/{name}"), name, shots, "first")
    picker = machine_picker(browser)
    combobox = picker.get_by_role("combobox")
    first = combobox.input_value()
    offered = browser.options(picker)
    assert first in GPU_MACHINES and set(GPU_MACHINES) <= set(offered), offered
    other = next(m for m in GPU_MACHINES if m != first)
    seen = healthy(browser.select(picker, other), name, shots, "other")
    assert combobox.input_value() == other
    assert query(seen.url).get("machine") == [other], seen.url
    # The URL is the view: opened afresh, it shows the same machine.
    healthy(browser.check_page(seen.url), name, shots, "shared")
    assert machine_picker(browser).get_by_role("combobox").input_value() == other


def test_history_filters_and_toggles(browser: Chromium, base: str, shots: Path) -> None:
    healthy(browser.check_page(f"{base}/history"), "history", shots, "first")
    page = browser.page
    seen = healthy(browser.choose(machine_picker(browser, "stMultiSelect"), "nvidia-h200"),
                   "history", shots, "h200")
    assert "nvidia-h200" in query_values(seen.url), seen.url
    assert "nvidia-h100-80gb-hbm3" not in query_values(seen.url), seen.url
    # Another benchmark.
    picker = widget(browser, "stSelectbox", BENCHMARK_LABEL)
    before = picker.get_by_role("combobox").input_value()
    other = next(o for o in browser.options(picker) if o != before)
    url = seen.url
    seen = healthy(browser.select(picker, other), "history", shots, "benchmark")
    assert picker.get_by_role("combobox").input_value() == other
    assert query(seen.url) != query(url), f"the URL did not follow the benchmark: {url}"
    # Each toggle once (each flips its own URL parameter), clicked where a person clicks.
    labels = [t.get_attribute("aria-label") for t in page.get_by_role("switch").all()]
    assert labels, "the history page has no toggles"
    for i, label in enumerate(labels):
        switch = page.get_by_role("switch", name=label, exact=True)
        was = switch.is_checked()
        toggle = page.get_by_test_id("stCheckbox").filter(has=switch)
        healthy(browser.click(toggle), "history", shots, f"toggle-{i}")
        assert switch.is_checked() != was, f"{label!r} did not flip"


def test_peers_machine_filter(browser: Chromium, base: str, shots: Path) -> None:
    healthy(browser.check_page(f"{base}/peers"), "peers", shots, "first")
    seen = healthy(browser.choose(machine_picker(browser, "stMultiSelect"),
                                  "nvidia-h100-80gb-hbm3"), "peers", shots, "h100")
    assert "nvidia-h100-80gb-hbm3" in query_values(seen.url), seen.url
    assert "nvidia-h200" not in query_values(seen.url), seen.url


@pytest.mark.parametrize("name", ["resources", "numerics"])
def test_an_older_commit(browser: Chromium, base: str, shots: Path, name: str) -> None:
    healthy(browser.check_page(f"{base}/{name}"), name, shots, "newest")
    picker = widget(browser, "stSelectbox", re.compile("commit", re.IGNORECASE))
    newest, *older = browser.options(picker)
    assert older, f"{name}: one commit offered ({newest})"
    seen = healthy(browser.select(picker, older[-1]), name, shots, "oldest")
    assert picker.get_by_role("combobox").input_value() == older[-1]
    assert older[-1].split(" ")[0] in seen.text + seen.url, seen.url


def test_compare_verdict_filter(browser: Chromium, base: str, shots: Path) -> None:
    healthy(browser.check_page(f"{base}/compare"), "compare", shots, "filters")
    picker = widget(browser, "stMultiSelect", re.compile("verdict", re.IGNORECASE))
    verdict = browser.options(picker)[0]
    seen = healthy(browser.choose(picker, verdict), "compare", shots, "verdict")
    assert verdict in query_values(seen.url), seen.url


def test_a_widget_can_be_changed_twice(browser: Chromium, base: str, shots: Path) -> None:
    healthy(browser.check_page(f"{base}/compare"), "compare", shots, "twice")
    picker = machine_picker(browser)
    first = picker.get_by_role("combobox").input_value()
    other = next(m for m in GPU_MACHINES if m != first)
    # Each change is taken, not every second one (a widget whose identity followed the
    # URL it writes was taken for a new widget after each change).
    for step, machine in enumerate([other, first, other]):
        seen = healthy(browser.select(picker, machine), "compare", shots, f"change-{step}")
        assert picker.get_by_role("combobox").input_value() == machine, step
        assert query(seen.url).get("machine") == [machine], seen.url
    # A toggle twice: back where it started, and the URL says so.
    healthy(browser.check_page(f"{base}/history"), "history", shots, "toggle-twice")
    page = browser.page
    label = page.get_by_role("switch").first.get_attribute("aria-label")
    switch = page.get_by_role("switch", name=label, exact=True)
    toggle = page.get_by_test_id("stCheckbox").filter(has=switch)
    states = [switch.is_checked()]
    for step in range(3):
        healthy(browser.click(toggle), "history", shots, f"toggle-twice-{step}")
        states.append(switch.is_checked())
    assert states == [states[0], not states[0], states[0], not states[0]], (label, states)


def test_the_check_catches_an_exception_box(tmp_path: Path) -> None:
    """The exception check is not vacuous: a page that raises is caught."""
    broken = tmp_path / "broken_app.py"
    broken.write_text(
        "import streamlit as st\n"
        "st.title('broken')\n"
        "raise RuntimeError('planted failure')\n"
    )
    with serve(tmp_path, app=broken) as url, Chromium(require_chromium()) as browser:
        seen = browser.check_page(url)
    assert seen.exceptions and "planted failure" in seen.exceptions[0]
