"""The safeattn dashboard: ``streamlit run dashboard/app.py``.

A multipage app over asv's results directory. Every page only lays out widgets and
charts; loading lives in :mod:`regress.results`, verdicts in
:mod:`regress.compare`, and what each page shows in :mod:`dashboard.views`.
"""

import sys
from pathlib import Path

# `streamlit run` puts only this file's folder on sys.path; the pages import
# `dashboard.*` and `safeattn.*` from this checkout, so put the repository root first.
_REPO_ROOT = str(Path(__file__).resolve().parent.parent)
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

import streamlit as st  # noqa: E402

from dashboard import follow_status, progress, state  # noqa: E402
from dashboard.views import DEFAULT_PAGE, PAGES  # noqa: E402

# The page files live in app_pages/, not pages/: a pages/ folder next to the entry point
# switches Streamlit's older file-based navigation on, and a first visit to /<page> would
# then run that file without this script (no sidebar, no st.navigation titles).
st.set_page_config(page_title="safeattn dashboard", layout="wide")
navigation = st.navigation(
    [
        st.Page(f"app_pages/{name}.py", title=title, url_path=name, default=name == DEFAULT_PAGE)
        for name, title in PAGES.items()
    ]
)
state.sidebar()
follow_status.show(state.results_dir())  # when a follower last updated the results
progress.show()  # a benchmark run in flight (make demo), above every page
navigation.run()
