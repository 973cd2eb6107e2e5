"""``safeattn-gate``: block a merge on performance, memory, resource or NaN regressions.

Compares the asv results of two commits on every machine that has both, with the one
comparison the dashboard also uses (:func:`regress.compare.compare`), and exits

- 0: pass — nothing blocking;
- 1: regression — a regression, failure or vanished benchmark on some machine;
- 2: usage or data error — missing results, unknown commit, unreadable files, an invalid
  policy, nothing comparable. It fails closed: it never passes on data it could not read.

Example::

    safeattn-gate --results results --base origin/main --head HEAD --format markdown
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from regress.compare import compare
from regress.confirm import (
    DEFAULT_ROUNDS,
    Confirmation,
    ConfirmError,
    Measurer,
    confirm,
    run_py_measurer,
)
from regress.gate_render import RENDERERS
from regress.policy import BLOCKING_VERDICTS, DEFAULT_POLICY_PATH, Policy, load_policy
from regress.results import LoadedResults, load_results, resolve_commit

EXIT_PASS, EXIT_REGRESSION, EXIT_DATA_ERROR = 0, 1, 2
# Verdicts that show the comparison actually happened; with none of them the gate has
# compared nothing and must not pass.
_COMPARED = frozenset({"failure", "missing", "regression", "improvement", "unchanged"})


# The gate's verdict on a set of compare() rows (what its exit code says).
PASS, FAIL, NOTHING_COMPARED = "pass", "fail", "nothing compared"


def gate_verdict(rows: pd.DataFrame) -> str:
    """The gate's verdict on :func:`~regress.compare.compare` rows: ``"fail"``
    (exit 1) when any row is blocking, ``"nothing compared"`` (exit 2) when no row was
    actually compared (every row new, context or not comparable), else ``"pass"`` (exit 0).
    The dashboard states its verdicts with this function, so they read as the gate's."""
    verdicts = rows["verdict"]
    if verdicts.isin(BLOCKING_VERDICTS).any():
        return FAIL
    if not verdicts.isin(_COMPARED).any():
        return NOTHING_COMPARED
    return PASS


class GateDataError(Exception):
    """Missing, unknown or unreadable input: the gate exits 2."""


@dataclass
class GateReport:
    """What one run of the gate found: the compared commits and machines, the compare()
    rows, and what the exit code and the renderers (:mod:`regress.gate_render`) read."""

    base: str
    head: str
    machines: list[str]
    rows: pd.DataFrame  # compare() rows of every machine
    policy_source: str
    notes: list[str] = field(default_factory=list)  # e.g. machines with only one commit
    warnings: list[str] = field(default_factory=list)  # unreadable files of other commits
    # --confirm: what the re-runs found, one per re-measured row; None when not asked for
    confirmations: list[Confirmation] | None = None

    @property
    def blocking(self) -> pd.DataFrame:
        return self.rows[self.rows["verdict"].isin(BLOCKING_VERDICTS)]

    @property
    def exit_code(self) -> int:
        return EXIT_REGRESSION if len(self.blocking) else EXIT_PASS

    @property
    def passed(self) -> bool:
        """Whether the gate passes (exit 0): nothing blocks."""
        return self.exit_code == EXIT_PASS


def run_gate(
    results_dir: str | Path,
    base: str,
    head: str,
    machines: Sequence[str] | None = None,
    policy_path: str | Path | None = None,
    loaded: LoadedResults | None = None,
) -> GateReport:
    """Load, resolve and compare; raise GateDataError for anything that must exit 2.
    ``loaded``: ``load_results(results_dir)`` already read by a caller that gates several
    pairs of the same directory (``regress.aa``), so that it is read once, not per pair."""
    try:
        policy = load_policy(policy_path)
    except ValueError as exc:
        raise GateDataError(str(exc)) from exc
    if loaded is None:
        try:
            loaded = load_results(results_dir)
        except FileNotFoundError as exc:
            raise GateDataError(str(exc)) from exc

    base_ref, head_ref = _git_sha_or_ref(base), _git_sha_or_ref(head)
    relevant, other = _split_problems(loaded, [base_ref, head_ref], machines)
    if relevant:
        raise GateDataError(
            "unreadable or corrupt result files for the compared commits "
            "(re-run asv for them):\n  " + "\n  ".join(relevant)
        )
    try:
        base_sha = resolve_commit(loaded, base_ref)
        head_sha = resolve_commit(loaded, head_ref)
    except ValueError as exc:
        raise GateDataError(str(exc)) from exc

    selected, notes = _select_machines(loaded, base_sha, head_sha, machines)
    frames = [compare(loaded, base_sha, head_sha, m, policy) for m in selected]
    rows = pd.concat(frames, ignore_index=True)
    if gate_verdict(rows) == NOTHING_COMPARED:
        counts = rows["verdict"].value_counts().to_dict()
        raise GateDataError(
            f"nothing comparable between {base_sha[:8]} and {head_sha[:8]} on {selected}: "
            f"verdicts {counts}. Did the benchmarks fail on both commits?"
        )
    return GateReport(
        base=base_sha,
        head=head_sha,
        machines=selected,
        rows=rows,
        policy_source=_policy_label(policy),
        notes=notes,
        warnings=other,
    )


def _git_sha_or_ref(ref: str) -> str:
    """Branch names and ``HEAD~1`` are resolved with git (in the current directory); a
    hex sha or prefix is passed through for :func:`resolve_commit`."""
    if re.fullmatch(r"[0-9a-fA-F]{4,64}", ref.strip()):
        return ref.strip()
    try:
        proc = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as exc:
        raise GateDataError(f"{ref!r} is not a sha and git is unavailable: {exc}") from exc
    if proc.returncode != 0:
        raise GateDataError(
            f"unknown commit {ref!r}: not a sha, and `git rev-parse` in {Path.cwd()} "
            "does not know it"
        )
    return proc.stdout.strip()


def _split_problems(
    loaded: LoadedResults, refs: list[str], machines: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    """Problems that touch the compared commits (fatal) vs. the rest (warnings).

    Result files are named ``<sha[:8]>-<env>.json`` and per-commit sidecars carry the full
    sha (``versions-<sha>.json``); benchmarks.json, machine.json and any other file of the
    machines involved count as touching every comparison.
    """
    refs = [r.lower() for r in refs]
    relevant, other = [], []
    for problem in loaded.problems:
        path = problem.split(": ", 1)[0]
        parts = path.split("/")
        if len(parts) == 1:
            touches = True  # benchmarks.json
        else:
            machine, name = parts[0], parts[-1]
            in_scope = machines is None or machine in machines
            result_file = re.match(r"^([0-9a-f]{8})-", name)
            sidecar_sha = re.search(r"[0-9a-f]{40}", name)
            if result_file:
                touches = in_scope and any(result_file[1].startswith(r[:8]) for r in refs)
            elif sidecar_sha:
                touches = in_scope and any(sidecar_sha[0].startswith(r) for r in refs)
            else:
                touches = in_scope
        (relevant if touches else other).append(problem)
    return relevant, other


def _select_machines(
    loaded: LoadedResults, base: str, head: str, wanted: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    commits = loaded.commits
    having = {sha: set(commits.loc[commits["commit"] == sha, "machine"]) for sha in (base, head)}
    both = sorted(having[base] & having[head])
    notes = []
    if wanted:
        unknown = [m for m in wanted if m not in loaded.machines]
        if unknown:
            raise GateDataError(
                f"unknown machine(s) {unknown}; machines in the results: {sorted(loaded.machines)}"
            )
        lacking = [m for m in wanted if m not in both]
        if lacking:
            detail = "; ".join(
                f"{m}: base {'present' if m in having[base] else 'MISSING'}, "
                f"head {'present' if m in having[head] else 'MISSING'}"
                for m in lacking
            )
            raise GateDataError(f"no results for both commits on {detail}")
        return list(dict.fromkeys(wanted)), notes
    if not both:
        raise GateDataError(
            f"no machine has results for both commits: base {base[:8]} on "
            f"{sorted(having[base]) or 'none'}, head {head[:8]} on {sorted(having[head]) or 'none'}"
        )
    for sha, label in ((base, "base"), (head, "head")):
        for m in sorted(having[sha] - set(both)):
            notes.append(f"machine {m} has results for the {label} only: not compared")
    return both, notes


def _policy_label(policy: Policy) -> str:
    if Path(policy.source) == DEFAULT_POLICY_PATH:
        return "default (regress/policy.toml)"
    return policy.source


def _log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)  # progress: stdout holds the report only


def confirm_report(
    report: GateReport,
    measure: Measurer,
    rounds: int = DEFAULT_ROUNDS,
    policy_path: str | Path | None = None,
    log=_log,
) -> GateReport:
    """``report`` after :func:`regress.confirm.confirm`: its speed and
    live-resource regressions re-measured, the ones the re-run does not confirm cleared."""
    rows, found = confirm(report.rows, report.base, report.head, measure, rounds,
                          policy_path, log)  # fmt: skip
    return dataclasses.replace(report, rows=rows, confirmations=found)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="safeattn-gate",
        description="Compare the asv results of two commits and block on regressions. "
        "Exit 0 pass, 1 regression, 2 usage or data error.",
    )
    parser.add_argument("--results", required=True, help="asv results directory")
    parser.add_argument("--base", required=True, help="base commit (sha, prefix or git ref)")
    parser.add_argument("--head", required=True, help="head commit (sha, prefix or git ref)")
    parser.add_argument(
        "--machine",
        action="extend",
        nargs="+",
        default=None,
        metavar="NAME",
        help="asv machine name(s) (default: every machine with results for both commits)",
    )
    parser.add_argument("--policy", default=None, help="policy TOML (default: packaged)")
    parser.add_argument("--format", choices=sorted(RENDERERS), default="text")
    parser.add_argument(
        "--confirm", action="store_true",
        help="on a GPU runner: re-measure every flagged speed or live-resource row (base and "
        "head interleaved, fresh processes) and block only where the re-run confirms it",
    )  # fmt: skip
    parser.add_argument(
        "--confirm-rounds", type=int, default=DEFAULT_ROUNDS, metavar="N",
        help=f"base/head pairs re-measured by --confirm (default {DEFAULT_ROUNDS})",
    )  # fmt: skip
    parser.add_argument(
        "--repo", default=".", help="the git checkout whose tools/run.py --confirm runs"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``safeattn-gate``; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        report = run_gate(args.results, args.base, args.head, args.machine, args.policy)
        if args.confirm:
            report = confirm_report(report, run_py_measurer(Path(args.repo), _log),
                                    args.confirm_rounds, args.policy)  # fmt: skip
    except (GateDataError, ConfirmError) as exc:
        print(f"safeattn-gate: error: {exc}", file=sys.stderr)
        return EXIT_DATA_ERROR
    sys.stdout.write(RENDERERS[args.format](report))
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
