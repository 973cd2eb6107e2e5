"""Streamlit glue shared by every page: which results directory, the cached load, the
empty/bad-data messages, and widgets whose value lives in the URL (shareable views).

Loading and computing stay in :mod:`regress` and :mod:`dashboard.views`; this
module only caches them and lays out the common parts.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import streamlit as st

from dashboard import data
from dashboard.views import common, history, numerics, overview, peers
from regress.compare import compare
from regress.policy import Policy, load_policy
from regress.results import LoadedResults, results_mtime

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS_DIR = REPO_ROOT / "results"
RESULTS_ENV = "SAFEATTN_RESULTS"
_DIR_KEY = "results_dir"

T = TypeVar("T")
# Which commits a page loads: ((machine, (full sha, ...)), ...), hashable for the caches.
Window = tuple[tuple[str, tuple[str, ...]], ...]

HOW_TO_PRODUCE = """\
**No asv results in `{path}` yet.** Produce some from the repository root:

```bash
pip install -e '.[bench]'
asv machine --yes
asv run --python=same --set-commit-hash=$(git rev-parse HEAD)
```

or point the sidebar field (or the `{env}` environment variable) at another asv
`results/` directory. To try the dashboard without a GPU, generate a small real run on
CPU: `python -m tools.sample_results /tmp/sample` and use
`/tmp/sample/project/results`.
"""


def sidebar() -> None:
    """The results-directory field (default: ``$SAFEATTN_RESULTS`` or the repo's results/)."""
    if _DIR_KEY not in st.session_state:
        st.session_state[_DIR_KEY] = os.environ.get(RESULTS_ENV) or str(DEFAULT_RESULTS_DIR)
    st.sidebar.text_input(
        "asv results directory",
        key=_DIR_KEY,
        help=f"asv's results/ directory; default from ${RESULTS_ENV} or the repository's.",
    )


def results_dir() -> Path:
    """The directory the sidebar names."""
    raw = st.session_state.get(_DIR_KEY) or os.environ.get(RESULTS_ENV) or DEFAULT_RESULTS_DIR
    return Path(str(raw)).expanduser()


@st.cache_resource(show_spinner="Indexing asv results…", max_entries=4)
def _index(path: str, mtime: float) -> data.ResultsIndex:
    # Keyed on the directory's newest mtime: a new asv run shows up without a restart.
    # cache_resource hands every session the same object (no copy per rerun): the pages
    # and views only read it.
    del mtime
    return data.index_results(path)


@st.cache_resource(show_spinner="Loading asv results…", max_entries=16)
def _load(path: str, mtime: float, window: Window,
          benchmarks: tuple[str, ...] | None = None) -> LoadedResults:
    return data.load_commits(_index(path, mtime), {m: list(shas) for m, shas in window},
                             set(benchmarks) if benchmarks is not None else None)


@st.cache_resource(max_entries=1)
def policy() -> Policy:
    """The gate's packaged policy: the dashboard judges exactly as the gate does."""
    return load_policy()


@st.cache_resource(show_spinner="Comparing each machine's newest commit…", max_entries=4)
def _overview(path: str, mtime: float) -> list[overview.MachineHealth]:
    index = _index(path, mtime)
    return overview.overview(_load(path, mtime, _overview_window(index)), policy())


def _overview_window(index: data.ResultsIndex) -> Window:
    return tuple((m, tuple(index.newest(m, 2))) for m in index.machines())


def _key() -> tuple[str, float]:
    path = results_dir()
    return str(path), results_mtime(path)


def results_index() -> data.ResultsIndex:
    """The index of the results directory (machines, commits, dates; no results).

    Stops the page (``st.stop``) with a how-to when there is nothing to show.
    """
    path = results_dir()
    if not path.is_dir():
        st.error(f"Results directory `{path}` does not exist.")
        st.markdown(HOW_TO_PRODUCE.format(path=path, env=RESULTS_ENV))
        st.stop()
    index = _index(*_key())
    # Files the index could not use are reported on every page, whatever it loads.
    _show_problems(index.problems, expanded=index.files.empty)
    if index.files.empty:
        st.info(HOW_TO_PRODUCE.format(path=path, env=RESULTS_ENV))
        st.stop()
    return index


def _window_key(window: dict[str, list[str]]) -> Window:
    return tuple((m, tuple(shas)) for m, shas in sorted(window.items()))


def loaded_results(
    window: dict[str, list[str]], benchmarks: list[str] | None = None
) -> LoadedResults:
    """The results of the commits in ``window`` (machine -> full shas), only of
    ``benchmarks`` if given, after telling the reader about unreadable files; stops the
    page when nothing loads."""
    key = _window_key(window)
    path, mtime = _key()
    loaded = _load(path, mtime, key, tuple(sorted(benchmarks)) if benchmarks else None)
    _show_problems(loaded.problems, expanded=loaded.table.empty)
    if loaded.table.empty:
        st.info(HOW_TO_PRODUCE.format(path=path, env=RESULTS_ENV))
        st.stop()
    return loaded


@st.cache_resource(show_spinner="Comparing…", max_entries=32)
def _compared(path: str, mtime: float, window: Window, machine: str, base: str,
              head: str) -> pd.DataFrame:
    return compare(_load(path, mtime, window), base, head, machine, policy())


def compared(window: dict[str, list[str]], machine: str, base: str, head: str) -> pd.DataFrame:
    """:func:`regress.compare.compare` of two loaded commits, cached (a widget
    change on the compare page must not recompute it)."""
    return _compared(*_key(), _window_key(window), machine, base, head)


@st.cache_resource(show_spinner="Judging each commit against its parent…", max_entries=32)
def _history_verdicts(path: str, mtime: float, window: Window, benchmark: str,
                      machines: tuple[str, ...], filters: tuple) -> pd.DataFrame:
    loaded = _load(path, mtime, window, (benchmark,))
    rows = history.history(loaded, benchmark, list(machines), dict(filters))
    return history.history_verdicts(loaded, rows, policy())


def history_verdicts(window: dict[str, list[str]], benchmark: str, machines: list[str],
                     filters: dict[str, list]) -> pd.DataFrame:
    """:func:`history.history_verdicts` of what the history page shows, cached."""
    frozen = tuple(sorted((k, tuple(v)) for k, v in filters.items()))
    return _history_verdicts(*_key(), _window_key(window), benchmark, tuple(machines), frozen)


# How many of a machine's newest commits the overview's trend and the peers page read.
TREND_COMMITS = 50


@st.cache_resource(show_spinner="Computing the speed trend…", max_entries=16)
def _speed_trend(path: str, mtime: float, machine: str, baseline: str | None) -> pd.DataFrame:
    index = _index(path, mtime)
    window = ((machine, tuple(index.newest(machine, TREND_COMMITS))),)
    loaded = _load(path, mtime, window, overview.TREND_BENCHMARKS)
    return overview.speed_trend(loaded, machine, policy(), baseline)


def speed_trend(machine: str, baseline: str | None = None) -> pd.DataFrame:
    """:func:`overview.speed_trend` over the machine's newest :data:`TREND_COMMITS` commits,
    cached (only the speed benchmarks of those commits are read)."""
    return _speed_trend(*_key(), machine, baseline)


@st.cache_resource(show_spinner="Reading the newest safety rates…", max_entries=8)
def _latest_safety(path: str, mtime: float, machine: str) -> tuple[str | None, pd.DataFrame]:
    index = _index(path, mtime)
    window = ((machine, tuple(index.newest(machine, TREND_COMMITS))),)
    return numerics.latest_safety(_load(path, mtime, window, numerics.SAFETY_BENCHMARKS), machine)


def latest_safety(machine: str) -> tuple[str | None, pd.DataFrame]:
    """:func:`numerics.latest_safety` over the machine's newest :data:`TREND_COMMITS`, cached."""
    return _latest_safety(*_key(), machine)


def commit_label(machine: str, sha: str) -> str:
    """``"1a2b3c4d · 2026-11-21 12:00"`` (:meth:`data.ResultsIndex.label`)."""
    return _index(*_key()).label(machine, sha)


def peer_results(index: data.ResultsIndex, machines: list[str]) -> LoadedResults:
    """The peer benchmarks (:data:`peers.PEER_BENCHMARKS`) of each machine's newest
    :data:`TREND_COMMITS` commits: each suite's newest run is among them even when the
    newest commit ran only some suites. Unreadable files are reported on the page."""
    window = _window_key({m: index.newest(m, TREND_COMMITS) for m in machines})
    loaded = _load(*_key(), window, peers.PEER_BENCHMARKS)
    _show_problems(loaded.problems, expanded=False)
    return loaded


def _show_problems(problems: list[str], expanded: bool) -> None:
    if not problems:
        return
    with st.expander(
        f"⚠️ {len(problems)} problem(s) reading `{results_dir()}`: the rest is shown",
        expanded=expanded,
    ):
        for problem in problems:
            st.markdown(f"- `{problem}`")


def overview_health() -> tuple[LoadedResults, list[overview.MachineHealth]]:
    """The newest two commits per machine, loaded, and :func:`overview.overview` of them."""
    index = results_index()
    loaded = loaded_results({m: list(shas) for m, shas in _overview_window(index)})
    return loaded, _overview(*_key())


def table(data: Any, **kwargs: Any) -> None:
    """``st.dataframe`` for people: no index, and an empty cell reads "not measured" (the
    browser draws a missing number as None otherwise, whatever a Styler says)."""
    kwargs.setdefault("hide_index", True)
    st.dataframe(data, placeholder=common.NOT_MEASURED, **kwargs)


# ------------------------------------------------------------- URL-backed widgets
# Each widget has a stable ``key``: Streamlit identifies a keyed widget by its key, so a
# change is never taken for a new widget. Its value lives in ``st.session_state[key]``,
# filled from the URL's query parameter once: when the key is new (a fresh page, a shared
# link) or when the URL no longer says what the widget last wrote there (the address was
# changed from outside, e.g. a link with query parameters). Every run writes the value
# back, so the address bar always reproduces the current view. No widget gets an
# index=/default=/value= derived from the URL (that would change its identity per change
# and Streamlit would drop every second interaction).

_SYNCED = "_url_synced"  # session_state: widget key -> the URL values it last wrote


def _url_values(param: str) -> list[str]:
    return list(st.query_params.get_all(param))


def _needs_seed(key: str, param: str, valid: Callable[[Any], bool]) -> bool:
    """Whether ``st.session_state[key]`` must be (re)filled from the URL: the key is new,
    the URL was changed from outside, or the value is no longer one of the options."""
    if key not in st.session_state:
        return True
    if st.session_state.get(_SYNCED, {}).get(key) != _url_values(param):
        return True
    try:
        return not valid(st.session_state[key])
    except Exception:  # an odd leftover value: start again from the URL
        return True


def _write_url(key: str, param: str, values: list[str]) -> None:
    """Put ``values`` into ``?param=`` (none: remove it) and remember what was written."""
    if values:
        st.query_params[param] = values if len(values) > 1 else values[0]
    elif param in st.query_params:
        del st.query_params[param]
    synced = dict(st.session_state.get(_SYNCED, {}))
    synced[key] = list(values)
    st.session_state[_SYNCED] = synced


def url_select(
    label: str,
    options: Sequence[T],
    param: str,
    format_func: Callable[[T], str] = str,
    default_index: int = 0,
    container: Any = None,
    key: str | None = None,
) -> T:
    """A select box backed by ``?param=``; an unknown URL value falls back to the default.
    ``key``: the widget's key (default ``url_<param>``); give one when a page shows two
    select boxes on the same parameter."""
    container = container or st
    key = key or f"url_{param}"
    options = list(options)
    if _needs_seed(key, param, lambda v: v in options):
        as_text = [str(o) for o in options]
        wanted = st.query_params.get(param)
        index = as_text.index(wanted) if wanted in as_text else default_index
        st.session_state[key] = options[min(index, len(options) - 1)] if options else None
    value = container.selectbox(label, options, format_func=format_func, key=key)
    _write_url(key, param, [] if value is None else [str(value)])
    return value


def url_multiselect(
    label: str, options: Sequence[T], param: str, container: Any = None,
    key: str | None = None,
) -> list[T]:
    """A multiselect backed by repeated ``?param=a&param=b`` (empty = no filter)."""
    container = container or st
    key = key or f"url_{param}"
    options = list(options)
    if _needs_seed(key, param, lambda v: all(x in options for x in v)):
        wanted = set(_url_values(param))
        st.session_state[key] = [o for o in options if str(o) in wanted]
    chosen = container.multiselect(label, options, placeholder="all", key=key)
    _write_url(key, param, [str(v) for v in chosen])
    return list(chosen)


def url_int(label: str, param: str, default: int, lo: int, hi: int, container: Any = None,
            key: str | None = None) -> int:
    """A number input backed by ``?param=`` (clamped to [lo, hi])."""
    container = container or st
    key = key or f"url_{param}"
    if _needs_seed(key, param, lambda v: lo <= int(v) <= hi):
        try:
            initial = int(st.query_params.get(param, default))
        except ValueError:
            initial = default
        st.session_state[key] = min(max(initial, lo), hi)
    value = int(container.number_input(label, min_value=lo, max_value=hi, step=1, key=key))
    _write_url(key, param, [str(value)])
    return value


def url_toggle(label: str, param: str, default: bool, container: Any = None,
               key: str | None = None, help: str | None = None) -> bool:
    """A toggle backed by ``?param=1|0``; ``help``: its tooltip."""
    container = container or st
    key = key or f"url_{param}"
    if _needs_seed(key, param, lambda v: isinstance(v, bool)):
        raw = st.query_params.get(param)
        st.session_state[key] = default if raw not in ("0", "1") else raw == "1"
    value = bool(container.toggle(label, key=key, help=help))
    _write_url(key, param, ["1" if value else "0"])
    return value


def machine_select(index: data.ResultsIndex, container: Any = None) -> str:
    """The GPU/machine picker every single-machine page shares (``?machine=``)."""
    return url_select("Machine (GPU)", index.machines(), "machine", container=container)


def commit_select(
    index: data.ResultsIndex, machine: str, label: str, param: str, default_index: int = 0,
    container: Any = None,
) -> str:
    """A commit picker (newest first) backed by ``?param=<sha prefix>`` (key ``url_<param>``)."""
    shas = index.commits(machine)
    key = f"url_{param}"
    if _needs_seed(key, param, lambda v: v in shas):
        wanted = st.query_params.get(param, "")
        index_of = default_index
        if wanted:
            # A shared link may carry a short prefix: match it like the gate does.
            hits = [i for i, s in enumerate(shas) if s.startswith(wanted.lower())]
            if len(hits) == 1:
                index_of = hits[0]
        st.session_state[key] = shas[min(index_of, len(shas) - 1)]
    container = container or st
    value = container.selectbox(
        label, shas, format_func=lambda s: index.label(machine, s), key=key
    )
    _write_url(key, param, [value[:12]])
    return value
