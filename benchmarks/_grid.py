"""How a suite measures its grid and reports it to asv (a private module: asv imports it
but finds no benchmark).

Three decisions every suite follows, made once here:

1. **Measure once per run, report per parameter.** asv runs every benchmark × parameter
   combination in a fresh process. A GPU suite instead measures its whole grid in
   ``setup_cache`` (one process: one CUDA context, one compile/autotune of each kernel) and
   its ``track_*`` methods only look their value up (:func:`pass_tracker`, :func:`field_tracker`).
   The track processes therefore never import torch: the suites and their helpers import it
   lazily, inside functions.
2. **Samples, not just a number.** A ``track_*`` method that returns
   ``{"samples": [...], "number": 1}`` is stored by asv exactly like a ``time_*`` result: the
   median as the value, plus its 99 % confidence interval, quartiles and repeat count
   (``asv/runner.py`` parses that dict for every benchmark type; ``asv run
   --record-samples`` keeps the raw samples too). :func:`sample_result` builds it.
3. **Cannot run means NaN with a reason.** A combination that a commit or a peer cannot run
   (a peer without GQA, a family this commit's package lacks) is stored by ``setup_cache`` as
   a :class:`Missing` reason. Every suite's ``setup`` calls :func:`lookup`, which prints the
   reason to stderr and raises ``NotImplementedError``: raised in ``setup``, asv records the
   entry as skipped (NaN); raised in the benchmark itself it would count as a failure
   (``null``, "benchmark failed", ``asv run`` exit status 2), as the first GPU history
   showed.

The grids (family names, kernel names, shapes) are fixed in the suites, not read from the
package: asv benchmarks old commits with the current suite, and a commit whose package
lacks a name must produce NaN for it, not a different grid.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ._truth import metrics

# A setup_cache measures a whole grid; asv's default 60 s timeout is per benchmark process.
# The longest grid is the CPU's static audit when its key is not cached: 1,136 s on 2 cores
# (cold Triton cache); read from the audit cache, a second.
GRID_TIMEOUT_S = 3600

# asv's default benchmark version is a hash of the benchmark's own source (track_, setup,
# setup_cache). A change in a shared helper that changes what is measured (the timing in
# cuda_event_samples, the shapes of gpu_problem, the families, the fp64 reference) would not change
# it, while a pure refactor of a suite would, and asv's own tools (publish, compare) drop
# results whose version differs from the suite's. So every suite names its version (a class
# attribute, asv's convention): bump that suite's string when what it measures changes.


# tools/run.py names a file here and prints what the suites append to it while asv runs:
# asv discards the output of a setup_cache that succeeds, and a GPU grid takes minutes.
PROGRESS_ENV = "SAFEATTN_BENCH_PROGRESS"


def progress(line: str) -> None:
    """Report one step of a setup_cache: to stderr (asv shows it if the setup fails) and to
    the progress file that tools/run.py echoes as the run goes."""
    print(line, file=sys.stderr, flush=True)
    path = os.environ.get(PROGRESS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


@dataclass(frozen=True)
class Missing:
    """Why a grid entry has no value (stored in the setup_cache result instead of one)."""

    reason: str


def reason_of(exc: BaseException) -> str:
    """A one-line reason from an exception (first line of its message)."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


# A GPU suite measures its whole grid in setup_cache, whatever asv's --bench selected.
# ``safeattn-gate --confirm`` re-measures only the rows it flagged: it sets this to a JSON
# list of regexes on a combination's asv form, ``('safeattn', 'bfloat16', 128, 'varlen_docs')``
# (asv's ``name(repr, ...)`` without the name), and the grid skips every other combination.
ONLY_ENV = "SAFEATTN_BENCH_ONLY"


def asv_form(combo: tuple) -> str:
    """A combination as asv names it after the benchmark: ``(repr0, repr1, ...)``."""
    return "(" + ", ".join(repr(value) for value in combo) + ")"


def _only_patterns() -> list[str]:
    text = os.environ.get(ONLY_ENV, "")
    if not text:
        return []
    patterns = json.loads(text)
    if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
        raise ValueError(f"${ONLY_ENV} must be a JSON list of regexes, got {text!r}")
    return patterns


def measure_grid(
    tag: str,
    combos: Iterable[tuple],
    measure: Callable[..., Any],
    describe: Callable[[Any], str],
    label: Callable[[tuple], str] = str,
    after: Callable[[], Any] | None = None,
) -> dict:
    """A suite's ``setup_cache`` loop: ``{combo: measure(*combo)}``, with a :class:`Missing`
    reason where ``measure`` raises (one entry failing must not lose the others), a progress
    line per entry (``label(combo)``, ``describe(value)``, its seconds) and one for the whole
    grid. ``after()`` runs after every entry (the GPU suites free cached memory there)."""
    measured: dict = {}
    grid_start = time.perf_counter()
    only = _only_patterns()
    skipped = 0
    for combo in combos:
        if only and not any(re.search(p, asv_form(combo)) for p in only):
            measured[combo] = Missing(f"not selected (${ONLY_ENV})")
            skipped += 1
            continue
        start = time.perf_counter()
        try:
            measured[combo] = measure(*combo)
            summary = describe(measured[combo])
        except Exception as exc:  # a peer refusing a shape, a commit lacking an API
            measured[combo] = Missing(reason_of(exc))
            summary = f"not measured: {reason_of(exc)}"
        progress(f"[{tag}] {label(combo)}: {summary} ({time.perf_counter() - start:.1f} s)")
        if after is not None:
            after()
    if skipped:
        progress(f"[{tag}] {skipped} combination(s) not selected by ${ONLY_ENV}: skipped")
    progress(f"[{tag}] grid measured in {time.perf_counter() - grid_start:.0f} s")
    return measured


# FlexAttention compiles a forward and a backward kernel per shape (torch.compile with
# dynamic=False, as users run a fixed shape): the dearest part of a fresh machine's run. The
# speed and memory grids measure it at these head dims only, so that one commit's GPU suites
# fit one device call (benchmarks/speed.py, "Cost"); elsewhere it is NaN with this reason.
FLEX_HEAD_DIMS = (128,)


def pruned_reason(impl: str, head_dim: int) -> str | None:
    """Why (impl, head_dim) is left out of the GPU speed/memory grids, or None."""
    if impl == "flex" and head_dim not in FLEX_HEAD_DIMS:
        return f"pruned: FlexAttention is measured at head_dim {FLEX_HEAD_DIMS} only (compile cost)"
    return None


def unless_pruned(measure: Callable[..., Any]) -> Callable[..., Any]:
    """``measure(impl, dtype, head_dim, ...)`` for the speed/memory grids that raises
    ``NotImplementedError`` with :func:`pruned_reason` for a pruned entry instead."""

    def checked(impl: str, dtype: str, head_dim: int, *rest: Any) -> Any:
        reason = pruned_reason(impl, head_dim)
        if reason is not None:
            raise NotImplementedError(reason)
        return measure(impl, dtype, head_dim, *rest)

    return checked


def lookup(cache: dict, key: tuple) -> Any:
    """The value measured for ``key`` in setup_cache, or NaN (skip) with the reason on stderr."""
    value = cache.get(key, Missing(f"no measurement for {key} (grid changed mid-run?)"))
    if isinstance(value, Missing):
        print(f"not measured {key}: {value.reason}", file=sys.stderr)
        raise NotImplementedError(value.reason)
    return value


def sample_result(samples: list[float]) -> dict:
    """asv's samples protocol: asv stores the median with its statistics (see module doc)."""
    clean = [float(s) for s in samples]
    if not clean or not all(math.isfinite(s) for s in clean):
        raise ValueError(f"benchmarks: timing samples must be finite and non-empty, got {clean}")
    return {"samples": clean, "number": 1}


def tracks_metric(method):
    """Decorator for ``track_<metric>`` methods: checks ``<metric>`` is in the metric
    registry and sets asv's ``unit`` from it, so names and units have one source."""
    name = method.__name__.removeprefix("track_")
    if name not in metrics.METRICS:
        raise ValueError(f"benchmarks: {method.__qualname__} tracks no metric of METRICS")
    method.unit = metrics.METRICS[name].unit
    return method


# The two factories below are not named track_*: asv would take a module-level function
# of that name for a benchmark of its own.
def pass_tracker(pass_name: str):
    """A suite's ``track_<pass_name>_ms`` method (unit from the metric registry): the timing
    samples that setup_cache stored under ``(pass_name, *combo)``, as asv's samples protocol."""

    def track(self, cache, *combo):
        return sample_result(lookup(cache, (pass_name, *combo)))

    return _track_method(track, f"track_{pass_name}_ms")


def field_tracker(field: str, samples: bool = False):
    """A suite's ``track_<field>`` method (unit from the metric registry): the ``field`` of
    the dict that setup_cache stored for the combination; ``samples``: a list of timing
    samples, returned as asv's samples protocol."""

    def track(self, cache, *combo):
        value = lookup(cache, combo)[field]
        return sample_result(value) if samples else value

    return _track_method(track, f"track_{field}")


def _track_method(method, name: str):
    """``method`` named ``name`` (asv names a benchmark after the class attribute; the metric
    check and error messages read the function's name) and checked by :func:`tracks_metric`."""
    method.__name__ = method.__qualname__ = name
    return tracks_metric(method)
