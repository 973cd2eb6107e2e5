"""The README's results block is what ``results/`` says (generated, never typed in)."""

from __future__ import annotations

from pathlib import Path

import pytest

from regress import report

REPO = Path(__file__).resolve().parent.parent


def test_readme_results_block_matches_results_dir():
    readme = (REPO / "README.md").read_text()
    fix = "python -m regress.report --update README.md"
    assert report.readme_section(readme) == report.readme_block(REPO / "results"), (
        f"README's results block is stale: run `{fix}`"
    )


@pytest.fixture(scope="module")
def loaded():
    """results/ loaded once for the tests that only read it (~2-4 s a load on CI)."""
    return report.load_results(REPO / "results")


def test_numerics_table_lists_safeattn_first(loaded):
    for machine in loaded.machines:
        table = report.numerics_table(loaded, machine)
        if table:
            header = next(line for line in table.splitlines() if line.startswith("| family"))
            assert header.split("|")[2].strip() == "safeattn"


def test_speed_table_lists_the_peers_measured_beside_safeattn(loaded):
    """The speed table's ratios come from the same commit's safeattn and peer rows."""
    for machine in loaded.machines:
        table = report.speed_table(loaded, machine)
        if not table:
            continue
        commit, rows = report._speed_rows(loaded, machine)
        assert f"`{commit[:8]}`" in table
        peers = sorted(set(rows["impl"]) - {"safeattn"})
        header = next(line for line in table.splitlines() if line.startswith("| pass"))
        assert sorted(c.strip() for c in header.split("|")[2:-1]) == peers
