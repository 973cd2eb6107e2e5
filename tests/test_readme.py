"""The README's results block is what ``results/`` says (generated, never typed in)."""

from __future__ import annotations

from pathlib import Path

from safeattn.regress import report

REPO = Path(__file__).resolve().parent.parent


def test_readme_results_block_matches_results_dir():
    readme = (REPO / "README.md").read_text()
    fix = "python -m safeattn.regress.report --update README.md"
    assert report.readme_section(readme) == report.readme_block(REPO / "results"), (
        f"README's results block is stale: run `{fix}`"
    )


def test_numerics_table_lists_safeattn_first():
    loaded = report.load_results(REPO / "results")
    for machine in loaded.machines:
        table = report.numerics_table(loaded, machine)
        if table:
            header = next(line for line in table.splitlines() if line.startswith("| family"))
            assert header.split("|")[2].strip() == "safeattn"
