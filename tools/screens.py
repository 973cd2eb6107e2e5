"""Screenshots of every dashboard page: ``python -m tools.screens [--results DIR]``.

Serves the app with ``streamlit run`` over an asv results directory (default: the
repository's ``results/``, the project's GPU history), loads each page in headless Chromium
through Playwright (:class:`tools.browser.Chromium`), refuses to save anything if a
page shows a Streamlit exception or an error dialog, and writes one small PNG per page to
``docs/screenshots/<page>.png`` (downscaled, palette-quantised). Needs Chromium
(``apt-get install -y chromium``) and Playwright (``pip install -e '.[test]'``; it drives
that Chromium, nothing is downloaded by ``playwright install``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from dashboard.views import PAGES, page_path  # noqa: E402
from tools.browser import Chromium, serve, small_png  # noqa: E402

# Per page, the query string of the view worth showing (shareable-view parameters).
VIEWS: dict[str, str] = {"history": "impl=safeattn"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(REPO / "results"),
                        help="asv results directory (default: the repository's results/)")
    parser.add_argument("--out", default=str(REPO / "docs" / "screenshots"))
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1000)
    parser.add_argument("--png-width", type=int, default=1000,
                        help="width of the saved PNGs (downscaled)")
    parser.add_argument("--view", action="append", default=[], metavar="PAGE=QUERY",
                        help="the URL query of a page's view, e.g. "
                        "'resources=machine=nvidia-h200&commit=4418cfef' (repeatable; "
                        f"defaults: {VIEWS})")
    args = parser.parse_args(argv)
    views = dict(VIEWS)
    for view in args.view:
        name, sep, query = view.partition("=")
        if not sep or name not in PAGES:
            parser.error(f"--view {view!r}: expected PAGE=QUERY with PAGE one of "
                         + ", ".join(PAGES))
        views[name] = query
    out = Path(args.out)
    shots = {}
    with serve(args.results) as base, Chromium(width=args.width, height=args.height) as browser:
        for name in PAGES:
            query = views.get(name)
            url = f"{base}/{page_path(name)}" + (f"?{query}" if query else "")
            seen = browser.check_page(url)
            print(f"{name}: {seen.title!r} at {seen.url}")
            if seen.exceptions or seen.dialogs:
                print(f"{name}: the page shows an exception or a dialog, no screenshots "
                      "saved:\n" + "\n".join(seen.exceptions + seen.dialogs), file=sys.stderr)
                return 1
            shots[name] = small_png(seen.png, width=args.png_width)
    out.mkdir(parents=True, exist_ok=True)
    for name, png in shots.items():
        path = out / f"{name}.png"
        path.write_bytes(png)
        print(f"{path}  {len(png) / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
