"""Which commits form A/A pairs: consecutive measured commits of a machine whose
``safeattn/`` and ``benchmarks/`` git trees are identical and which measured the same
benchmarks, so they are the same measurement taken twice (the pairs :mod:`regress.aa`
checks the gate on). git runs in the repository that holds the results directory.

Why the same benchmarks too: a commit measured with only some suites (a device session that
ran one suite) beside one measured with others is not a second run of anything. The gate
blocks such a head, as it must (a benchmark measured on the base and absent on the head is
missing data), and that is not a false alarm. Such a pair is left out with a note.
"""

from __future__ import annotations

import itertools
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from regress.results import LoadedResults

# The git trees whose identity makes two commits an A/A pair: the package measured and the
# suite that measures it. Docs, tests, results and the README may differ.
MEASURED_TREES: tuple[str, ...] = ("safeattn", "benchmarks")


class AAInputError(Exception):
    """Bad input for the A/A report (exit 2)."""


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
    ``notes``: commits whose trees git could not read, and consecutive commits with
    identical trees left unpaired because they measured different benchmarks."""

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
    :data:`MEASURED_TREES` are identical in the git repository ``repo`` and which measured
    the same set of benchmarks (see the module docstring)."""
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
    table = loaded.table[loaded.table["machine"] == machine]
    measured = {str(c): frozenset(b) for c, b in table.groupby("commit")["benchmark"]}
    pairs = []
    for base, head in itertools.pairwise(shas):
        if trees[base] is None or trees[base] != trees[head]:
            continue
        only_base, only_head = _suites(measured, base, head), _suites(measured, head, base)
        if only_base or only_head:
            notes.append(
                f"{base[:8]} -> {head[:8]}: identical trees, but not the same benchmarks "
                f"measured (only {base[:8]}: {', '.join(only_base) or 'none'}; only "
                f"{head[:8]}: {', '.join(only_head) or 'none'}): not paired"
            )
            continue
        pairs.append((base, head))
    return AAPairs(machine=machine, pairs=pairs, commits=shas, dates=dates, notes=notes)


def _suites(measured: dict[str, frozenset], commit: str, other: str) -> list[str]:
    """The suites (``module.Class``) of the benchmarks ``commit`` measured and ``other`` did
    not, sorted."""
    missing = measured.get(commit, frozenset()) - measured.get(other, frozenset())
    return sorted({".".join(str(b).split(".")[:2]) for b in missing})
