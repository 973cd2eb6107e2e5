"""Which kernel configs safeattn launched (a private module: asv imports it but finds no
benchmark): a progress line per measurement, and the per-commit launch records that
tools/run.py files in the commit's versions sidecar (``safeattn_launches``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from ._grid import progress, reason_of


def describe_launch(launched: dict, new_timings: dict) -> str:
    """The configs one forward+backward launched, and what the tuner timed to choose them,
    for the progress log: ``forward=M128-N64-w4-s3(table) ...; tuned forward: M128-N64-w4-s3
    0.412 ms, ...``. The tracked figures are only the consequence of a choice; when they
    move between runs of identical kernels (a tuner flip, seen on an H100), this shows why.

    ``launched``: kernel name -> object with a ``config`` and, from the commits that have
    tuning tables, a ``source`` ("table", "cache", "tuned", "single": where the config came
    from) (``launch.launched_kernels()``); ``new_timings``: tune key (kernel name first) ->
    ``[(config, median ms), ...]``, the keys this call tuned (``launch.tuning_timings()``
    after, less before).
    """
    configs = (
        f"{name}={getattr(res, 'config', '?')}"
        + (f"({res.source})" if getattr(res, "source", "") else "")
        for name, res in sorted(launched.items())
    )
    parts = [" ".join(configs)]
    for key, timings in new_timings.items():
        if len(timings) > 1:  # one candidate (or single-config mode): nothing was timed
            times = ", ".join(f"{cfg} {ms:.3f} ms" for cfg, ms in timings)
            parts.append(f"tuned {key[0]}: {times}")
    return "; ".join(parts)


def tuner_timings() -> dict:
    """What safeattn's tuner has timed so far in this process (``launch.tuning_timings()``;
    ``{}`` for a commit older than it)."""
    from safeattn.kernels import launch

    return dict(getattr(launch, "tuning_timings", dict)())


def launch_note(before: dict) -> str:
    """:func:`describe_launch` of safeattn's latest launch and what was tuned since
    ``before`` (:func:`tuner_timings`). Never raises: a log line must not cost a measurement."""
    try:
        from safeattn.kernels import launch

        new = {key: t for key, t in tuner_timings().items() if key not in before}
        return describe_launch(launch.launched_kernels(), new)
    except Exception as exc:
        return f"(configs not shown: {reason_of(exc)})"


# tools/run.py names a file here per commit and copies what the GPU suites append to it
# into that commit's versions-<sha>.json sidecar (``safeattn_launches``): the configs each
# safeattn combination ran with, so the gate can say "config changed: A -> B" on a flagged
# row (regress/compare.py). asv itself stores only numbers.
LAUNCHES_ENV = "SAFEATTN_BENCH_LAUNCHES"


def record_launch(suite: str, param_names: Iterable[str], combo: tuple) -> None:
    """Append ``{"suite", "params", "configs", "sources"}`` of safeattn's latest launch of each
    kernel (``launch.launched_kernels()``; sources from the commits that have tuning tables)
    to ``$SAFEATTN_BENCH_LAUNCHES``, if set. ``suite``: as the results name it
    (``"speed.SpeedSuite"``). Never raises: a record must not cost a measurement."""
    import json

    path = os.environ.get(LAUNCHES_ENV)
    if not path:
        return
    try:
        from safeattn.kernels import launch

        launched = sorted(launch.launched_kernels().items())
        row = {
            "suite": suite,
            "params": dict(zip(param_names, combo, strict=True)),
            "configs": {name: str(res.config) for name, res in launched},
            "sources": {name: str(getattr(res, "source", "")) for name, res in launched},
        }
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(row, sort_keys=True) + "\n")
    except Exception as exc:
        progress(f"(launched configs of {suite} {combo} not recorded: {reason_of(exc)})")
