"""Peer / safeattn ratios from asv results: ``python tools/peer_ratios.py``.

    python tools/peer_ratios.py [--results results] [--machine M] [--commit SHA]

For one machine and commit (default: the newest measured commit of each machine), prints
per speed metric and shape ``peer time / safeattn time`` (above 1: safeattn is faster) and
the geometric mean per peer; ``--suite speed.MaskedSpeedSuite`` or ``speed.ModelStepSuite``
for the masked-attention suites. Reads results through ``regress.results`` (the
loader the gate and dashboard use) and takes the ratios from ``regress.ratios`` (as the
README and the dashboard do); not an asv suite.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def ratio_table(
    results_dir: Path, machine: str | None, commit: str | None, suite: str = "speed.SpeedSuite"
):
    """DataFrame: one row per (machine, commit, metric, shape), a column per peer."""
    import pandas as pd

    from regress.metrics import OWN_IMPL
    from regress.ratios import SHAPE_PARAMS, peer_over_own
    from regress.results import load_results

    table = load_results(results_dir).table
    speed = table[(table["suite"] == suite) & table["value"].notna()]
    if machine:
        speed = speed[speed["machine"] == machine]
    if speed.empty:
        return pd.DataFrame()
    if commit:
        speed = speed[speed["commit"].str.startswith(commit)]
    else:  # newest commit per machine
        newest = speed.sort_values("date").groupby("machine")["commit"].last()
        speed = speed[speed["commit"] == speed["machine"].map(newest)]
    # The suite's own shape parameters (the table has every suite's parameter columns).
    shape = [c for c in SHAPE_PARAMS if c in speed]
    shape = [c for c in shape if speed[c].notna().all()]
    ratios = peer_over_own(speed, ["machine", "commit", "metric", *shape])
    return ratios.drop(columns=OWN_IMPL).reset_index()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=REPO / "results")
    parser.add_argument("--machine")
    parser.add_argument("--commit")
    parser.add_argument("--suite", default="speed.SpeedSuite")
    args = parser.parse_args(argv)
    from regress.ratios import SHAPE_PARAMS, geomean

    ratios = ratio_table(args.results, args.machine, args.commit, args.suite)
    if ratios.empty:
        print(f"no {args.suite} results with safeattn and peers found", file=sys.stderr)
        return 1
    keys = {"machine", "commit", "metric", *SHAPE_PARAMS}
    peers = [c for c in ratios.columns if c not in keys]
    print(ratios.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    print("\ngeometric mean of peer time / safeattn time (>1: safeattn faster):")
    for (machine, commit, metric), group in ratios.groupby(["machine", "commit", "metric"]):
        means = []
        for peer in peers:
            gmean, n = geomean(group[peer])
            means.append(f"{peer}={gmean:.2f} (n={n})")
        print(f"  {machine} {commit[:8]} {metric}: " + "  ".join(means))
    return 0


if __name__ == "__main__":
    sys.exit(main())
