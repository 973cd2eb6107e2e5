"""safeattn-gate --confirm on the toy project's real asv results, with a fake measurer that
"re-measures" a commit by copying the results of the commit that stands for its truth: a
planted slowdown whose re-runs are slow again is confirmed, a false alarm whose re-runs are
not is cleared, and what cannot be re-measured is never cleared."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_results import TOY_MACHINE, copy_results, toy_results

from regress import gate as gate_mod
from regress.confirm import ConfirmError, confirmable
from regress.gate import EXIT_PASS, EXIT_REGRESSION, confirm_report, run_gate
from regress.gate_render import render_markdown, render_text

SPEED = "suite.SpeedSuite.time_forward"
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return toy_results(tmp_path_factory)


def planted_ratio(text: str, before: str) -> float:
    """The ratio printed right after ``before`` (``2.097×``) in ``text``."""
    found = re.search(re.escape(before) + r"(\d+\.\d+)×", text)
    assert found, f"no ratio after {before!r} in {text!r}"
    return float(found.group(1))


def fake_measurer(results: Path, shas: dict[str, str], truth: dict[str, str], calls: list,
                  damage=None):  # fmt: skip
    """measure(sha, benchmarks, folder): writes the toy results of ``truth[name of sha]``
    into ``folder`` under ``sha``, as a re-run of that commit would; ``damage(data)`` may
    change each result file's JSON first."""
    names = {sha: name for name, sha in shas.items()}

    def measure(sha, selected, folder: Path) -> None:
        calls.append((names[sha], folder.name, selected))
        source = shas[truth.get(names[sha], names[sha])]
        (folder / TOY_MACHINE).mkdir(parents=True, exist_ok=True)
        shutil.copy(results / "benchmarks.json", folder / "benchmarks.json")
        for path in (results / TOY_MACHINE).iterdir():
            if path.name.startswith(source[:8]) and path.suffix == ".json":
                data = json.loads(path.read_text())
                data["commit_hash"] = sha
                if damage is not None:
                    damage(data)
                name = sha[:8] + path.name[8:]
                (folder / TOY_MACHINE / name).write_text(json.dumps(data))
            elif path.name == "machine.json":
                shutil.copy(path, folder / TOY_MACHINE / path.name)

    return measure


def test_a_real_slowdown_is_confirmed_in_interleaved_fresh_pairs(toy):
    results, shas = toy
    report = run_gate(results, shas["base"], shas["slow"])
    assert report.exit_code == EXIT_REGRESSION and len(confirmable(report.rows))
    calls: list = []
    checked = confirm_report(report, fake_measurer(results, shas, {}, calls), rounds=3,
                             log=lambda line: None)  # fmt: skip
    assert checked.exit_code == EXIT_REGRESSION
    assert checked.confirmations and all(c.confirmed for c in checked.confirmations)
    # Interleaved base, head, base, head, ... each pair into a folder of its own.
    assert [(name, folder) for name, folder, _ in calls] == [
        ("base", "pair-1"), ("slow", "pair-1"), ("base", "pair-2"), ("slow", "pair-2"),
        ("base", "pair-3"), ("slow", "pair-3"),
    ]  # fmt: skip
    # Only the flagged parameter combinations run again (asv matches "name(reprs)").
    selected = calls[0][2]
    assert selected.benchmarks and selected.combos
    assert all(re.search(x, f"{SPEED}('safeattn', 64)") for x in selected.benchmarks)
    assert not any(re.search(x, f"{SPEED}('sdpa_flash', 64)") for x in selected.benchmarks)
    assert all(re.search(x, "('safeattn', 64)") for x in selected.combos)
    assert not any(re.search(x, "('sdpa_flash', 64)") for x in selected.combos)
    blocking = checked.rows[checked.rows["verdict"] == "regression"]
    assert blocking["reason"].str.contains("confirmed by re-measurement").all()
    text = render_text(checked)
    n = len(checked.confirmations)
    assert f"0 flagged rows cleared by re-measurement, {n} confirmed" in text
    # The ratio and p of each pair; the ratio is measured (the slow commit repeats its work,
    # ~2x here, more on a loaded machine), so only its size is checked.
    assert planted_ratio(text, "blocked in 3/3 pairs: ") > 1.5 and "p=" in text


def test_a_false_alarm_is_cleared(toy):
    """The results say head is slow, but head re-measured is as fast as base (its truth is
    the 'same' commit): the row is cleared and the gate passes."""
    results, shas = toy
    report = run_gate(results, shas["base"], shas["slow"])
    calls: list = []
    measure = fake_measurer(results, shas, {"slow": "same"}, calls)
    checked = confirm_report(report, measure, rounds=3, log=lambda line: None)
    assert checked.exit_code == EXIT_PASS
    assert checked.confirmations and not any(c.confirmed for c in checked.confirmations)
    cleared = checked.rows[checked.rows["reason"].str.startswith("cleared by re-measurement")]
    assert len(cleared) == len(checked.confirmations) and (cleared["verdict"] == "unchanged").all()
    markdown = render_markdown(checked)
    assert markdown.startswith("## safeattn-gate: ✅ PASS — no regressions (1 flagged row "
                               "cleared by re-measurement)")  # fmt: skip
    assert "1 flagged row cleared by re-measurement, 0 confirmed" in markdown
    details = markdown.split("<details><summary>1 cleared row</summary>", 1)[1]
    first = f"cleared: {TOY_MACHINE} `{SPEED}` impl=safeattn head_dim=64 — first run "
    assert planted_ratio(details, first) > 1.5
    assert "re-run blocked in 0/3 pairs: " in details


def test_one_slow_pair_of_three_does_not_confirm(toy):
    """Majority: a row that blocks in only one re-run pair is cleared."""
    results, shas = toy
    report = run_gate(results, shas["base"], shas["slow"])
    calls: list = []
    real = fake_measurer(results, shas, {}, calls)
    fast = fake_measurer(results, shas, {"slow": "same"}, calls)

    def measure(sha, selected, folder):
        (real if folder.name == "pair-2" else fast)(sha, selected, folder)

    checked = confirm_report(report, measure, rounds=3, log=lambda line: None)
    assert checked.exit_code == EXIT_PASS
    assert all(c.blocked == [False, True, False] for c in checked.confirmations)


def test_non_finite_failures_are_never_re_measured(toy):
    results, shas = toy
    report = run_gate(results, shas["base"], shas["nan"])
    calls: list = []
    checked = confirm_report(report, fake_measurer(results, shas, {"nan": "base"}, calls),
                             log=lambda line: None)  # fmt: skip
    assert calls == [] and checked.confirmations == []
    assert checked.exit_code == EXIT_REGRESSION


def test_a_failed_or_empty_re_measurement_exits_2(toy, monkeypatch, capsys):
    results, shas = toy

    def broken(repo, log):
        def measure(sha, selected, folder):
            raise ConfirmError("re-measuring failed (run.py exit 1)")

        return measure

    monkeypatch.setattr(gate_mod, "run_py_measurer", broken)
    args = ["--results", str(results), "--base", shas["base"], "--head", shas["slow"]]
    assert gate_mod.main([*args, "--confirm"]) == 2
    assert "re-measuring failed" in capsys.readouterr().err
    monkeypatch.setattr(gate_mod, "run_py_measurer", lambda repo, log: lambda s, sel, f: None)
    assert gate_mod.main([*args, "--confirm"]) == 2  # nothing written: cannot clear
    assert "wrote no results" in capsys.readouterr().err
    assert gate_mod.main(args) == EXIT_REGRESSION  # without --confirm, nothing re-measured


def test_the_real_measurer_runs_only_the_selection(monkeypatch, tmp_path):
    """run.py gets the asv regexes, and the grids get the combinations through
    $SAFEATTN_BENCH_ONLY, in a fresh process per call; a failing run.py is a ConfirmError."""
    from regress import confirm as confirm_mod

    seen = []

    def fake_run(cmd, cwd, env, capture_output, text, check):
        seen.append((cmd, cwd, env))
        return subprocess.CompletedProcess(cmd, len(seen) - 1, "out", "err: broken")

    monkeypatch.setattr(confirm_mod.subprocess, "run", fake_run)
    selected = confirm_mod.Selection(("^a\\.b\\('safeattn', 64\\)$",), ("^\\('safeattn', 64\\)$",))
    measure = confirm_mod.run_py_measurer(tmp_path, lambda line: None)
    measure("f" * 40, selected, tmp_path / "pair-1")
    cmd, cwd, env = seen[0]
    assert cmd[1:] == [
        "tools/run.py",
        "--same",
        "--no-prewarm",
        "--range",
        "f" * 40,
        "--results",
        str(tmp_path / "pair-1"),
        "--bench",
        selected.benchmarks[0],
    ]
    assert cwd == tmp_path and json.loads(env["SAFEATTN_BENCH_ONLY"]) == list(selected.combos)
    with pytest.raises(ConfirmError, match="broken"):
        measure("f" * 40, selected, tmp_path / "pair-2")


def test_a_measurer_that_raises_anything_exits_2(toy, monkeypatch, capsys):
    """Fail closed: an exception of any kind from the measurer (a bug, a lost GPU) is a data
    error (exit 2), not a traceback whose exit status 1 would read as a regression."""
    results, shas = toy

    def crashing(repo, log):
        def measure(sha, selected, folder):
            raise RuntimeError("CUDA error: no device")

        return measure

    monkeypatch.setattr(gate_mod, "run_py_measurer", crashing)
    args = ["--results", str(results), "--base", shas["base"], "--head", shas["slow"]]
    assert gate_mod.main([*args, "--confirm"]) == 2
    assert "RuntimeError: CUDA error: no device" in capsys.readouterr().err


def _skip_own_speed_row(data: dict) -> None:
    """The re-run 'measured' the flagged row as NaN (asv: skipped), e.g. a selection that
    matched nothing: on both commits of a pair, compare() calls it not_comparable."""
    row = data["results"].get(SPEED)
    if row is not None:
        row[0] = [float("nan") if i == 0 else v for i, v in enumerate(row[0])]


def test_a_re_run_that_did_not_measure_the_row_cannot_clear_it(toy):
    results, shas = toy
    report = run_gate(results, shas["base"], shas["slow"])
    measure = fake_measurer(results, shas, {"slow": "same"}, [], damage=_skip_own_speed_row)
    with pytest.raises(ConfirmError, match=r"did not measure .*not_comparable"):
        confirm_report(report, measure, rounds=3, log=lambda line: None)


def test_static_audit_resources_are_never_re_measured():
    """Resource rows with an ``arch`` parameter are cross-compiled facts; live ones (the GPU's
    chosen config) may be re-measured, as may speed; memory never."""
    rows = pd.DataFrame([
        {"verdict": "regression", "kind": "resource", "params": {"arch": "sm90", "kernel": "f"}},
        {"verdict": "regression", "kind": "resource", "params": {"kernel": "forward"}},
        {"verdict": "regression", "kind": "speed", "params": {"impl": "safeattn"}},
        {"verdict": "regression", "kind": "memory", "params": {"impl": "safeattn"}},
        {"verdict": "failure", "kind": "speed", "params": {"impl": "safeattn"}},
    ])  # fmt: skip
    assert list(confirmable(rows).index) == [1, 2]


def _with_launches(results: Path, shas: dict[str, str], dest: Path) -> Path:
    """A copy of the toy results whose base and slow commits record different forward
    configs for the flagged row (tools/run.py's ``safeattn_launches`` sidecar)."""
    copy = copy_results(results, dest)
    for name, config in (("base", "M128-N64-w4-s3"), ("slow", "M64-N64-w4-s3")):
        record = {"suite": "suite.SpeedSuite", "params": {"impl": "safeattn", "head_dim": 64},
                  "configs": {"forward": config}}  # fmt: skip
        sidecar = {"commit": shas[name], "safeattn_launches": [record]}
        (copy / TOY_MACHINE / f"versions-{shas[name]}.json").write_text(json.dumps(sidecar))
    return copy


def test_a_config_change_still_explains_confirmed_and_cleared_rows(toy, tmp_path):
    results, shas = toy
    copy = _with_launches(results, shas, tmp_path)
    report = run_gate(copy, shas["base"], shas["slow"])
    change = "forward M128-N64-w4-s3 → M64-N64-w4-s3"
    confirmed = confirm_report(report, fake_measurer(copy, shas, {}, []), log=lambda line: None)
    markdown = render_markdown(confirmed)
    row = next(line for line in markdown.splitlines() if line.startswith("| regression"))
    assert f"| yes: {change} |" in row and f"config changed: {change}" in row
    assert "confirmed by re-measurement" in row
    cleared = confirm_report(report, fake_measurer(copy, shas, {"slow": "same"}, []),
                             log=lambda line: None)  # fmt: skip
    (reason,) = cleared.rows.loc[cleared.rows["reason"].str.startswith("cleared"), "reason"]
    assert f"config changed: {change}" in reason


# ------------------------------------------------------- tools/confirm_demo.py


def _demo():
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))  # the benchmarks package lives at the repository root
    from tools import confirm_demo

    return confirm_demo


def test_the_demo_plants_a_false_alarm_the_gate_flags(toy, tmp_path):
    """The demo's plant: one measured combination of a result file made 20 % slower (value,
    CI, quartiles, samples), combinations not measured (NaN) left alone; the gate, which
    passes the real pair, then flags the row."""
    demo = _demo()
    results, shas = toy
    copy = copy_results(results, tmp_path)
    same = demo.result_file_of(copy, shas["same"])
    data = json.loads(same.read_text())
    row = data["results"][SPEED]
    before = list(row[0])
    row[0][1] = float("nan")  # sdpa_flash not measured, as in a --bench selection
    same.write_text(json.dumps(data))
    assert demo.plant_slowdown(same, SPEED, 1.2) == 1
    after = json.loads(same.read_text())["results"][SPEED]
    samples = data["results"][SPEED][data["result_columns"].index("samples")][0]
    assert after[0][0] == pytest.approx(before[0] * 1.2)
    assert after[data["result_columns"].index("samples")][0] == pytest.approx(
        [s * 1.2 for s in samples]
    )
    report = run_gate(copy, shas["base"], shas["same"])
    (flagged,) = confirmable(report.rows).itertuples()
    assert flagged.benchmark == SPEED and flagged.param_key == "impl=safeattn head_dim=64"


def test_the_demo_plants_relative_to_the_base(toy, tmp_path):
    """With the base's file, the planted head is ``factor`` times the base's value whatever
    the A/A pair's own ratio was (a head measured faster than its base still gets flagged)."""
    demo = _demo()
    results, shas = toy
    copy = copy_results(results, tmp_path)
    same, base = (demo.result_file_of(copy, shas[n]) for n in ("same", "base"))
    col = json.loads(same.read_text())["result_columns"].index("result")
    base_value = json.loads(base.read_text())["results"][SPEED][col][0]
    data = json.loads(same.read_text())
    data["results"][SPEED][col][0] = base_value * 0.9  # the head came out 10 % faster
    same.write_text(json.dumps(data))
    assert demo.plant_slowdown(same, SPEED, 1.2, base_file=base) == 2  # safeattn, sdpa_flash
    after = json.loads(same.read_text())["results"][SPEED][col][0]
    assert after == pytest.approx(base_value * 1.2)


def test_the_demo_reads_what_the_gate_logs(toy):
    """The demo's table quotes the gate's [confirm] lines: parsed from a real confirm() log,
    and a run counts as expected only with the matching finding."""
    demo = _demo()
    results, shas = toy
    report = run_gate(results, shas["base"], shas["slow"])
    lines: list[str] = []
    confirm_report(report, fake_measurer(results, shas, {}, []), rounds=3, log=lines.append)
    (found,) = demo.confirm_lines("\n".join(lines))
    assert found.startswith("CONFIRMED (blocked in 3/3 pairs: ") and "p=" in found
    assert planted_ratio(found, "blocked in 3/3 pairs: ") > 1.5
    assert demo.as_expected(1, 1, True, found)
    assert not demo.as_expected(1, 1, True, "cleared (blocked in 0/3 pairs)")
    assert not demo.as_expected(0, 1, False, "-") and demo.as_expected(0, 0, False, "-")


def test_the_demo_commits_a_slow_head_and_an_identical_one(tmp_path):
    """slow changes only safeattn/api.py (an extra forward launch), same has base's tree, the
    working tree is left at base and asv's branch exists."""
    demo = _demo()
    repo = tmp_path / "repo"
    (repo / "safeattn").mkdir(parents=True)
    (repo / "safeattn" / "api.py").write_text("def attention(q, k, v, **kwargs):\n    return q\n")
    demo.git(repo, "init", "-q", "-b", "work")
    demo.git(repo, "add", "-A")
    demo.git(repo, "commit", "-q", "-m", "base")
    shas = demo.make_commits(repo)
    tree = {name: demo.git(repo, "rev-parse", f"{sha}^{{tree}}") for name, sha in shas.items()}
    assert tree["same"] == tree["base"] != tree["slow"]
    changed = demo.git(repo, "diff", "--name-only", shas["base"], shas["slow"])
    assert changed == "safeattn/api.py"
    head, main = (demo.git(repo, "rev-parse", ref) for ref in ("HEAD", "main"))
    assert head == main == shas["base"]
    namespace: dict = {}
    exec(demo.git(repo, "show", f"{shas['slow']}:safeattn/api.py"), namespace)
    calls = []

    class Tensor:
        def detach(self):
            calls.append("extra launch")
            return self

    namespace["_attention_once"] = lambda q, k, v, **kwargs: calls.append("call") or q
    namespace["attention"](Tensor(), Tensor(), Tensor(), causal=True)
    assert calls.count("call") == 2  # every call runs the attention twice
