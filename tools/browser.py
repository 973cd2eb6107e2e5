"""Serve the dashboard with ``streamlit run`` and drive it in a real headless Chromium.

Used by the browser tests (``tests/test_dashboard_browser.py``, ``test_compose.py``,
``test_demo.py``) and by the screenshot script (:mod:`tools.screens`). The browser is
the system's Chromium (Debian's ``chromium`` package) driven by Playwright for Python
(``playwright.sync_api``, launched with ``executable_path``: no ``playwright install``
download). This module only adds what a Streamlit page needs on top: a page is drawn by
JavaScript after a websocket round trip and every widget change reruns the script, so
after each navigation or click :meth:`Chromium.settle` waits until the script run has
finished and the page has stayed quiet a moment; then the page is checked for Streamlit's
exception box and screenshotted as it is.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when a browser starts: serve() and free_port() need no Playwright
    from playwright.sync_api import Locator, Page, Playwright

APP = Path(__file__).resolve().parent.parent / "dashboard" / "app.py"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# What the page shows when a script raises (st.exception and uncaught errors alike).
EXCEPTION_SELECTOR = '[data-testid="stException"]'
# One probe of the page's state, evaluated in the page. Streamlit marks its root element
# with the script run's state ("running", "notRunning", ...) and the connection's; its
# "running" status widget is the fallback for versions without those attributes.
_PROBE = """exc => {
  const q = s => Array.from(document.querySelectorAll(s));
  const app = document.querySelector('[data-testid="stApp"]');
  const script = app ? app.getAttribute('data-test-script-state') : null;
  const link = app ? app.getAttribute('data-test-connection-state') : null;
  return {
    content: q('h1').length + q(exc).length,
    running: (script !== null && script !== 'notRunning')
             || (link !== null && link !== 'CONNECTED')
             || q('[data-testid="stStatusWidget"]').length > 0,
    title: (q('h1')[0] || {textContent: ''}).textContent,
    sidebar: (q('[data-testid="stSidebar"]')[0] || {innerText: ''}).innerText,
    main: (q('[data-testid="stMain"]')[0] || document.body).innerText,
    dialogs: q('[role="dialog"]').map(e => e.innerText),
    exceptions: q(exc).map(e => e.innerText),
  };
}"""


# Playwright's sync API runs one driver per thread: every open Chromium shares it.
_driver: Playwright | None = None
_driver_users = 0


def _driver_start() -> Playwright:
    global _driver, _driver_users
    if _driver is None:
        from playwright.sync_api import sync_playwright

        _driver = sync_playwright().start()
    _driver_users += 1
    return _driver


def _driver_stop() -> None:
    global _driver, _driver_users
    _driver_users -= 1
    if _driver_users == 0 and _driver is not None:
        _driver.stop()
        _driver = None


def free_port() -> int:
    """A TCP port nothing listens on right now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read().decode()


@contextlib.contextmanager
def serve(results_dir: str | Path, app: str | Path = APP, timeout: float = 90.0) -> Iterator[str]:
    """Run ``streamlit run app`` on a free localhost port; yield its base URL.

    Waits until ``/_stcore/health`` answers ``ok`` (RuntimeError with the server's output
    otherwise) and stops the server on exit.
    """
    port = free_port()
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
    env = dict(os.environ, SAFEATTN_RESULTS=str(results_dir))
    cmd = [
        sys.executable, "-m", "streamlit", "run", str(app),
        "--server.headless=true", f"--server.port={port}", "--server.address=127.0.0.1",
        "--browser.gatherUsageStats=false", "--server.fileWatcherType=none",
        "--client.toolbarMode=viewer",
    ]
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if _get(f"{base}/_stcore/health").strip() == "ok":
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(
                    f"streamlit did not become healthy on {base} "
                    f"(exit code {server.poll()}):\n{log.read().decode(errors='replace')}"
                )
            time.sleep(0.3)
        yield base
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def find_chromium() -> str | None:
    """The path of a Chromium/Chrome binary, or None."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageCheck:
    """What the browser saw on one page once its script run had finished."""

    url: str  # the address bar (Streamlit writes the widgets' query parameters into it)
    title: str  # the page's first heading
    sidebar: str  # the sidebar's text (navigation and the results-directory field)
    text: str  # the main area's text
    dialogs: list[str]  # text of open dialogs (e.g. Streamlit's "Page not found")
    exceptions: list[str]  # text of each Streamlit exception box
    png: bytes = field(repr=False)  # screenshot of the viewport


class Chromium:
    """A headless Chromium (one page) driven by Playwright, with Streamlit-aware waits.

    ``page`` is the Playwright :class:`~playwright.sync_api.Page` for locators and anything
    else; after an action that reruns the script, call :meth:`check` (or :meth:`settle`).
    :meth:`click`, :meth:`select` and :meth:`choose` act and check in one call.
    """

    def __init__(self, binary: str | None = None, width: int = 1280, height: int = 900) -> None:
        binary = binary or find_chromium()
        if binary is None:
            raise RuntimeError(
                "no Chromium found (looked for " + ", ".join(CHROMIUM_NAMES) + ").\n"
                "HINT: apt-get install -y chromium"
            )
        from playwright.sync_api import Error

        driver = _driver_start()
        try:
            # Debian's Chromium, not a browser `playwright install` downloads.
            self._browser = driver.chromium.launch(
                executable_path=binary, headless=True, timeout=120_000,
                args=["--disable-gpu", "--disable-dev-shm-usage", "--disable-quic"],
            )
        except Error as exc:
            _driver_stop()
            raise RuntimeError(
                f"Playwright could not start {binary}:\n{exc}\n"
                "HINT: Playwright drives Chromium over the DevTools protocol; a Chromium much "
                "older or newer than this playwright release may refuse. Upgrade one of them "
                "(apt-get install chromium; pip install -U playwright)."
            ) from exc
        self.page: Page = self._browser.new_page(viewport={"width": width, "height": height})
        self._open = True

    def settle(self, timeout: float = 90.0, quiet: float = 1.0) -> dict[str, Any]:
        """Wait until Streamlit has finished running the page; return the last probe.

        Finished = the page has a heading or an exception box, and no script run has been
        under way for ``quiet`` seconds: a click starts its rerun within milliseconds, and
        charts are drawn meanwhile.
        """
        deadline = time.monotonic() + timeout
        quiet_since = None
        while True:
            state = self.page.evaluate(_PROBE, EXCEPTION_SELECTOR)
            now = time.monotonic()
            if state["content"] > 0 and not state["running"]:
                quiet_since = quiet_since or now
                if now - quiet_since >= quiet:
                    return state
            else:
                quiet_since = None
            if now > deadline:
                raise TimeoutError(
                    f"{self.page.url}: the page did not finish within {timeout:.0f} s "
                    f"(last state: { {k: state[k] for k in ('content', 'running', 'title')} })"
                )
            time.sleep(0.2)

    def check(self, timeout: float = 90.0) -> PageCheck:
        """:meth:`settle`, then what the page shows, with a screenshot."""
        state = self.settle(timeout)
        return PageCheck(
            url=self.page.url, title=state["title"], sidebar=state["sidebar"],
            text=state["main"], dialogs=state["dialogs"], exceptions=state["exceptions"],
            png=self.page.screenshot(type="png"),
        )

    def check_page(self, url: str, timeout: float = 90.0) -> PageCheck:
        """Load ``url`` and :meth:`check` it."""
        self.page.goto(url, timeout=timeout * 1000)
        return self.check(timeout)

    def evaluate(self, expression: str) -> Any:
        """Evaluate a JavaScript expression in the page; its value as JSON-able Python."""
        return self.page.evaluate(expression)

    def click(self, target: Locator) -> PageCheck:
        """Click ``target`` (a link, a toggle, a button) and check the page it leads to."""
        target.click()
        return self.check()

    def options(self, widget: Locator) -> list[str]:
        """The options an ``st.selectbox`` or ``st.multiselect`` offers (its open list,
        without the multiselect's own "Select all" entry)."""
        widget.get_by_role("button", name="Open").click()
        listed = self.page.get_by_role("option")
        listed.first.wait_for()
        names = [n for n in listed.all_inner_texts() if n != "Select all"]
        self.page.keyboard.press("Escape")
        return names

    def select(self, selectbox: Locator, option: str) -> PageCheck:
        """Choose ``option`` (as shown) in an ``st.selectbox``; check the rerun."""
        selectbox.get_by_role("button", name="Open").click()
        self.page.get_by_role("option", name=option, exact=True).click()
        return self.check()

    def choose(self, multiselect: Locator, option: str) -> PageCheck:
        """Add ``option`` (as shown) to an ``st.multiselect``'s choice; check the rerun."""
        multiselect.get_by_role("button", name="Open").click()
        self.page.get_by_role("option", name=option, exact=True).click()
        self.page.keyboard.press("Escape")  # the list stays open for more choices
        return self.check()

    def close(self) -> None:
        if not self._open:
            return
        self._open = False
        try:
            self._browser.close()
        finally:
            _driver_stop()

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def small_png(png: bytes, width: int = 1000, colors: int = 256) -> bytes:
    """Downscale and palette-quantise a screenshot so it stays small in the repository."""
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    if image.width > width:
        image = image.resize((width, round(image.height * width / image.width)),
                             Image.LANCZOS)
    out = io.BytesIO()
    # Maximum coverage, not the default median cut (which merges the few pixels of a small
    # mark, a chart's green diamond, into grey) nor octree (which drops the pale tints of
    # the error and success boxes).
    image.quantize(colors=colors, method=Image.Quantize.MAXCOVERAGE).save(
        out, format="PNG", optimize=True)
    return out.getvalue()
