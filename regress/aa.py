"""A/A report: does the gate stay quiet when nothing changed, and still catch what it must?

    python -m regress.aa --results results --machine nvidia-h200 A B [C ...]
    python -m regress.aa --results results --machine nvidia-h200   # pairs from git

Give commits that measure the same code, oldest first, or none: then the A/A pairs are the
consecutive measured commits of the machine whose ``safeattn/`` and ``benchmarks/`` git
trees are identical (:func:`find_aa_pairs`; git runs in the results directory, which lives
in the repository). For each consecutive pair it reports:

a. the gate's verdict on the real pair (:func:`regress.gate.run_gate`): any block
   is a false alarm, the target is none;
b. every safeattn speed row of the head 5 % slower: caught (the gate blocks on those rows
   or their benchmark's geometric mean), and the share of rows flagged;
c. one row 20 % slower: caught? The row is the *median-noise row*: of the pair's safeattn
   speed rows, the one whose real head/base ratio is the median (lower median; ties by
   benchmark and parameters), so a typical row, neither the luckiest nor the noisiest;
d. a non-finite rate of 0.01 on one safeattn ``nonfinite_rate`` row of the head
   (:func:`regress.compare.plant_nonfinite`): caught?
e. corrupt data (the head's result file truncated to half its bytes) and missing data (the
   head's result files absent), on a temporary copy of the pair's files: the gate must exit
   2 on both; the undamaged copy is run too, so an exit 2 is the damage's doing.

Plants (b-d) change an in-memory copy of the results; nothing under ``--results`` is
written. A plant counts as caught only through rows it touched that did not already block
on the real pair, so a false alarm cannot pass for a catch.

Exit status: 0 when every pair passes un-planted and every plant is caught, 1 otherwise, 2
for bad input (unknown commit or machine, unreadable results, git unavailable when pairs
must be found, no A/A pair at all).
"""

from __future__ import annotations

import argparse
import io
import itertools
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from regress import gate
from regress.compare import (
    BLOCKING_VERDICTS,
    GROUP_PARAM_KEY,
    PLANTED_NONFINITE_RATE,
    SENSITIVITY_FACTORS,
    Policy,
    compare,
    load_policy,
    own_speed_rows,
    plant_nonfinite,
    plant_slowdown,
    slowdown_sensitivity,
    speed_flag_counts,
)
from regress.results import LoadedResults, load_results

# The git trees whose identity makes two commits an A/A pair: the package measured and the
# suite that measures it. Docs, tests, results and the README may differ.
MEASURED_TREES: tuple[str, ...] = ("safeattn", "benchmarks")
BROAD_SLOWDOWN = 1.05  # (b): every safeattn speed row
ONE_ROW_SLOWDOWN = 1.20  # (c): the median-noise row

# asv's result file name, as the loader matches it (results.py); the rest are sidecars.
_RESULT_FILE = re.compile(r"^[0-9a-f]{8}-.+\.json$")

EXIT_OK, EXIT_NOT_SHOWN, EXIT_BAD_INPUT = 0, 1, 2


class AAInputError(Exception):
    """Bad input for the A/A report (exit 2)."""


# ------------------------------------------------------------------ A/A pairs from git


def git_toplevel(path: str | Path) -> Path:
    """The root of the git repository holding ``path``; AAInputError when git cannot run
    or ``path`` is not in a repository (A/A pairs cannot be found without its history)."""
    hint = (
        "HINT: run it in a clone of the repository (the results directory lives there), "
        "or name the commits: python -m regress.aa --machine M A B [C ...]"
    )
    try:
        proc = subprocess.run(
            ["git", "-C", str(path), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as exc:
        raise AAInputError(
            f"git is needed to find A/A pairs but could not run: {exc}\n{hint}"
        ) from exc
    if proc.returncode != 0:
        raise AAInputError(
            f"{str(path)!r} is not inside a git repository, so the commits' trees cannot be "
            f"compared: {proc.stderr.strip()}\n{hint}"
        )
    return Path(proc.stdout.strip())


def measured_trees(repo: str | Path, commit: str) -> tuple[str, ...] | None:
    """The git tree ids of :data:`MEASURED_TREES` at ``commit``, or None when git does not
    know the commit (e.g. a shallow clone, a branch never fetched) or a tree is absent."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", *(f"{commit}:{p}" for p in MEASURED_TREES)],
        capture_output=True,
        text=True,
        check=False,
    )
    ids = proc.stdout.split()
    if proc.returncode != 0 or len(ids) != len(MEASURED_TREES):
        return None
    return tuple(ids)


@dataclass
class AAPairs:
    """The A/A pairs of one machine: ``pairs`` (base, head) oldest first; ``commits``: the
    commits it measured, oldest first; ``dates``: their commit dates (YYYY-MM-DD);
    ``notes``: commits whose trees git could not read."""

    machine: str
    pairs: list[tuple[str, str]]
    commits: list[str]
    dates: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def since_last_pair(self) -> list[str]:
        """The commits measured after the newest pair's head (all of them without pairs):
        measured, but in no A/A pair."""
        if not self.pairs:
            return list(self.commits)
        return self.commits[self.commits.index(self.pairs[-1][1]) + 1 :]


def find_aa_pairs(loaded: LoadedResults, machine: str, repo: str | Path) -> AAPairs:
    """Consecutive measured commits of ``machine`` (the loader's commit order) whose
    :data:`MEASURED_TREES` are identical in the git repository ``repo``."""
    rows = loaded.commits[loaded.commits["machine"] == machine].sort_values("order")
    shas = [str(c) for c in rows["commit"]]
    dates = {
        str(c): d.strftime("%Y-%m-%d") for c, d in zip(rows["commit"], rows["date"], strict=True)
    }
    trees = {sha: measured_trees(repo, sha) for sha in shas}
    notes = [
        f"{sha[:8]}: git cannot read its {'/ and '.join(MEASURED_TREES)}/ trees "
        "(not in this clone's history?): not paired"
        for sha in shas
        if trees[sha] is None
    ]
    pairs = [
        (base, head)
        for base, head in itertools.pairwise(shas)
        if trees[base] is not None and trees[base] == trees[head]
    ]
    return AAPairs(machine=machine, pairs=pairs, commits=shas, dates=dates, notes=notes)


# ------------------------------------------------------------------------- one pair


@dataclass
class Plant:
    """One planted defect and whether the gate caught it."""

    name: str  # short, for tables: "5% every row", "20% one row", ...
    caught: bool
    detail: str  # what happened, for the text and JSON reports
    cell: str = ""  # the same, a few words, for a README table cell


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


def _newly_blocking(
    real: pd.DataFrame, planted: pd.DataFrame, keys: set[tuple[str, str]]
) -> pd.DataFrame:
    """Rows of ``planted`` that block, belong to the plant (a planted (benchmark,
    param_key) or the group row of a planted benchmark) and did not block on ``real``."""
    benchmarks = {b for b, _ in keys}
    related = [
        (b, k) in keys or (k == GROUP_PARAM_KEY and b in benchmarks)
        for b, k in zip(planted["benchmark"], planted["param_key"], strict=True)
    ]
    blocking = planted[pd.Series(related, index=planted.index, dtype=bool)]
    blocking = blocking[blocking["verdict"].isin(BLOCKING_VERDICTS)]
    real_blocking = real[real["verdict"].isin(BLOCKING_VERDICTS)]
    already = set(zip(real_blocking["benchmark"], real_blocking["param_key"], strict=True))
    fresh = [
        (b, k) not in already
        for b, k in zip(blocking["benchmark"], blocking["param_key"], strict=True)
    ]
    return blocking[pd.Series(fresh, index=blocking.index, dtype=bool)]


def _keys(table: pd.DataFrame, mask: pd.Series) -> set[tuple[str, str]]:
    rows = table[mask]
    return set(zip(rows["benchmark"], rows["param_key"], strict=True))


def median_noise_row(real: pd.DataFrame) -> tuple[str, str] | None:
    """(benchmark, param_key) of the safeattn speed row whose real ratio is the lower
    median of the pair's (ties broken by benchmark, then parameters); None without any."""
    own = real[(real["kind"] == "speed") & ~real["peer"].astype(bool)]
    own = own[(own["param_key"] != GROUP_PARAM_KEY) & own["ratio"].notna()]
    if own.empty:
        return None
    ordered = own.sort_values(["ratio", "benchmark", "param_key"], kind="stable")
    row = ordered.iloc[(len(ordered) - 1) // 2]
    return str(row["benchmark"]), str(row["param_key"])


def _broad_slowdown(
    loaded: LoadedResults,
    real: pd.DataFrame,
    machine: str,
    base: str,
    head: str,
    policy: Policy,
) -> Plant:
    name = f"{BROAD_SLOWDOWN - 1:.0%} every row"
    rows = own_speed_rows(loaded.table, machine, head)
    if not rows.any():
        return Plant(name, False, "no safeattn speed rows on head: nothing to plant")
    planted = compare(plant_slowdown(loaded, rows, BROAD_SLOWDOWN), base, head, machine, policy)
    counts = speed_flag_counts(planted)
    caught = not _newly_blocking(real, planted, _keys(loaded.table, rows)).empty
    detail = (
        f"{'blocks' if caught else 'does not block'}: {counts['flagged']} of {counts['rows']} "
        f"rows flagged ({counts['fraction']:.0%}), {counts['groups_flagged']} of "
        f"{counts['groups']} benchmark means"
    )
    cell = (
        f"{counts['groups_flagged']}/{counts['groups']} means, "
        f"{counts['flagged']}/{counts['rows']} rows"
    )
    return Plant(name, caught, detail, cell)


def _one_row_slowdown(
    loaded: LoadedResults,
    real: pd.DataFrame,
    machine: str,
    base: str,
    head: str,
    policy: Policy,
) -> Plant:
    name = f"{ONE_ROW_SLOWDOWN - 1:.0%} one row"
    key = median_noise_row(real)
    if key is None:
        return Plant(name, False, "no safeattn speed row on both commits: nothing to plant")
    table = loaded.table
    rows = (
        own_speed_rows(table, machine, head)
        & table["benchmark"].eq(key[0])
        & table["param_key"].eq(key[1])
    )
    planted = compare(plant_slowdown(loaded, rows, ONE_ROW_SLOWDOWN), base, head, machine, policy)
    caught = not _newly_blocking(real, planted, {key}).empty
    row = planted[(planted["benchmark"] == key[0]) & (planted["param_key"] == key[1])].iloc[0]
    real_ratio = real[(real["benchmark"] == key[0]) & (real["param_key"] == key[1])].iloc[0]
    detail = (
        f"{'blocks' if caught else 'does not block'}: {key[0].rsplit('.', 1)[-1]} [{key[1]}] "
        f"(median-noise row, A/A ratio {real_ratio['ratio']:.3f}) -> {row['ratio']:.3f}, "
        f"{row['verdict']}"
    )
    return Plant(name, caught, detail, f"{real_ratio['ratio']:.3f} → {row['ratio']:.3f}×")


def _nonfinite(
    loaded: LoadedResults,
    real: pd.DataFrame,
    machine: str,
    base: str,
    head: str,
    policy: Policy,
) -> Plant:
    name = "non-finite rate"
    trial, key = plant_nonfinite(loaded, machine, head)
    if key is None:
        return Plant(name, False, "no safeattn nonfinite_rate row measuring 0 on head: not planted")
    planted = compare(trial, base, head, machine, policy)
    caught = not _newly_blocking(real, planted, {key}).empty
    detail = (
        f"{'blocks' if caught else 'does not block'}: {key[0].rsplit('.', 1)[-1]} [{key[1]}] "
        f"= {PLANTED_NONFINITE_RATE:g}"
    )
    return Plant(name, caught, detail, f"rate {PLANTED_NONFINITE_RATE:g}")


def _pair_copy(results_dir: Path, machine: str, base: str, head: str, dest: Path) -> list[Path]:
    """Copy what the gate reads for ``base`` and ``head`` on ``machine`` (benchmarks.json,
    machine.json, every sidecar, the two commits' result files) under ``dest``; return the
    head's result files in the copy. asv names result files ``<sha[:8]>-<env>.json``."""
    (dest / machine).mkdir(parents=True)
    if (results_dir / "benchmarks.json").exists():
        shutil.copy2(results_dir / "benchmarks.json", dest / "benchmarks.json")
    head_files = []
    for path in sorted((results_dir / machine).glob("*.json")):
        is_result = _RESULT_FILE.match(path.name) is not None
        if is_result and not path.name.startswith((f"{base[:8]}-", f"{head[:8]}-")):
            continue  # another commit's results: the gate does not read them
        shutil.copy2(path, dest / machine / path.name)
        if is_result and path.name.startswith(f"{head[:8]}-"):
            head_files.append(dest / machine / path.name)
    return head_files


def _truncate(files: list[Path]) -> None:
    for path in files:
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])


def _remove(files: list[Path]) -> None:
    for path in files:
        path.unlink()


def _run_gate_cli(args: list[str]) -> tuple[int, str]:
    """safeattn-gate's exit code and first error line, its output swallowed."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = gate.main(args)
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    return code, lines[0] if lines else ""


def _damaged_data(
    results_dir: Path, machine: str, base: str, head: str, policy_path: str | None
) -> list[Plant]:
    """(e): the gate on a temporary copy of the pair's files, undamaged (a control: it must
    not exit 2), with the head's result files truncated, and with them removed."""
    damages: dict[str, Callable[[list[Path]], None]] = {
        "corrupt data": _truncate,
        "missing data": _remove,
    }
    codes: dict[str, tuple[int, str]] = {}
    for label, damage in {"control": None, **damages}.items():
        with tempfile.TemporaryDirectory(prefix="safeattn-aa-") as tmp:
            copy = Path(tmp) / "results"
            head_files = _pair_copy(results_dir, machine, base, head, copy)
            if damage is not None:
                damage(head_files)
            args = ["--results", str(copy), "--base", base, "--head", head, "--machine", machine]
            args += ["--policy", policy_path] if policy_path else []
            codes[label] = _run_gate_cli(args)
    control_code, control_error = codes["control"]
    plants = []
    for label in damages:
        code, error = codes[label]
        if control_code == gate.EXIT_DATA_ERROR:
            caught, detail = False, f"the undamaged copy already exits 2 ({control_error})"
        else:
            caught = code == gate.EXIT_DATA_ERROR
            detail = f"gate exit {code}" + (f" ({error[:120]})" if error else "")
        plants.append(Plant(label, caught, detail, f"exit {code}"))
    return plants


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
        report = gate.run_gate(results_dir, base, head, [machine], policy_path)
        base, head = report.base, report.head
    except (ValueError, gate.GateDataError) as exc:
        raise AAInputError(str(exc)) from exc
    real = report.rows
    plants = [
        _broad_slowdown(loaded, real, machine, base, head, policy),
        _one_row_slowdown(loaded, real, machine, base, head, policy),
        _nonfinite(loaded, real, machine, base, head, policy),
        *_damaged_data(results_dir, machine, base, head, policy_path),
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
    if not checks:
        measured = f" ({len(pairs.commits)} commits measured)" if pairs is not None else ""
        return (
            f"No A/A pairs measured yet on `{machine}`{measured}: no consecutive measured "
            f"commits with identical {'/ and '.join(MEASURED_TREES)}/ trees."
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
    """The A/A pairs of ``machine`` from git (:func:`find_aa_pairs`, the repository holding
    ``results_dir``) and the check of each."""
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
