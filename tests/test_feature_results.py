"""The service around ``features.FeatureSpeedSuite`` (issue 16's feature costs): the README
table, the dashboard's peers page and the gate on its rows, and the peers' refusals.

The suite needs a GPU, so its results here are synthetic but asv-shaped
(``asv_helpers.write_asv_results``) for two commits: on head, safeattn's soft-capping is
30 % slower (a feature regression the gate must catch); the peers do not move; FlexAttention
has no dropout and SDPA no soft-capping (NaN, as the suite stores them).
"""

from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import pytest
from asv_helpers import REPO, write_asv_results

from regress import report, workloads
from regress.gate import main as gate_main
from regress.results import load_results

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

MACHINE = "nvidia-h200"
BASE, HEAD = "c3" * 20, "d4" * 20
SUITE = "features.FeatureSpeedSuite"
IMPLS = ["safeattn", "flex", "sdpa_flash", "sdpa_cudnn", "sdpa_efficient"]
PARAMS = (IMPLS, ["bfloat16"], list(workloads.FEATURES))
PLAIN_MS = {"safeattn": 1.0, "flex": 1.2, "sdpa_flash": 1.5, "sdpa_cudnn": 0.8,
            "sdpa_efficient": 2.5}  # fmt: skip
COST = {"none": 1.0, "softcap": 1.1, "dropout": 1.25, "bias_grad": 1.6}
LACKS = {("flex", "dropout"), ("sdpa_flash", "softcap"), ("sdpa_cudnn", "softcap"),
         ("sdpa_efficient", "softcap"), ("sdpa_flash", "bias_grad")}  # fmt: skip
SOFTCAP_SLOWDOWN = 1.3
JITTER = (0.99, 1.0, 1.01, 0.995, 1.005, 1.0, 0.998)


def _ms(impl: str, feature: str, pass_: str) -> float:
    return PLAIN_MS[impl] * COST[feature] * {"forward": 1.0, "backward": 2.5, "fwd_bwd": 3.5}[pass_]


def _commit(results: Path, sha: str, date_ms: int, softcap_slower: float) -> None:
    benchmarks = {}
    for pass_ in ("forward", "backward", "fwd_bwd"):
        measured = {}
        for impl, dtype, feature in itertools.product(*PARAMS):
            if (impl, feature) in LACKS:
                measured[(impl, dtype, feature)] = math.nan
                continue
            ms = _ms(impl, feature, pass_)
            if impl == "safeattn" and feature == "softcap":
                ms *= softcap_slower
            measured[(impl, dtype, feature)] = [ms * j for j in JITTER]
        benchmarks[f"{SUITE}.track_{pass_}_ms"] = (
            ["impl", "dtype", "feature"], list(PARAMS), measured, "feature-speed-1"
        )
    write_asv_results(results, MACHINE, sha, date_ms, benchmarks)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("feature-results")
    _commit(root, BASE, 1_700_000_000_000, softcap_slower=1.0)
    _commit(root, HEAD, 1_700_000_100_000, softcap_slower=SOFTCAP_SLOWDOWN)
    return root


def test_report_feature_table_gives_each_cost_over_the_same_impls_plain_time(results):
    loaded = load_results(results)
    assert not loaded.problems, loaded.problems
    table = report.feature_table(loaded, MACHINE)
    assert f"`{HEAD[:8]}`" in table
    header = next(line for line in table.splitlines() if line.startswith("| feature"))
    impls = [c.strip() for c in header.split("|")[3:-1]]
    assert impls[0] == "safeattn" and set(impls) == set(IMPLS)
    for feature, pass_ in itertools.product(workloads.FEATURES, ("forward", "backward")):
        line = next(ln for ln in table.splitlines() if ln.startswith(f"| {feature} | {pass_} |"))
        cells = dict(zip(impls, (c.strip() for c in line.split("|")[3:-1]), strict=True))
        for impl, cell in cells.items():
            if (impl, feature) in LACKS:
                assert cell == "–", line
                continue
            slower = SOFTCAP_SLOWDOWN if (impl, feature) == ("safeattn", "softcap") else 1.0
            expected = f"{_ms(impl, feature, pass_) * slower:.3f}"
            if feature != "none":
                expected += f" ({COST[feature] * slower:.2f})"
            assert cell == expected, (impl, line)
    for label in workloads.FEATURES.values():
        assert label in table
    assert "Feature cost on" in report.readme_block(results)


def test_gate_blocks_the_slower_feature(results, capsys):
    assert gate_main(["--results", str(results), "--base", BASE, "--head", HEAD]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and "feature=softcap" in out, out
    assert gate_main(["--results", str(results), "--base", BASE, "--head", BASE]) == 0


def test_peers_page_shows_the_feature_suite(results):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=120)
    at.session_state["results_dir"] = str(results)
    at.run()
    at.switch_page("app_pages/peers.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    titles = " ".join(str(m.value) for m in [*at.subheader, *at.markdown])
    assert "Features (soft-capping, dropout, bias gradient)" in titles, titles


@pytest.mark.parametrize(("impl", "feature", "lacks"), [
    ("flex", "dropout", "FlexAttention has no dropout"),
    ("sdpa_cudnn", "softcap", "SDPA has no logit soft-capping"),
])  # fmt: skip
def test_a_peer_without_the_feature_says_what_it_lacks(impl, feature, lacks):
    from benchmarks import features as _features

    with pytest.raises(NotImplementedError, match=lacks):
        _features.feature_case(feature, impl, "bfloat16")
    with pytest.raises(ValueError, match="unknown feature"):
        _features.feature_case("alibi", "safeattn", "bfloat16")
