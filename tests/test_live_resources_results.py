"""The service around ``resources.LiveBuildResourcesSuite`` (issue 13's "no spills in any
live kernel"): the README's live-resources table and the gate on the builds that
LiveResourcesSuite never covered.

The suites need a GPU, so their results here are synthetic but asv-shaped
(``asv_helpers.write_asv_results``) for two commits: on head, the causal GQA dK/dV at D=128
spills 8 bytes where base spilled none (what 1b09797 did under one assembler, unseen by the
gate then), and the bool_mask one spills 32 bytes on both.
"""

from __future__ import annotations

import itertools

import pytest
from asv_helpers import write_asv_results

from regress import report, workloads
from regress.gate import main as gate_main
from regress.results import load_results

MACHINE = "nvidia-h200"
BASE, HEAD = "e5" * 20, "f6" * 20
KERNELS = ["forward", "bwd_preprocess", "bwd_dkdv", "bwd_dq"]
DTYPES, HEAD_DIMS = ["float16", "bfloat16"], [64, 128]
BUILDS = ["gqa4", "causal", "causal_gqa4", *workloads.MASK_KINDS]
FIELDS = {"shared_bytes": 65536, "registers": 200}


def _spills(kernel: str, head_dim: int, build: str, head: bool) -> int:
    if (kernel, head_dim) != ("bwd_dkdv", 128):
        return 0
    return {"bool_mask": 32, "causal_gqa4": 8 if head else 0}.get(build, 0)


def _commit(results, sha: str, date_ms: int, head: bool) -> None:
    benchmarks = {}
    for field in (*FIELDS, "spills"):
        dense = {
            combo: FIELDS.get(field, 0) for combo in itertools.product(KERNELS, DTYPES, HEAD_DIMS)
        }
        builds = {
            (k, dt, d, b): FIELDS[field] if field in FIELDS else _spills(k, d, b, head)
            for k, dt, d, b in itertools.product(KERNELS, DTYPES, HEAD_DIMS, BUILDS)
        }
        benchmarks[f"resources.LiveResourcesSuite.track_{field}"] = (
            ["kernel", "dtype", "head_dim"], [KERNELS, DTYPES, HEAD_DIMS], dense,
            "live-resources-1",
        )  # fmt: skip
        benchmarks[f"resources.LiveBuildResourcesSuite.track_{field}"] = (
            ["kernel", "dtype", "head_dim", "build"], [KERNELS, DTYPES, HEAD_DIMS, BUILDS],
            builds, "live-build-resources-1",
        )  # fmt: skip
    write_asv_results(results, MACHINE, sha, date_ms, benchmarks)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("live-results")
    _commit(root, BASE, 1_700_000_000_000, head=False)
    _commit(root, HEAD, 1_700_000_100_000, head=True)
    return root


def test_report_names_every_build_and_every_spilling_kernel(results):
    loaded = load_results(results)
    assert not loaded.problems, loaded.problems
    table = report.live_resources_table(loaded, MACHINE)
    assert f"`{HEAD[:8]}`" in table
    body = [ln for ln in table.splitlines() if ln.startswith("| 64 |") or ln.startswith("| 128 |")]
    builds = ["dense", "causal", "causal_gqa4", "gqa4", *workloads.MASK_KINDS]
    assert [ln.split("|")[2].strip() for ln in body] == builds * 2
    row = next(ln for ln in body if ln.startswith("| 128 | bool_mask |"))
    assert row.split("|")[4].strip() == "200 / 32 **spills**", row
    assert next(ln for ln in body if ln.startswith("| 128 | dense |")).count("**spills**") == 0
    assert "Spilling: 4 of 128 live kernels (fp16 and bf16)" in table
    assert "bwd_dkdv float16 D=128 causal_gqa4 (8 B)" in table
    assert "Live kernel resources on" in report.readme_block(results)


def test_gate_blocks_a_new_spill_in_a_build_that_only_the_new_suite_measures(results, capsys):
    code = gate_main(["--results", str(results), "--base", BASE[:8], "--head", HEAD[:8],
                      "--machine", MACHINE, "--format", "json"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1, out
    assert "LiveBuildResourcesSuite.track_spills" in out and "causal_gqa4" in out
