"""A/A report: how often the gate cries wolf, and how large a slowdown it catches.

    python -m safeattn.regress.aa --results results --machine nvidia-h200 A B [C ...]

Give commits that measure the same code (e.g. consecutive commits that changed neither the
kernels nor the suite, or one commit run twice into two commits' results), oldest first.
For each consecutive pair it prints the gate's blocking verdicts (the false alarms: the
target is none) and, from :func:`safeattn.regress.compare.slowdown_sensitivity`, what
share of the safeattn speed rows the gate flags, and whether it blocks, when every row of
the head is made 2%, 5%, ... slower. Exit status 0 when no pair had a false alarm, 1
otherwise, 2 for bad input.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Sequence

from safeattn.regress.compare import (
    BLOCKING_VERDICTS,
    SENSITIVITY_FACTORS,
    compare,
    load_policy,
    resolve_commit,
    slowdown_sensitivity,
)
from safeattn.regress.results import load_results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", required=True, help="asv results directory")
    parser.add_argument("--machine", required=True, help="asv machine name")
    parser.add_argument("--policy", help="policy TOML (default: packaged)")
    parser.add_argument("commits", nargs="+", help="two or more commits, oldest first")
    args = parser.parse_args(argv)
    if len(args.commits) < 2:
        parser.error("give at least two commits")
    try:
        policy = load_policy(args.policy)
        loaded = load_results(args.results)
        shas = [resolve_commit(loaded, c, args.machine) for c in args.commits]
    except (ValueError, FileNotFoundError) as exc:
        print(f"safeattn.regress.aa: {exc}", file=sys.stderr)
        return 2

    alarms_total = 0
    for base, head in itertools.pairwise(shas):
        rows = compare(loaded, base, head, args.machine, policy)
        blocking = rows[rows["verdict"].isin(BLOCKING_VERDICTS)]
        alarms = blocking[blocking["verdict"] != "missing"]
        missing = len(blocking) - len(alarms)
        alarms_total += len(alarms)
        note = f", {missing} missing on head (not measured: not counted)" if missing else ""
        print(f"\n{base[:8]} -> {head[:8]}: {len(alarms)} false alarm(s){note}")
        for row in alarms.itertuples():
            print(f"  [{row.verdict}] {row.benchmark} | {row.param_key} | {row.reason}")
        table = slowdown_sensitivity(loaded, base, head, args.machine, policy)
        print("  slowdown  rows flagged  fraction  groups flagged  gate blocks")
        for r in table.itertuples():
            print(
                f"  {r.factor:8.2f}  {r.rows:4d} {r.flagged:7d}  {r.fraction:8.3f}  "
                f"{r.groups:6d} {r.groups_flagged:7d}  {'yes' if r.blocks else 'no'}"
            )
    pairs = len(shas) - 1
    print(f"\n{pairs} pair(s), {alarms_total} false alarm(s); slowdowns tried: "
          f"{', '.join(f'{f:g}' for f in SENSITIVITY_FACTORS)}")
    return 1 if alarms_total else 0


if __name__ == "__main__":
    sys.exit(main())
