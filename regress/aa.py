"""A/A report: does the gate stay quiet when nothing changed, and still catch what it must?

    python -m regress.aa --results results --machine nvidia-h200 A B [C ...]
    python -m regress.aa --results results --machine nvidia-h200   # pairs from git

Give commits that measure the same code, oldest first, or none: then the A/A pairs are the
consecutive measured commits of the machine whose ``safeattn/`` and ``benchmarks/`` git
trees are identical and which measured the same benchmarks
(:func:`regress.aa_pairs.find_aa_pairs`; git runs in the results directory, which lives in
the repository). For each consecutive pair it reports:

a. the gate's verdict on the real pair (:func:`regress.gate.run_gate`): any block
   is a false alarm, the target is none;
b. every safeattn speed row of the head 5 % slower: caught (the gate blocks on those rows
   or their benchmark's geometric mean), and the share of rows flagged;
c. one row 20 % slower: caught? The row is the *median-noise row*: of the pair's safeattn
   speed rows, the one whose real head/base ratio is the median (lower median; ties by
   benchmark and parameters), so a typical row, neither the luckiest nor the noisiest;
d. a non-finite rate of 0.01 on one safeattn ``nonfinite_rate`` row of the head
   (:func:`regress.sensitivity.plant_nonfinite`): caught?
e. corrupt data (the head's result file truncated to half its bytes) and missing data (the
   head's result files absent), on a temporary copy of the pair's files: the gate must exit
   2 on both; the undamaged copy is run too, so an exit 2 is the damage's doing.

Plants (b-d) change an in-memory copy of the results; nothing under ``--results`` is
written. A plant counts as caught only through rows it touched that did not already block
on the real pair, so a false alarm cannot pass for a catch. This module holds the study
(the plants' sizes, the check of one pair) and its report and command line; finding the
pairs is :mod:`regress.aa_pairs`, planting and catching :mod:`regress.aa_plants`.

Exit status: 0 when every pair passes un-planted and every plant is caught, 1 otherwise, 2
for bad input (unknown commit or machine, unreadable results, git unavailable when pairs
must be found, no A/A pair at all).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from regress import gate
from regress.aa_pairs import MEASURED_TREES, AAInputError, AAPairs, find_aa_pairs, git_toplevel
from regress.aa_plants import (
    Plant,
    check_broad_slowdown,
    check_damaged_data,
    check_nonfinite,
    check_one_row_slowdown,
)
from regress.policy import load_policy
from regress.results import LoadedResults, load_results
from regress.sensitivity import PLANTED_NONFINITE_RATE, SENSITIVITY_FACTORS, slowdown_sensitivity

# The plants' sizes (the non-finite rate of (d) is sensitivity.PLANTED_NONFINITE_RATE).
BROAD_SLOWDOWN = 1.05  # (b): every safeattn speed row
ONE_ROW_SLOWDOWN = 1.20  # (c): the median-noise row

EXIT_OK, EXIT_NOT_SHOWN, EXIT_BAD_INPUT = 0, 1, 2


# ------------------------------------------------------------------------- one pair


@dataclass
class PairCheck:
    """Everything the report says about one A/A pair."""

    machine: str
    base: str
    head: str
    verdict: str  # the gate's on the real pair: gate.PASS or gate.FAIL
    blocked: list[str]  # the real pair's blocking rows, described (false alarms)
    plants: list[Plant]
    sweep: pd.DataFrame | None = None  # slowdown_sensitivity, when asked for

    @property
    def ok(self) -> bool:
        """No false alarm and every plant caught."""
        return self.verdict == gate.PASS and all(p.caught for p in self.plants)


def describe_row(row: Any) -> str:
    """A blocking compare() row in one line: verdict, benchmark, parameters, reason (up to
    its first ';', where the statistics start)."""
    name = ".".join(str(row["benchmark"]).split(".")[-2:])
    reason = str(row["reason"]).split(";")[0]
    return f"{row['verdict']}: {name} [{row['param_key']}] {reason}"


def check_pair(
    results_dir: str | Path,
    loaded: LoadedResults,
    machine: str,
    base: str,
    head: str,
    policy_path: str | None = None,
    factors: Sequence[float] = (),
) -> PairCheck:
    """Items (a)-(e) of the module docstring for one pair (full shas or prefixes).
    ``loaded``: ``load_results(results_dir)``, read once by the caller for every pair.
    ``factors``: also run :func:`slowdown_sensitivity` over them (the ``sweep``).
    Raises AAInputError when the gate cannot judge the real pair (its exit 2)."""
    results_dir = Path(results_dir)
    try:
        policy = load_policy(policy_path)
        # The gate first: it fails closed on corrupt files of these commits and resolves
        # prefixes, with its own messages.
        report = gate.run_gate(results_dir, base, head, [machine], policy_path, loaded)
        base, head = report.base, report.head
    except (ValueError, gate.GateDataError) as exc:
        raise AAInputError(str(exc)) from exc
    real = report.rows
    plants = [
        check_broad_slowdown(loaded, real, machine, base, head, policy, BROAD_SLOWDOWN),
        check_one_row_slowdown(loaded, real, machine, base, head, policy, ONE_ROW_SLOWDOWN),
        check_nonfinite(loaded, real, machine, base, head, policy, PLANTED_NONFINITE_RATE),
        *check_damaged_data(results_dir, machine, base, head, policy_path),
    ]
    sweep = slowdown_sensitivity(loaded, base, head, machine, policy, factors) if factors else None
    return PairCheck(
        machine=machine,
        base=base,
        head=head,
        verdict=gate.gate_verdict(real),
        blocked=[describe_row(r) for _, r in report.blocking.iterrows()],
        plants=plants,
        sweep=sweep,
    )


# ------------------------------------------------------------------------ rendering

_MAX_BLOCKED_SHOWN = 3  # a table cell, not the gate's report


def _blocked_cell(check: PairCheck) -> str:
    if not check.blocked:
        return "pass"
    shown = "; ".join(check.blocked[:_MAX_BLOCKED_SHOWN])
    more = len(check.blocked) - _MAX_BLOCKED_SHOWN
    return f"**blocks**: {shown}" + (f"; and {more} more" if more > 0 else "")


def _plant_cell(plant: Plant) -> str:
    return ("caught" if plant.caught else "**not caught**") + f" ({plant.cell or plant.detail})"


def wrap_paragraph(text: str) -> str:
    """A README paragraph at the README's width (markdown joins the lines again)."""
    return textwrap.fill(text, width=92, break_long_words=False, break_on_hyphens=False)


def render_markdown(machine: str, checks: Sequence[PairCheck], pairs: AAPairs | None) -> str:
    """One machine's A/A sensitivity as a markdown table (the README's gate section), or a
    sentence when it has no A/A pair."""
    notes = [f"- Note: {n}" for n in (pairs.notes if pairs is not None else [])]
    if not checks:
        measured = f" ({len(pairs.commits)} commits measured)" if pairs is not None else ""
        return "\n".join(
            [
                f"No A/A pairs measured yet on `{machine}`{measured}: no consecutive measured "
                f"commits with identical {'/ and '.join(MEASURED_TREES)}/ trees that measured "
                "the same benchmarks.",
                *(["", *notes] if notes else []),
            ]
        )
    shown = sum(c.ok for c in checks)
    false_alarms = sum(c.verdict != gate.PASS for c in checks)
    summary = (
        f"`{machine}`: {len(checks)} A/A pair(s); the gate blocks {false_alarms} of them "
        f"un-planted (false alarms); {shown} of {len(checks)} pass with every plant caught."
    )
    if pairs is not None and pairs.pairs:
        # Say how old the evidence is: pairs measured long ago say little about the
        # kernels and tuner of today.
        first, last = pairs.pairs[0][0], pairs.pairs[-1][1]
        summary += f" Pairs measured from {pairs.dates[first]} to {pairs.dates[last]}"
        later = pairs.since_last_pair()
        if later:
            summary += (
                f"; {len(later)} later commit(s) measured, in no A/A pair (newest "
                f"`{later[-1][:8]}`, {pairs.dates[later[-1]]})."
            )
        else:
            summary += "."
    lines = [
        wrap_paragraph(summary),
        "",
        "| base → head | real pair (target: pass) | "
        + " | ".join(p.name for p in checks[0].plants)
        + " |",
        "|---|---|" + "---|" * len(checks[0].plants),
    ]
    for check in checks:
        cells = [f"`{check.base[:8]}` → `{check.head[:8]}`", _blocked_cell(check)]
        cells += [_plant_cell(p) for p in check.plants]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if notes:  # what was left unpaired, and why: the count above leaves it out
        lines += ["", *notes]
    return "\n".join(lines)


def render_text(machine: str, checks: Sequence[PairCheck], pairs: AAPairs | None) -> str:
    """Plain text for a terminal: per pair its verdict, false alarms, plants and sweep."""
    lines = []
    for check in checks:
        lines.append(
            f"\n{machine} {check.base[:8]} -> {check.head[:8]}: gate {check.verdict.upper()}, "
            f"{len(check.blocked)} false alarm(s)"
        )
        lines += [f"  [false alarm] {b}" for b in check.blocked]
        for plant in check.plants:
            lines.append(
                f"  {plant.name:>16}: {'CAUGHT' if plant.caught else 'NOT CAUGHT'} - {plant.detail}"
            )
        if check.sweep is not None:
            lines.append("  slowdown  rows flagged  fraction  groups flagged  gate blocks")
            for r in check.sweep.itertuples():
                lines.append(
                    f"  {r.factor:8.2f}  {r.rows:4d} {r.flagged:7d}  {r.fraction:8.3f}  "
                    f"{r.groups:6d} {r.groups_flagged:7d}  {'yes' if r.blocks else 'no'}"
                )
    for note in pairs.notes if pairs is not None else []:
        lines.append(f"note: {note}")
    ok = sum(c.ok for c in checks)
    alarms = sum(len(c.blocked) for c in checks)
    lines.append(
        f"\n{len(checks)} pair(s): {alarms} false alarm(s); {ok} of {len(checks)} pass with "
        "every plant caught"
    )
    return "\n".join(lines).lstrip("\n") + "\n"


def render_json(machine: str, checks: Sequence[PairCheck], pairs: AAPairs | None) -> str:
    """Everything, machine-readable (NaN -> null)."""

    def clean(value: Any) -> Any:
        return None if isinstance(value, float) and not math.isfinite(value) else value

    payload = {
        "machine": machine,
        "exit_code": exit_code(checks),
        "notes": pairs.notes if pairs is not None else [],
        "pairs": [
            {
                "base": c.base,
                "head": c.head,
                "verdict": c.verdict,
                "ok": c.ok,
                "false_alarms": c.blocked,
                "plants": [
                    {"name": p.name, "caught": p.caught, "detail": p.detail} for p in c.plants
                ],
                "sweep": None
                if c.sweep is None
                else [{k: clean(v) for k, v in r.items()} for r in c.sweep.to_dict("records")],
            }
            for c in checks
        ],
    }
    return json.dumps(payload, indent=2) + "\n"


RENDERERS = {"text": render_text, "markdown": render_markdown, "json": render_json}


def exit_code(checks: Sequence[PairCheck]) -> int:
    """0 when every pair passes un-planted and every plant is caught, else 1."""
    return EXIT_OK if checks and all(c.ok for c in checks) else EXIT_NOT_SHOWN


def machine_checks(
    results_dir: str | Path,
    loaded: LoadedResults,
    machine: str,
    policy_path: str | None = None,
    factors: Sequence[float] = (),
) -> tuple[AAPairs, list[PairCheck]]:
    """The A/A pairs of ``machine`` from git (:func:`~regress.aa_pairs.find_aa_pairs`, the
    repository holding ``results_dir``) and the check of each."""
    pairs = find_aa_pairs(loaded, machine, git_toplevel(results_dir))
    checks = [
        check_pair(results_dir, loaded, machine, b, h, policy_path, factors) for b, h in pairs.pairs
    ]
    return pairs, checks


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m regress.aa``; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", required=True, help="asv results directory")
    parser.add_argument("--machine", required=True, help="asv machine name")
    parser.add_argument("--policy", help="policy TOML (default: packaged)")
    parser.add_argument("--format", choices=sorted(RENDERERS), default="text")
    parser.add_argument(
        "commits",
        nargs="*",
        help="two or more commits measuring the same code, oldest first "
        "(none: the machine's A/A pairs, found with git)",
    )
    args = parser.parse_args(argv)
    if len(args.commits) == 1:
        parser.error("give at least two commits, or none to find the A/A pairs with git")
    # The sweep over SENSITIVITY_FACTORS is for a person reading text or a tool reading
    # JSON; the markdown table (the README's) leaves it out.
    factors = SENSITIVITY_FACTORS if args.format != "markdown" else ()
    try:
        loaded = load_results(args.results)
        if args.machine not in loaded.machines:
            raise AAInputError(
                f"no results for machine {args.machine!r}; machines: {sorted(loaded.machines)}"
            )
        if args.commits:
            pairs = None
            checks = [
                check_pair(args.results, loaded, args.machine, b, h, args.policy, factors)
                for b, h in itertools.pairwise(args.commits)
            ]
        else:
            pairs, checks = machine_checks(args.results, loaded, args.machine, args.policy, factors)
            if not checks:
                raise AAInputError(render_markdown(args.machine, [], pairs))
    except (AAInputError, ValueError, FileNotFoundError) as exc:
        print(f"regress.aa: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    sys.stdout.write(RENDERERS[args.format](args.machine, checks, pairs).rstrip("\n") + "\n")
    return exit_code(checks)


if __name__ == "__main__":
    sys.exit(main())
