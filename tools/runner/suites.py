"""Which suites a run measures: every suite with the name prefix its benchmarks share,
the groups (gpu, cpu), anchored asv ``-b`` regexes, and the suites a commit already has
results for on a machine (``--skip-existing``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

# Every suite with the name prefix its benchmarks share. Selections are anchored (asv -b is
# re.search: a bare "NumericsSuite" also matches InterpreterNumericsSuite, and a bare
# "SpeedSuite" MaskedSpeedSuite; the trailing dot keeps "speed.SpeedSuite." from matching
# anything longer). The order is the order a run measures them in: GPU suites first,
# cheapest first, so that a time budget (--budget-s) cuts the most expensive one, the
# masked-attention suites (issue 11) after the established four, so that a budgeted history
# run still measures those first, the features' suite (issue 16) last; CPU-capable suites
# after them.
SUITES: dict[str, str] = {
    "LiveResourcesSuite": "resources.LiveResourcesSuite.",
    "LiveBuildResourcesSuite": "resources.LiveBuildResourcesSuite.",
    "SpeedSuite": "speed.SpeedSuite.",
    "MemorySuite": "memory.MemorySuite.",
    "NumericsSuite": "numerics.NumericsSuite.",
    "ModelStepSuite": "speed.ModelStepSuite.",
    "MaskedSpeedSuite": "speed.MaskedSpeedSuite.",
    "FeatureSpeedSuite": "features.FeatureSpeedSuite.",
    "StaticAuditSuite": "resources.StaticAuditSuite.",
    "InterpreterSpeedSuite": "speed.InterpreterSpeedSuite.",
    "InterpreterNumericsSuite": "numerics.InterpreterNumericsSuite.",
}
GROUPS: dict[str, tuple[str, ...]] = {
    # Need a CUDA GPU (pruned from the grid without one: benchmarks/_env.cuda_usable).
    "gpu": (
        "LiveResourcesSuite",
        "LiveBuildResourcesSuite",
        "SpeedSuite",
        "MemorySuite",
        "NumericsSuite",
        "ModelStepSuite",
        "MaskedSpeedSuite",
        "FeatureSpeedSuite",
    ),
    # Run anywhere; their figures do not depend on the GPU (the static audit cross-compiles
    # for every architecture), so a CPU machine can record them for every commit.
    "cpu": ("StaticAuditSuite", "InterpreterSpeedSuite", "InterpreterNumericsSuite"),
}


def suite_regex(suite: str) -> str:
    """The anchored asv ``-b`` regex of exactly one suite: ``^speed\\.SpeedSuite\\.``."""
    return "^" + re.escape(SUITES[suite])


def expand_suites(names: list[str], gpu: bool) -> list[str]:
    """Suite and group names -> suites in :data:`SUITES` order; default: all this machine has."""
    if not names:
        names = ["gpu", "cpu"] if gpu else ["cpu"]
    chosen = set()
    for name in names:
        chosen.update(GROUPS.get(name, (name,)))
    if not gpu and chosen & set(GROUPS["gpu"]):
        raise SystemExit(
            f"[run] {', '.join(sorted(chosen & set(GROUPS['gpu'])))} need a usable CUDA GPU, "
            "and this machine has none.\nHINT: --suite cpu, or run on a GPU machine."
        )
    return [s for s in SUITES if s in chosen]


def measured_suites(results: Path, machine: str, commit: str) -> set[str]:
    """Suites with at least one result for ``commit`` on ``machine`` (asv writes a suite's
    results together, at the end of its ``asv run``, so one means the suite ran)."""
    done: set[str] = set()
    for path in (results / machine).glob(f"{commit[:8]}-*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if data.get("commit_hash") != commit:
            continue
        names = data.get("results", {})
        done.update(s for s, prefix in SUITES.items() if any(n.startswith(prefix) for n in names))
    return done
