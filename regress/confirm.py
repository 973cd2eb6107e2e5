"""``safeattn-gate --confirm``: re-measure what blocks on speed or live resources before
blocking on it.

Two runs of the same code can differ: clocks, a neighbour on the machine, a near-tied kernel
config the tuner picked the other way. So on a GPU runner, every *speed* or *live-resource*
regression the comparison flags is measured again: base and head in fresh processes,
interleaved (base, head, base, head, ...), ``rounds`` pairs, each pair into its own results
folder and compared with the same policy. A row still blocks only if it blocks in a majority
of the re-run pairs; otherwise it is *cleared* (its verdict becomes ``unchanged``, its reason
says so). Failures, vanished benchmarks, non-finite rates, memory, the static audit's
resources and every other kind are never cleared: re-measuring cannot make them acceptable.

The measuring is one function, ``measure(sha, selection, results_dir)``; the real one
(:func:`run_py_measurer`) runs ``tools/run.py --same --range <sha> --bench <regex>`` in a
fresh process, the tests pass a fake. A measurement that fails, or a re-run that lacks a
flagged row on either commit, is a data error (exit 2): the gate fails closed.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from regress.compare import GROUP_PARAM_KEY, compare
from regress.metrics import OWN_IMPL
from regress.policy import BLOCKING_VERDICTS, load_policy
from regress.results import load_results

# The kinds a re-run can clear: timings, and the live resources of the kernels that ran
# (which depend on the config the tuner chose in that process).
CONFIRMABLE_KINDS = frozenset({"speed", "resource"})
# A re-run pair's verdicts that mean the row was measured on both commits and compared
# ("failure": it broke on head in the re-run, which blocks). Anything else (skipped or
# failed on both, absent on one side) is no evidence, and must not clear a row.
_MEASURED_VERDICTS = frozenset({"regression", "improvement", "unchanged", "failure"})
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
    # Mann-Whitney p per pair (NaN where the row has no test: resources, geometric means)
    p_values: list[float] = field(default_factory=list)
    first_ratio: float = math.nan  # what the comparison being confirmed found
    first_p: float = math.nan

    def first_run(self) -> str:
        """``"1.210× p=1e-05"``: the flagged comparison's ratio and p."""
        p = "" if math.isnan(self.first_p) else f" {_p_text(self.first_p)}"
        return _ratio_text(self.first_ratio) + p

    def evidence(self) -> str:
        """``"blocked in 3/3 pairs: 1.21× p=0.0001, ..."`` for logs and reports."""
        pairs = ", ".join(
            _ratio_text(ratio) + ("" if math.isnan(p) else f" {_p_text(p)}")
            for ratio, p in zip(self.ratios, self.p_values or [math.nan] * len(self.ratios),
                                strict=True)
        )  # fmt: skip
        return f"blocked in {sum(self.blocked)}/{len(self.blocked)} pairs: {pairs}"


def confirmable(rows: pd.DataFrame) -> pd.DataFrame:
    """The blocking rows a re-run may clear: regressions of speed or *live* resources.

    A resource row with an ``arch`` parameter is the static audit's (cross-compiled for that
    architecture, resources.StaticAuditSuite): a compile-time fact that no re-run changes.
    """
    static = rows["params"].map(lambda p: isinstance(p, dict) and "arch" in p)
    mask = (rows["verdict"] == "regression") & rows["kind"].isin(CONFIRMABLE_KINDS) & ~static
    return rows[mask]


@dataclass(frozen=True)
class Selection:
    """What a re-run measures: asv ``--bench`` regexes on ``name(repr, ...)``, and the same
    combinations as regexes on ``(repr, ...)`` for the GPU suites' grids, which measure
    every combination in ``setup_cache`` unless ``$SAFEATTN_BENCH_ONLY`` narrows them
    (benchmarks/_grid.py)."""

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
    """The real measurer: ``tools/run.py --same --no-prewarm --range SHA --bench RE
    --results DIR`` from ``repo`` with ``$SAFEATTN_BENCH_ONLY`` set to the combinations, one
    fresh process per call (asv starts one per benchmark too), on this machine's GPU."""

    def measure(sha: str, selected: Selection, results_dir: Path) -> None:
        cmd = [sys.executable, "tools/run.py", "--same", "--no-prewarm", "--range", sha,
               "--results", str(results_dir)]  # fmt: skip
        for regex in selected.benchmarks:
            cmd += ["--bench", regex]
        env = dict(os.environ, SAFEATTN_BENCH_ONLY=json.dumps(list(selected.combos)))
        log(f"[confirm]   $ {' '.join(cmd[1:])}")
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True,
                              check=False)  # fmt: skip
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
    than half of them. Raises ConfirmError when a measurement fails (whatever it raises) or
    a re-run pair did not measure a row on both commits: the gate then exits 2, it never
    clears a row on a measurement it does not have.
    """
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    flagged = confirmable(rows)
    if flagged.empty:
        return rows, []
    policy = load_policy(policy_path)
    selected = selection(flagged)
    log(f"[confirm] re-measuring {len(flagged)} flagged row(s): {rounds} interleaved pair(s) "
        f"of {base[:8]} (base) and {head[:8]} (head), each commit in a fresh process")  # fmt: skip
    for _, row in flagged.iterrows():
        p = "" if math.isnan(row["p_value"]) else f" {_p_text(row['p_value'])}"
        log(f"[confirm]   {row['machine']} {row['benchmark']} [{row['param_key']}]: "
            f"first run {_ratio_text(row['ratio'])}{p}")  # fmt: skip
    log("[confirm]   asv --bench: " + " ".join(selected.benchmarks))
    per_round: list[pd.DataFrame] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="safeattn-confirm-", dir=workdir) as tmp:
        for r in range(rounds):
            folder = Path(tmp) / f"pair-{r + 1}"
            for label, sha in (("base", base), ("head", head)):  # base, head, base, head, ...
                _measure_once(measure, sha, selected, folder, f"pair {r + 1}/{rounds} {label}",
                              log)  # fmt: skip
            per_round.append(_compare_pair(folder, base, head, flagged, policy, r))
    log(f"[confirm] {2 * rounds} measurement(s) in {time.perf_counter() - started:.0f} s")

    found: list[Confirmation] = []
    out = rows.copy()
    for index, row in flagged.iterrows():
        c = decide(row, per_round)
        found.append(c)
        log(f"[confirm] {'CONFIRMED' if c.confirmed else 'cleared'}: {c.benchmark} "
            f"[{c.param_key}] on {c.machine}: {c.evidence()}")  # fmt: skip
        if c.confirmed:
            out.at[index, "reason"] = (f"{row['reason']}; confirmed by re-measurement "
                                       f"({c.evidence()})")  # fmt: skip
        else:
            out.at[index, "verdict"] = "unchanged"
            out.at[index, "reason"] = (f"cleared by re-measurement ({c.evidence()}); "
                                       f"first run: {row['reason']}")  # fmt: skip
    return out, found


def _measure_once(
    measure: Measurer, sha: str, selected: Selection, folder: Path, what: str,
    log: Callable[[str], None],
) -> None:  # fmt: skip
    """One measurement; any exception becomes a ConfirmError: a measurer that breaks (a
    missing GPU, a crashed process, a bug) must give exit 2, never a traceback's exit 1
    that reads as "regression"."""
    start = time.perf_counter()
    try:
        measure(sha, selected, folder)
    except ConfirmError:
        raise
    except Exception as exc:
        raise ConfirmError(f"re-measuring {sha[:8]} ({what}) failed: "
                           f"{type(exc).__name__}: {exc}") from exc  # fmt: skip
    log(f"[confirm]   {what} {sha[:8]}: {time.perf_counter() - start:.0f} s")


def _compare_pair(
    folder: Path, base: str, head: str, flagged: pd.DataFrame, policy, r: int
) -> pd.DataFrame:
    """compare() of one re-run pair's folder, on every machine of the flagged rows."""
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
    return pd.concat(frames, ignore_index=True)


def decide(row: pd.Series, per_round: list[pd.DataFrame]) -> Confirmation:
    """The re-runs' verdict on one flagged row: confirmed when the row blocks in more than
    half of ``per_round`` (compare() rows of each re-run pair). A pair in which the row was
    not compared on both commits (absent, skipped or failed on both, absent on one) raises
    ConfirmError: it is no evidence either way."""
    ratios, p_values, blocked = [], [], []
    for r, again in enumerate(per_round):
        match = again[(again["machine"] == row["machine"])
                      & (again["benchmark"] == row["benchmark"])
                      & (again["param_key"] == row["param_key"])]  # fmt: skip
        verdict = match["verdict"].iloc[0] if len(match) else None
        if verdict not in _MEASURED_VERDICTS:
            got = f"verdict {verdict}: {match['reason'].iloc[0]}" if len(match) else "absent"
            raise ConfirmError(
                f"re-run pair {r + 1} did not measure {row['benchmark']} [{row['param_key']}] "
                f"on {row['machine']} on both commits ({got}): cannot confirm or clear it"
            )
        ratios.append(float(match["ratio"].iloc[0]))
        p_values.append(float(match["p_value"].iloc[0]))
        blocked.append(verdict in BLOCKING_VERDICTS)
    confirmed = sum(blocked) * 2 > len(blocked)
    return Confirmation(row["machine"], row["benchmark"], row["param_key"], ratios, blocked,
                        confirmed, p_values, float(row["ratio"]),
                        float(row["p_value"]))  # fmt: skip


def _ratio_text(ratio: float) -> str:
    return "—" if not isinstance(ratio, float) or math.isnan(ratio) else f"{ratio:.3f}×"


def _p_text(p: float) -> str:
    return "no test" if not isinstance(p, float) or math.isnan(p) else f"p={p:.2g}"
