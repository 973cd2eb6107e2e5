"""The safeattn-gate CLI on the real asv results of the toy project (test_results.py):
exit codes, output formats, and failing closed on missing or corrupt data."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_results import TOY_MACHINE, copy_results, toy_results

from regress.gate import main

SPEED = "suite.SpeedSuite.time_forward"
NONFINITE = "suite.NumericsSuite.track_nonfinite_rate"


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return toy_results(tmp_path_factory)


def gate(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_unchanged_head_passes(toy, capsys):
    results, shas = toy
    code, out, err = gate(
        capsys, "--results", str(results), "--base", shas["base"], "--head", shas["same"]
    )
    assert code == 0, out + err
    assert out.startswith("safeattn-gate: PASS")


def test_slow_head_fails_naming_the_benchmark(toy, capsys):
    results, shas = toy
    code, out, _ = gate(
        capsys,
        "--results",
        str(results),
        "--base",
        shas["base"][:8],
        "--head",
        shas["slow"][:8],
        "--format",
        "markdown",
    )
    assert code == 1
    first, *rest = out.splitlines()
    assert first.startswith("## safeattn-gate: ❌ FAIL — 1 regression")
    body = "\n".join(rest)
    assert "### Blocking (1)" in body
    row = next(line for line in rest if SPEED in line)
    assert "regression" in row and "impl=safeattn head_dim=64" in row and "p=" in row
    # Whether a config change explains it: the toy results record no launches.
    assert "| unknown |" in row
    # The peer's slowdown-free row and unchanged rows are not in the blocking table.
    assert "impl=sdpa_flash" not in row


def test_nonfinite_head_fails_in_every_format(toy, capsys):
    results, shas = toy
    args = ["--results", str(results), "--base", shas["base"], "--head", shas["nan"]]
    code, text, _ = gate(capsys, *args)
    assert code == 1 and text.startswith("safeattn-gate: FAIL — 2 failures")
    assert NONFINITE in text
    code, raw, _ = gate(capsys, *args, "--format", "json")
    assert code == 1
    report = json.loads(raw)
    assert report["verdict"] == "fail" and report["exit_code"] == 1
    failures = [r for r in report["rows"] if r["verdict"] == "failure"]
    assert {r["benchmark"] for r in failures} == {NONFINITE}
    assert {r["impl"] for r in failures} == {"safeattn"}
    assert report["machines"] == [TOY_MACHINE]


def test_improvement_passes_and_is_reported(toy, capsys):
    results, shas = toy
    code, out, _ = gate(
        capsys,
        "--results",
        str(results),
        "--base",
        shas["slow"],
        "--head",
        shas["base"],
        "--format",
        "markdown",
    )
    assert code == 0
    assert out.startswith("## safeattn-gate: ✅ PASS")
    # Not blocking: counted, and listed folded away.
    assert "Not blocking: " in out and "1 improvement" in out
    assert "<details><summary>1 improvement</summary>" in out and SPEED in out


def test_git_refs_are_resolved(toy, capsys, monkeypatch):
    results, shas = toy
    monkeypatch.chdir(results.parent)  # the toy repository
    code, out, _ = gate(
        capsys, "--results", str(results), "--base", "HEAD~2", "--head", "HEAD~1"
    )  # "slow" -> "nan"
    assert code == 1 and shas["nan"][:10] in out
    code, _, err = gate(
        capsys, "--results", str(results), "--base", "no-such-branch", "--head", "HEAD"
    )
    assert code == 2 and "unknown commit 'no-such-branch'" in err


@pytest.mark.parametrize(
    "damage, message",
    [
        ("truncate-head", "unreadable or corrupt result files"),
        ("delete-head", "no results for commit"),
        ("corrupt-benchmarks-json", "benchmarks.json: not valid JSON"),
    ],
)
def test_corrupt_or_missing_results_exit_2(toy, tmp_path, capsys, damage, message):
    results, shas = toy
    copy = copy_results(results, tmp_path)
    head_file = next((copy / TOY_MACHINE).glob(f"{shas['slow'][:8]}-*.json"))
    if damage == "truncate-head":
        head_file.write_text(head_file.read_text()[:300])
    elif damage == "delete-head":
        head_file.unlink()
    else:
        (copy / "benchmarks.json").write_text("{")
    code, out, err = gate(
        capsys, "--results", str(copy), "--base", shas["base"], "--head", shas["slow"]
    )
    assert code == 2 and out == ""
    assert message in err


def test_corrupt_file_of_another_commit_is_only_a_warning(toy, tmp_path, capsys):
    results, shas = toy
    copy = copy_results(results, tmp_path)
    other = next((copy / TOY_MACHINE).glob(f"{shas['broken'][:8]}-*.json"))
    other.write_text("not json")
    # A per-commit sidecar (tools/run.py writes versions-<sha>.json) of another commit.
    (copy / TOY_MACHINE / f"versions-{shas['nan']}.json").write_text("{")
    code, out, _ = gate(
        capsys, "--results", str(copy), "--base", shas["base"], "--head", shas["same"]
    )
    assert code == 0
    assert f"{TOY_MACHINE}/{other.name}: not valid JSON" in out
    assert f"{TOY_MACHINE}/versions-{shas['nan']}.json: not valid JSON" in out
    # The same damage to the head's own sidecar is fatal.
    (copy / TOY_MACHINE / f"versions-{shas['same']}.json").write_text("{")
    code, _, err = gate(
        capsys, "--results", str(copy), "--base", shas["base"], "--head", shas["same"]
    )
    assert code == 2 and f"versions-{shas['same']}.json" in err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--results", "/nonexistent"], "does not exist"),
        (["--machine", "gpu-x"], "unknown machine(s) ['gpu-x']"),
        (["--policy", "/nonexistent.toml"], "cannot read policy file"),
    ],
    ids=["no-results-dir", "unknown-machine", "no-policy-file"],
)
def test_usage_errors_exit_2(toy, capsys, args, message):
    results, shas = toy
    base = ["--results", str(results), "--base", shas["base"], "--head", shas["same"]]
    code, _, err = gate(capsys, *base, *args)
    assert code == 2 and message in err


def test_machine_with_only_one_commit(toy, tmp_path, capsys):
    results, shas = toy
    copy = copy_results(results, tmp_path)
    lone = copy / "other-gpu"
    lone.mkdir()
    shutil.copy(copy / TOY_MACHINE / "machine.json", lone / "machine.json")
    base_file = next((copy / TOY_MACHINE).glob(f"{shas['base'][:8]}-*.json"))
    shutil.copy(base_file, lone / base_file.name)
    args = ["--results", str(copy), "--base", shas["base"], "--head", shas["same"]]
    code, out, _ = gate(capsys, *args)
    assert code == 0 and "other-gpu has results for the base only" in out
    code, _, err = gate(capsys, *args, "--machine", "other-gpu")
    assert code == 2 and "other-gpu: base present, head MISSING" in err
    code, _, err = gate(capsys, *args, "--machine", TOY_MACHINE, "other-gpu")
    assert code == 2 and "other-gpu: base present, head MISSING" in err
    code, out, _ = gate(capsys, *args, "--machine", TOY_MACHINE, "--format", "json")
    assert code == 0 and json.loads(out)["machines"] == [TOY_MACHINE]


def test_nothing_comparable_exits_2(toy, tmp_path, capsys):
    results, shas = toy
    copy = copy_results(results, tmp_path)
    for path in (copy / TOY_MACHINE).glob("*-*.json"):
        data = json.loads(path.read_text())
        for row in data["results"].values():
            row[0] = None  # every benchmark failed
        path.write_text(json.dumps(data))
    code, _, err = gate(
        capsys, "--results", str(copy), "--base", shas["base"], "--head", shas["same"]
    )
    assert code == 2 and "nothing comparable" in err


def test_argparse_usage_error_exits_2(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--results", "x"])
    assert exc.value.code == 2


def test_a_preloaded_results_table_gives_the_same_report_without_reading_again(
    toy, tmp_path, monkeypatch
):
    """run_gate(loaded=...): regress.aa gates many pairs of one directory and passes the
    table it read once; the report is the one run_gate builds from the directory itself."""
    from regress import gate as gate_module
    from regress.results import load_results

    results, shas = toy
    copy = copy_results(results, tmp_path)
    own = gate_module.run_gate(copy, shas["base"], shas["slow"])
    loaded = load_results(copy)

    def no_reading(_path):
        raise AssertionError("run_gate read the results directory again")

    monkeypatch.setattr(gate_module, "load_results", no_reading)
    given = gate_module.run_gate(copy, shas["base"], shas["slow"], loaded=loaded)
    assert (given.base, given.head, given.machines) == (own.base, own.head, own.machines)
    assert given.rows.equals(own.rows) and given.exit_code == own.exit_code == 1


def test_command_line_exit_codes(toy):
    """The real process exit status, as CI sees it."""
    results, shas = toy
    cmd = [
        sys.executable,
        "-m",
        "regress.gate",
        "--results",
        str(results),
        "--base",
        shas["base"],
    ]
    slow = subprocess.run([*cmd, "--head", shas["slow"]], capture_output=True, text=True)
    assert slow.returncode == 1, slow.stderr
    same = subprocess.run([*cmd, "--head", shas["same"]], capture_output=True, text=True)
    assert same.returncode == 0, same.stderr


def _mutate(obj, rng, depth: int = 0) -> None:
    """Replace one value somewhere inside a JSON document with a value of another type."""
    junk = [None, 1, "x", [], {}, [1, 2], float("nan"), True, -1.5]
    if not (isinstance(obj, (dict, list)) and obj):
        return
    slot = rng.choice(list(obj)) if isinstance(obj, dict) else rng.randrange(len(obj))
    if rng.random() < 0.6 and depth < 5 and isinstance(obj[slot], (dict, list)):
        _mutate(obj[slot], rng, depth + 1)
    else:
        obj[slot] = rng.choice(junk)


def test_damaged_files_never_crash_the_gate(toy, tmp_path, capsys):
    """Any JSON value of the wrong type anywhere: an exit code and a message, no traceback."""
    import random

    results, shas = toy
    rng = random.Random(0)
    for trial in range(40):
        copy = Path(shutil.copytree(results, tmp_path / f"r{trial}"))
        target = rng.choice(sorted(copy.rglob("*.json")))
        data = json.loads(target.read_text())
        _mutate(data, rng)
        target.write_text(json.dumps(data))
        for fmt in ("text", "markdown", "json"):
            code, _, _ = gate(
                capsys,
                "--results",
                str(copy),
                "--base",
                shas["base"],
                "--head",
                shas["slow"],
                "--format",
                fmt,
            )
            assert code in (0, 1, 2), (target.name, code)


def test_gate_verdict_reads_compare_rows_like_the_exit_code():
    import pandas as pd

    from regress.gate import FAIL, NOTHING_COMPARED, PASS, gate_verdict

    def rows(*verdicts: str) -> pd.DataFrame:
        return pd.DataFrame({"verdict": list(verdicts)})

    assert gate_verdict(rows("unchanged", "context", "new")) == PASS
    assert gate_verdict(rows("improvement")) == PASS
    for blocking in ("failure", "missing", "regression"):
        assert gate_verdict(rows("unchanged", "improvement", blocking)) == FAIL
    # nothing actually compared: the gate exits 2, never passes
    assert gate_verdict(rows("new", "context", "not_comparable")) == NOTHING_COMPARED
    assert gate_verdict(rows()) == NOTHING_COMPARED


def _report_rows(verdicts: list[tuple[str, str]], config_change=None):
    """compare()-shaped rows: one per (verdict, benchmark)."""
    import pandas as pd

    from regress.compare import COMPARE_COLUMNS

    rows = []
    for i, (verdict, benchmark) in enumerate(verdicts):
        rows.append({
            "machine": "gpu", "benchmark": benchmark, "suite": benchmark.rsplit(".", 1)[0],
            "metric": "forward_ms", "kind": "speed", "param_key": f"impl=safeattn n={i}",
            "params": {}, "impl": "safeattn", "peer": False, "env_name": "e",
            "unit": "seconds", "better": "lower", "base_value": 1e-3, "head_value": 1.3e-3,
            "base_status": "ok", "head_status": "ok", "ratio": 1.3 if verdict != "improvement"
            else 0.8, "p_value": 1e-6, "significant": True, "test": "mann-whitney",
            "verdict": verdict, "reason": f"reason {i}", "config_change": config_change,
        })  # fmt: skip
    return pd.DataFrame.from_records(rows, columns=list(COMPARE_COLUMNS))


def _report(rows, notes=()):
    from regress.gate import GateReport

    return GateReport(base="a" * 40, head="b" * 40, machines=["gpu"], rows=rows,
                      policy_source="default", notes=list(notes))  # fmt: skip


def test_a_pass_fits_a_screen_in_text():
    """Many improvements, new rows and notes: a PASS stays within 25 lines, with counts."""
    from regress.gate_render import render_text

    rows = _report_rows([("unchanged", "s.S.track_forward_ms")] * 200
                        + [("improvement", "s.S.track_backward_ms")] * 30
                        + [("new", "s.T.track_forward_ms")] * 50)  # fmt: skip
    text = render_text(_report(rows, notes=[f"note {i}" for i in range(12)]))
    lines = text.splitlines()
    assert lines[0].startswith("safeattn-gate: PASS") and len(lines) <= 25, text
    assert "200 unchanged, 30 improvements, 50 new rows" in text
    assert "25 more improvements" in text and "7 more" in text


def test_markdown_lists_only_blocking_rows_with_config_change():
    """Verdict first; the blocking table holds only blocking rows, each saying whether a
    config change explains it; missing rows are counted (listed folded); the rest counted."""
    from regress.gate_render import render_markdown

    rows = _report_rows([("regression", "s.S.track_forward_ms")]
                        + [("missing", "s.M.track_step_ms")] * 8
                        + [("unchanged", "s.S.track_backward_ms")] * 40
                        + [("improvement", "s.S.track_fwd_bwd_ms")] * 3,
                        config_change="forward A → B")  # fmt: skip
    out = render_markdown(_report(rows))
    first, *_ = out.splitlines()
    assert first.startswith("## safeattn-gate: ❌ FAIL — 1 regression, 8 missing")
    blocking, rest = out.split("Not blocking: ", 1)
    table = [line for line in blocking.split("<details>")[0].splitlines() if "`s." in line]
    assert len(table) == 1 and "| yes: forward A → B |" in table[0] and "p=1e-06" in table[0]
    assert "**Missing:** 8 measured on base, absent on head: gpu s.M 8." in blocking
    assert "<details><summary>8 missing rows</summary>" in blocking
    assert rest.startswith("40 unchanged, 3 improvements.")
    assert "<details><summary>3 improvements</summary>" in rest
    assert "track_backward_ms" not in out  # unchanged rows are only counted


def _cleared(n: int):
    """n Confirmations that cleared their row (first run 1.2x, re-runs ~1.0x)."""
    from regress.confirm import Confirmation

    return [Confirmation("gpu", "s.S.track_forward_ms", f"impl=safeattn n={i}",
                         ratios=[1.01, 0.99, 1.02], blocked=[False, False, False],
                         confirmed=False, p_values=[0.4, 0.7, 0.2], first_ratio=1.2,
                         first_p=1e-5) for i in range(n)]  # fmt: skip


def test_a_pass_after_confirm_fits_a_screen_and_counts_the_cleared_rows():
    """--confirm cleared 8 rows: the verdict line says so, the text counts them and names a
    few (within the 25-line budget, with improvements and notes too); markdown folds the
    list of cleared rows in <details>, each with its first-run and re-run evidence."""
    import dataclasses

    from regress.gate_render import render_markdown, render_text

    rows = _report_rows([("unchanged", "s.S.track_forward_ms")] * 200
                        + [("improvement", "s.S.track_backward_ms")] * 30)  # fmt: skip
    report = dataclasses.replace(_report(rows, notes=[f"note {i}" for i in range(12)]),
                                 confirmations=_cleared(8))  # fmt: skip
    text = render_text(report)
    lines = text.splitlines()
    assert lines[0] == (
        "safeattn-gate: PASS — no regressions (8 flagged rows cleared by re-measurement)"
    )
    assert len(lines) <= 25, text
    assert "8 flagged rows cleared by re-measurement, 0 confirmed" in text
    assert "… 3 more cleared rows" in text
    markdown = render_markdown(report)
    assert markdown.startswith("## safeattn-gate: ✅ PASS — no regressions (8 flagged rows")
    assert "### Blocking" not in markdown
    details = markdown.split("<details><summary>8 cleared rows</summary>", 1)[1]
    listed = details.split("</details>", 1)[0]
    assert listed.count("- cleared: gpu `s.S.track_forward_ms`") == 8
    assert "first run 1.200× p=1e-05; re-run blocked in 0/3 pairs: 1.010× p=0.4" in listed


def test_markdown_after_confirm_lists_blocking_rows_before_any_count():
    """A confirmed regression stays in the blocking table, above the counts and the folded
    lists of cleared rows."""
    import dataclasses

    from regress.gate_render import render_markdown

    rows = _report_rows([("regression", "s.S.track_forward_ms")]
                        + [("unchanged", "s.S.track_backward_ms")] * 20)  # fmt: skip
    report = dataclasses.replace(_report(rows), confirmations=_cleared(2))
    out = render_markdown(report)
    assert out.startswith("## safeattn-gate: ❌ FAIL — 1 regression (2 flagged rows cleared")
    table_at = out.index("| regression | `s.S.track_forward_ms`")
    assert out.index("### Blocking (1)") < table_at < out.index("Not blocking: 20 unchanged")
    assert table_at < out.index("<details><summary>2 cleared rows</summary>")
