"""What each dashboard page shows, as plain functions of the loaded asv results, and the
pages' Altair charts (no Streamlit here), one module per page, and the app's page list.

The pages (``dashboard/app_pages/``) only lay out what these functions return, so the
tests check the numbers here and the gate's logic stays in one place: every verdict comes
from :func:`regress.compare.compare` and :func:`regress.gate.gate_verdict`, peer ratios
and geometric means from :mod:`regress.ratios`, metric directions and labels from
:mod:`regress.metrics`, architecture limits from :mod:`safeattn.gpu_limits`. What a
person reads never shows None or nan (:data:`dashboard.views.common.NOT_MEASURED`).

- :mod:`.common`: what every page shares (short hashes, readable tables, metric labels,
  machines and commits, verdict counts).
- :mod:`.charts`: the charts' colours, commit axis and verdict scale.
- :mod:`.overview`: per GPU, the gate's verdict on the newest commit and the speed trend.
- :mod:`.history`: one benchmark over commits; :mod:`.tflops` derives TFLOP/s for it.
- :mod:`.peers`: safeattn against its peers per shape.
- :mod:`.resources`: shared memory, registers and spills against each architecture's limit.
- :mod:`.numerics`: the non-finite and wrong-result rates.
"""

from __future__ import annotations

# The app's pages: URL path (and file app_pages/<name>.py) -> navigation title. The
# default page is served at the app's root URL (Streamlit ignores its url_path).
DEFAULT_PAGE = "overview"
PAGES: dict[str, str] = {
    "overview": "Overview",
    "history": "History",
    "compare": "Compare",
    "peers": "Peers",
    "resources": "Resources",
    "numerics": "Numerics",
}


def page_path(name: str) -> str:
    """The URL path of a page: ``""`` for the default page, else its name."""
    return "" if name == DEFAULT_PAGE else name
