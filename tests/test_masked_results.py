"""The service around ``speed.MaskedSpeedSuite`` and ``speed.ModelStepSuite``: the results
loader, the gate, the README report and the dashboard on their rows.

These suites need a GPU, so their results here are synthetic but asv-shaped
(``asv_helpers.write_asv_results``: the files asv 0.6 writes) for two commits: on head,
every safeattn masked-speed time is 5 % slower (below the single-row limit, above the
group limit: only the gate's group verdict catches it) and safeattn's model-step peak
memory 5 % higher; the peers' times do not move; cuDNN refuses the packed documents.
"""

from __future__ import annotations

import importlib
import itertools
import json
import math
import sys
from pathlib import Path

import pytest
from asv_helpers import REPO, write_asv_results

from regress import report, workloads
from regress.compare import GROUP_PARAM_KEY, compare
from regress.gate import main as gate_main
from regress.metrics import METRICS, attended_flops, tflops
from regress.policy import load_policy
from regress.results import load_results

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

MACHINE = "nvidia-h200"
BASE, HEAD = "a1" * 20, "b2" * 20
MASKED = "speed.MaskedSpeedSuite"
MODEL = "speed.ModelStepSuite"
MASKED_PARAMS = (
    ["safeattn", "flex", "sdpa_cudnn", "sdpa_efficient"],
    ["float16", "bfloat16"],
    [64, 128],
    list(workloads.MASK_KINDS),
)
MODEL_PARAMS = (["safeattn", "sdpa", "flex"], [2048, 4096], ["none", "left"])
# peer time / safeattn time on the base commit, per peer and mask kind
PEER_RATIO = {"flex": 2.0, "sdpa_cudnn": 3.0, "sdpa_efficient": 4.0}
SLOWDOWN = 1.05
JITTER = (0.99, 1.0, 1.01, 0.995, 1.005, 1.0, 0.998)  # 7 samples: Mann–Whitney applies


def _safeattn_ms(dtype: str, head_dim: int, mask: str, pass_: str) -> float:
    base = {"forward": 1.0, "backward": 2.5, "fwd_bwd": 3.5}[pass_]
    return base * (1 + workloads.MASK_KINDS.index(mask)) * (head_dim / 64) * (
        1.1 if dtype == "float16" else 1.0)


def _commit(results: Path, sha: str, date_ms: int, slower: float, more_memory: float) -> None:
    benchmarks = {}
    for pass_ in ("forward", "backward", "fwd_bwd"):
        measured = {}
        for impl, dtype, head_dim, mask in itertools.product(*MASKED_PARAMS):
            if impl == "sdpa_cudnn" and mask == "varlen_docs":
                measured[(impl, dtype, head_dim, mask)] = math.nan  # refused: skipped
                continue
            ms = _safeattn_ms(dtype, head_dim, mask, pass_)
            ms *= slower if impl == "safeattn" else PEER_RATIO[impl]
            measured[(impl, dtype, head_dim, mask)] = [ms * j for j in JITTER]
        benchmarks[f"{MASKED}.track_{pass_}_ms"] = (
            ["impl", "dtype", "head_dim", "mask"], list(MASKED_PARAMS), measured,
            "masked-speed-1",
        )
    steps, peaks = {}, {}
    for impl, seq_len, padding in itertools.product(*MODEL_PARAMS):
        ms = {"safeattn": 100.0, "sdpa": 90.0, "flex": 80.0}[impl] * seq_len / 2048
        steps[(impl, seq_len, padding)] = [ms * j for j in JITTER]
        peak = 4 * 2**30 * seq_len / 2048
        peaks[(impl, seq_len, padding)] = peak * (more_memory if impl == "safeattn" else 1.0)
    for metric, measured in (("step_ms", steps), ("peak_bytes", peaks)):
        benchmarks[f"{MODEL}.track_{metric}"] = (
            ["impl", "seq_len", "padding"], list(MODEL_PARAMS), measured, "model-step-1"
        )
    write_asv_results(results, MACHINE, sha, date_ms, benchmarks)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("masked-results")
    _commit(root, BASE, 1_700_000_000_000, slower=1.0, more_memory=1.0)
    _commit(root, HEAD, 1_700_000_100_000, slower=SLOWDOWN, more_memory=1.05)
    return root


@pytest.fixture(scope="module")
def loaded(results):
    return load_results(results)


def test_loader_reads_the_new_suites(loaded):
    assert not loaded.problems, loaded.problems
    t = loaded.table
    masked = t[t["suite"] == MASKED]
    assert len(masked) == 2 * 3 * 64
    assert set(masked["mask"]) == set(workloads.MASK_KINDS)
    assert set(masked["head_dim"]) == {64, 128}  # parsed from asv's reprs
    assert (masked["status"] == "skipped").sum() == 2 * 3 * 4  # cuDNN x varlen_docs
    model = t[t["suite"] == MODEL]
    assert set(model["padding"]) == {"none", "left"} and set(model["seq_len"]) == {2048, 4096}
    for metric in ("step_ms", "peak_bytes"):
        rows = model[model["metric"] == metric]
        assert set(rows["unit"]) == {METRICS[metric].unit} and set(rows["better"]) == {"lower"}
    steps = model[model["metric"] == "step_ms"]
    assert steps["samples"].map(len).eq(len(JITTER)).all()


def test_gate_catches_the_broad_masked_slowdown_and_the_memory_growth(loaded):
    rows = compare(loaded, BASE, HEAD, MACHINE, load_policy())
    masked = rows[rows["suite"] == MASKED]
    groups = masked[masked["param_key"] == GROUP_PARAM_KEY]
    assert sorted(groups["metric"]) == ["backward_ms", "forward_ms", "fwd_bwd_ms"]
    assert set(groups["verdict"]) == {"regression"}, groups["reason"].tolist()
    assert all("16 rows" in r for r in groups["reason"])
    own = masked[(masked["impl"] == "safeattn") & (masked["param_key"] != GROUP_PARAM_KEY)]
    assert set(own["verdict"]) == {"unchanged"}  # 5 % < the single-row limit
    assert set(masked[masked["peer"].astype(bool)]["verdict"]) == {"context"}
    model = rows[rows["suite"] == MODEL]
    assert GROUP_PARAM_KEY not in set(model["param_key"])  # 4 safeattn rows: row by row
    peaks = model[(model["metric"] == "peak_bytes") & (model["impl"] == "safeattn")]
    assert set(peaks["verdict"]) == {"regression"} and len(peaks) == 4
    steps = model[(model["metric"] == "step_ms") & (model["impl"] == "safeattn")]
    assert set(steps["verdict"]) == {"unchanged"} and set(steps["test"]) == {"mann-whitney"}


def test_gate_cli_fails_naming_the_new_suites(results, capsys):
    code = gate_main(["--results", str(results), "--base", BASE, "--head", HEAD,
                      "--format", "json"])
    assert code == 1
    payload = json.loads(capsys.readouterr().out)
    blocking = {(r["benchmark"], r["param_key"]) for r in payload["rows"]
                if r["verdict"] in ("regression", "failure", "missing")}
    assert (f"{MASKED}.track_forward_ms", GROUP_PARAM_KEY) in blocking
    assert any(b == f"{MODEL}.track_peak_bytes" for b, _ in blocking)
    assert gate_main(["--results", str(results), "--base", BASE, "--head", BASE]) == 0
    assert "PASS" in capsys.readouterr().out


def test_report_masked_table_has_the_geometric_means_per_mask_and_pass(loaded):
    table = report.masked_table(loaded, MACHINE)
    assert f"`{HEAD[:8]}`" in table
    header = next(line for line in table.splitlines() if line.startswith("| mask"))
    assert header.split("|")[4:-1] == [" sdpa_cudnn ", " sdpa_efficient ", " flex "]
    for mask in workloads.MASK_KINDS:
        for pass_ in ("forward", "backward", "fwd_bwd"):
            line = next(ln for ln in table.splitlines() if ln.startswith(f"| {mask} | {pass_} |"))
            cells = [c.strip() for c in line.split("|")[3:-1]]
            assert cells[0] == f"{_safeattn_ms('bfloat16', 128, mask, pass_) * SLOWDOWN:.3f}"
            expected = {p: f"{r / SLOWDOWN:.2f} (n=4)" for p, r in PEER_RATIO.items()}
            if mask == "varlen_docs":
                expected["sdpa_cudnn"] = "–"
            assert cells[1:] == [expected["sdpa_cudnn"], expected["sdpa_efficient"],
                                 expected["flex"]], line
    for w in workloads.MASK_WORKLOADS.values():
        assert w.label in table


def test_report_model_step_table(loaded):
    table = report.model_step_table(loaded, MACHINE)
    assert workloads.MODEL.summary() in table and f"`{HEAD[:8]}`" in table
    line = next(ln for ln in table.splitlines()
                if ln.startswith(f"| 4096 | {workloads.PADDING_LABELS['left']} |"))
    cells = [c.strip() for c in line.split("|")[3:-1]]
    assert cells[:3] == ["200.0", "180.0 (0.90)", "160.0 (0.80)"]
    assert cells[3] == f"{8 * 1.05:.2f} / 8.00 / 8.00"
    assert len([ln for ln in table.splitlines() if ln.startswith("| 2048 |")]) == 2


def test_readme_block_adds_the_tables_only_where_results_exist(results, tmp_path):
    block = report.readme_block(results)
    assert "safeattn vs peers per mask kind" in block and "Training step" in block
    assert "Speed on" not in block  # no SpeedSuite results here: no dense table
    empty = tmp_path / "empty"
    empty.mkdir()
    assert report.readme_block(empty).startswith("No GPU results yet")


def test_peer_ratios_script_keeps_mask_kinds_apart(results):
    peer_ratios = importlib.import_module("tools.peer_ratios")
    table = peer_ratios.ratio_table(results, MACHINE, HEAD[:8], MASKED)
    assert len(table) == 3 * 16  # per pass: 2 dtypes x 2 head dims x 4 masks
    flex = table.set_index(["metric", "dtype", "head_dim", "mask"])["flex"]
    assert flex.to_numpy() == pytest.approx(PEER_RATIO["flex"] / SLOWDOWN)


def test_dashboard_labels_masks_and_derives_tflops_on_attended_pairs(loaded):
    from dashboard.views.history import filter_options, history
    from dashboard.views.peers import peer_ratios
    from dashboard.views.tflops import add_tflops

    ratios = peer_ratios(loaded, MACHINE, HEAD)
    masked = ratios[ratios["benchmark"] == f"{MASKED}.track_forward_ms"]
    assert set(masked["peer"]) == set(PEER_RATIO)
    label = workloads.MASK_WORKLOADS["bool_mask"].label
    one = masked[masked["shape"] == "dtype=bfloat16 head_dim=128 mask=bool_mask"].iloc[0]
    assert one["label"] == f"dtype=bfloat16 head_dim=128 mask={label}"
    steps = ratios[ratios["benchmark"] == f"{MODEL}.track_step_ms"]
    assert workloads.PADDING_LABELS["left"] in " ".join(steps["label"])

    rows = history(loaded, f"{MASKED}.track_backward_ms", [MACHINE], {})
    assert {"mask", "head_dim", "dtype"} <= set(filter_options(rows))
    out, why_not = add_tflops(rows)
    assert why_not is None
    r = out[(out["commit"] == BASE) & (out["param_key"] ==
            "impl=safeattn dtype=float16 head_dim=64 mask=sliding_window")].iloc[0]
    pairs = workloads.MASK_WORKLOADS["sliding_window"].attended_pairs()
    expected = tflops(r["value"], attended_flops(pairs, 32, 64, "backward"))
    assert r["tflops"] == pytest.approx(expected)
    model_rows = history(loaded, f"{MODEL}.track_step_ms", [MACHINE], {})
    assert "padding" in filter_options(model_rows)
    assert add_tflops(model_rows)[1] is not None  # a step is no attention call


def test_peers_page_shows_the_masked_suite(results):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=120)
    at.session_state["results_dir"] = str(results)
    at.run()
    at.switch_page("app_pages/peers.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    # The masked suite gets its own per-shape table: the workload's description beside the
    # forward and backward ratios of each peer.
    label = workloads.MASK_WORKLOADS["varlen_docs"].label
    tables = [d.value for d in at.dataframe]
    masked = [t for t in tables if t.astype(str).apply(
        lambda col: col.str.contains(label, regex=False)).to_numpy().any()]  # fmt: skip
    assert masked, [list(t.columns) for t in tables]
    columns = " ".join(map(str, masked[0].columns))
    assert "flex fwd" in columns and "flex bwd" in columns, columns
