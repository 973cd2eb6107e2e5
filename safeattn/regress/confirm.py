"""``safeattn-gate --confirm``: re-measure what blocks on speed or live resources before
blocking on it.

Two runs of the same code can differ: clocks, a neighbour on the machine, a near-tied kernel
config the tuner picked the other way. So on a GPU runner, every *speed* or *live-resource*
regression the comparison flags is measured again: base and head in fresh processes,
interleaved (base, head, base, head, ...), ``rounds`` pairs, each pair into its own results
folder and compared with the same policy. A row still blocks only if it blocks in a majority
of the re-run pairs; otherwise it is *cleared* (its verdict becomes ``unchanged``, its reason
says so). Failures, vanished benchmarks, non-finite rates, memory and every other kind are
never cleared: re-measuring cannot make them acceptable.

The measuring is one function, ``measure(sha, benchmarks, results_dir)``; the real one
(:func:`run_py_measurer`) runs ``benchmarks/run.py --same --range <sha> --bench <regex>`` in a
fresh process. A measurement that fails is a data error (exit 2): the gate fails closed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from safeattn.regress.compare import BLOCKING_VERDICTS, GROUP_PARAM_KEY, compare, load_policy
from safeattn.regress.metrics import OWN_IMPL
from safeattn.regress.results import load_results

# The kinds a re-run can clear: timings, and the live resources of the kernels that ran
# (which depend on the config the tuner chose in that process).
CONFIRMABLE_KINDS = frozenset({"speed", "resource"})
DEFAULT_ROUNDS = 3

Measurer = Callable[[str, "Selection", Path], None]


class ConfirmError(Exception):
    """A re-measurement failed or produced nothing to compare: the gate exits 2."""


@dataclass
class Confirmation:
    """What the re-run of one flagged row found."""

    machine: str
    benchmark: str
    param_key: str
    ratios: list[float]  # head / base per re-run pair (direction-aware, > 1 worse)
    blocked: list[bool]  # whether the row blocked in each pair
    confirmed: bool


def confirmable(rows: pd.DataFrame) -> pd.DataFrame:
    """The blocking rows a re-run may clear: regressions of speed or live resources."""
    mask = (rows["verdict"] == "regression") & rows["kind"].isin(CONFIRMABLE_KINDS)
    return rows[mask]


@dataclass(frozen=True)
class Selection:
    """What a re-run measures: asv ``--bench`` regexes on ``name(repr, ...)``, and the same
    combinations as regexes on ``(repr, ...)`` for the GPU suites' grids, which measure
    every combination in ``setup_cache`` unless ``$SAFEATTN_BENCH_ONLY`` narrows them
    (benchmarks/_common.py)."""

    benchmarks: tuple[str, ...]
    combos: tuple[str, ...]


def selection(rows: pd.DataFrame) -> Selection:
    """The flagged rows only: a row is its exact parameter combination, a benchmark's group
    row (its geometric mean) every safeattn combination of it."""
    benches, combos = set(), set()
    for _, row in rows.iterrows():
        name = re.escape(row["benchmark"])
        params = row["params"] if isinstance(row["params"], dict) else {}
        if row["param_key"] == GROUP_PARAM_KEY:
            combo = f"^\\({re.escape(repr(OWN_IMPL))}, "
            benches.add(f"^{name}{combo[1:]}")
            combos.add(combo)
        elif params:
            combo = "^\\(" + re.escape(", ".join(repr(v) for v in params.values())) + "\\)$"
            benches.add(f"^{name}{combo[1:]}")
            combos.add(combo)
        else:
            benches.add(f"^{name}$")
    return Selection(tuple(sorted(benches)), tuple(sorted(combos)))


def run_py_measurer(repo: Path, log: Callable[[str], None]) -> Measurer:
    """The real measurer: ``benchmarks/run.py --same --no-prewarm --range SHA --bench RE
    --results DIR`` from ``repo`` with ``$SAFEATTN_BENCH_ONLY`` set to the combinations, one
    fresh process per call (asv starts one per benchmark too), on this machine's GPU."""

    def measure(sha: str, selected: Selection, results_dir: Path) -> None:
        cmd = [sys.executable, "benchmarks/run.py", "--same", "--no-prewarm", "--range", sha,
               "--results", str(results_dir)]  # fmt: skip
        for regex in selected.benchmarks:
            cmd += ["--bench", regex]
        env = dict(os.environ, SAFEATTN_BENCH_ONLY=json.dumps(list(selected.combos)))
        start = time.perf_counter()
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True,
                              check=False)  # fmt: skip
        log(f"[confirm]   {sha[:8]}: run.py exit {proc.returncode} "
            f"({time.perf_counter() - start:.0f} s)")  # fmt: skip
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
            raise ConfirmError(f"re-measuring {sha[:8]} failed (run.py exit "
                               f"{proc.returncode}):\n{tail}")  # fmt: skip

    return measure


def confirm(
    rows: pd.DataFrame,
    base: str,
    head: str,
    measure: Measurer,
    rounds: int = DEFAULT_ROUNDS,
    policy_path: str | Path | None = None,
    log: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    workdir: Path | None = None,
) -> tuple[pd.DataFrame, list[Confirmation]]:
    """Re-measure the confirmable rows of ``rows`` (compare() rows of base -> head) and
    return (the rows with cleared ones turned ``unchanged``, one Confirmation per re-run
    row). ``rounds`` base/head pairs, interleaved; a row is confirmed when it blocks in more
    than half of them. Raises ConfirmError when a measurement fails or a re-run lacks a row.
    """
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    flagged = confirmable(rows)
    if flagged.empty:
        return rows, []
    policy = load_policy(policy_path)
    selected = selection(flagged)
    log(f"[confirm] {len(flagged)} flagged row(s), {len(selected.benchmarks)} asv selection(s); "
        f"{rounds} interleaved pair(s) of {base[:8]} (base) and {head[:8]} (head)")  # fmt: skip
    for regex in selected.benchmarks:
        log(f"[confirm]   {regex}")
    per_round: list[pd.DataFrame] = []
    with tempfile.TemporaryDirectory(prefix="safeattn-confirm-", dir=workdir) as tmp:
        for r in range(rounds):
            folder = Path(tmp) / f"pair-{r + 1}"
            for sha in (base, head):  # interleaved: base, head, base, head, ...
                measure(sha, selected, folder)
            try:
                loaded = load_results(folder)
            except FileNotFoundError as exc:
                raise ConfirmError(f"re-run pair {r + 1} wrote no results: {exc}") from exc
            frames = []
            for machine in sorted(set(flagged["machine"])):
                try:
                    frames.append(compare(loaded, base, head, machine, policy))
                except ValueError as exc:
                    raise ConfirmError(f"re-run pair {r + 1}: {exc}") from exc
            per_round.append(pd.concat(frames, ignore_index=True))

    found: list[Confirmation] = []
    out = rows.copy()
    for index, row in flagged.iterrows():
        ratios, blocked = [], []
        for r, again in enumerate(per_round):
            match = again[(again["machine"] == row["machine"])
                          & (again["benchmark"] == row["benchmark"])
                          & (again["param_key"] == row["param_key"])]  # fmt: skip
            if match.empty:
                raise ConfirmError(
                    f"re-run pair {r + 1} has no {row['benchmark']} [{row['param_key']}] on "
                    f"{row['machine']}: cannot confirm or clear it"
                )
            ratios.append(float(match["ratio"].iloc[0]))
            blocked.append(bool(match["verdict"].isin(BLOCKING_VERDICTS).iloc[0]))
        confirmed = sum(blocked) * 2 > len(blocked)
        found.append(Confirmation(row["machine"], row["benchmark"], row["param_key"], ratios,
                                  blocked, confirmed))  # fmt: skip
        shown = ", ".join(f"{x:.3f}×" for x in ratios)
        outcome = "CONFIRMED" if confirmed else "cleared"
        log(f"[confirm] {outcome}: {row['benchmark']} [{row['param_key']}] on "
            f"{row['machine']}: re-run ratios {shown}, blocked in {sum(blocked)}/{len(blocked)}")
        if confirmed:
            out.at[index, "reason"] = (f"{row['reason']}; confirmed by re-measurement "
                                       f"({sum(blocked)}/{len(blocked)} pairs, {shown})")
        else:
            out.at[index, "verdict"] = "unchanged"
            out.at[index, "reason"] = (f"cleared by re-measurement ({sum(blocked)}/"
                                       f"{len(blocked)} pairs blocked, {shown}); "
                                       f"first run: {row['reason']}")  # fmt: skip
    return out, found
