"""Serve the dashboard with ``streamlit run`` and drive it with a real headless Chromium.

Used by the real-browser test (``tests/test_dashboard_browser.py``) and by the screenshot
script (:mod:`dashboard.screens`). Chromium is driven over the DevTools protocol (a
websocket, with the ``websockets`` package Streamlit already depends on) rather than
``--dump-dom``: a Streamlit page is drawn by JavaScript after a websocket round trip, so
the test waits until the script run has finished and the page has content, then looks
for Streamlit's exception box and takes the screenshot from the same, settled page.
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from websockets.sync.client import connect

APP = Path(__file__).resolve().parent / "app.py"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# What the page shows when a script raises (st.exception and uncaught errors alike).
EXCEPTION_SELECTOR = '[data-testid="stException"]'


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

    url: str
    title: str  # the page's first heading
    sidebar: str  # the sidebar's text (navigation and the results-directory field)
    dialogs: list[str]  # text of open dialogs (e.g. Streamlit's "Page not found")
    exceptions: list[str]  # text of each Streamlit exception box
    png: bytes  # screenshot


class Chromium:
    """A headless Chromium driven through the DevTools protocol (one tab)."""

    def __init__(self, binary: str | None = None, width: int = 1280, height: int = 900) -> None:
        binary = binary or find_chromium()
        if binary is None:
            raise RuntimeError(
                "no Chromium found (looked for " + ", ".join(CHROMIUM_NAMES) + ").\n"
                "HINT: apt-get install -y chromium"
            )
        self._profile = tempfile.TemporaryDirectory(prefix="safeattn-chromium-")
        self._proc = subprocess.Popen(
            [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-dev-shm-usage", f"--user-data-dir={self._profile.name}",
             "--remote-debugging-port=0", f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        self._ids = itertools.count(1)
        self._stack = contextlib.ExitStack()  # owns the DevTools websocket
        self._width, self._height = width, height
        try:
            port = self._devtools_port()
            tab = next(t for t in json.loads(_get(f"http://127.0.0.1:{port}/json/list"))
                       if t.get("type") == "page")
            self._ws = self._stack.enter_context(
                connect(tab["webSocketDebuggerUrl"], max_size=None, open_timeout=30)
            )
        except Exception:
            self.close()
            raise

    def _devtools_port(self, timeout: float = 120.0) -> int:
        # Chromium prints "DevTools listening on ws://127.0.0.1:<port>/..." on stderr.
        assert self._proc.stderr is not None
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            line = self._proc.stderr.readline()
            if not line:
                if self._proc.poll() is not None:
                    break
                continue
            seen.append(line)
            if m := re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line):
                return int(m.group(1))
        raise RuntimeError("Chromium did not start its DevTools endpoint:\n" + "".join(seen))

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        """Send one DevTools command and return its result (events are skipped)."""
        msg_id = next(self._ids)
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        while True:
            reply = json.loads(self._ws.recv(timeout=60))
            if reply.get("id") == msg_id:
                if "error" in reply:
                    raise RuntimeError(f"DevTools {method}: {reply['error']}")
                return reply.get("result", {})

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def check_page(self, url: str, timeout: float = 90.0, settle: float = 1.5) -> PageCheck:
        """Load ``url``, wait until Streamlit has finished running the page, report it.

        Finished = the page has a heading or an exception box, and Streamlit's "running"
        status widget has been absent for ``settle`` seconds (charts drawn meanwhile).
        """
        self.call("Emulation.setDeviceMetricsOverride", width=self._width,
                  height=self._height, deviceScaleFactor=1, mobile=False)
        self.call("Page.navigate", url=url)
        probe = (
            "(() => { const q = s => document.querySelectorAll(s);"
            f" return JSON.stringify({{content: q('h1').length + q('{EXCEPTION_SELECTOR}')"
            ".length, running: q('[data-testid=\"stStatusWidget\"]').length,"
            " title: (q('h1')[0] || {textContent: ''}).textContent,"
            " sidebar: (q('[data-testid=\"stSidebar\"]')[0] || {innerText: ''}).innerText,"
            " dialogs: Array.from(q('[role=\"dialog\"]')).map(e => e.innerText),"
            f" exceptions: Array.from(q('{EXCEPTION_SELECTOR}')).map(e => e.innerText)}}); }})()"
        )
        deadline = time.monotonic() + timeout
        quiet_since = None
        while True:
            state = json.loads(self.evaluate(probe) or "{}")
            done = state.get("content", 0) > 0 and state.get("running", 1) == 0
            now = time.monotonic()
            if done:
                quiet_since = quiet_since or now
                if now - quiet_since >= settle:
                    break
            else:
                quiet_since = None
            if now > deadline:
                raise TimeoutError(f"{url}: the page did not finish within {timeout:.0f} s "
                                   f"(last state {state})")
            time.sleep(0.25)
        png = base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])
        return PageCheck(url=url, title=state["title"], sidebar=state["sidebar"],
                         dialogs=state["dialogs"], exceptions=state["exceptions"], png=png)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._stack.close()
        self._proc.terminate()
        try:
            self._proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        # Chromium's helper processes can still write into the profile for a moment after
        # the browser process has exited ("Directory not empty: 'Default'"): retry a while.
        for _ in range(20):
            try:
                self._profile.cleanup()
                break
            except OSError:
                time.sleep(0.25)
        else:
            shutil.rmtree(self._profile.name, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def small_png(png: bytes, width: int = 1000, colors: int = 128) -> bytes:
    """Downscale and palette-quantise a screenshot so it stays small in the repository."""
    import io

    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    if image.width > width:
        image = image.resize((width, round(image.height * width / image.width)),
                             Image.LANCZOS)
    out = io.BytesIO()
    image.quantize(colors=colors).save(out, format="PNG", optimize=True)
    return out.getvalue()
