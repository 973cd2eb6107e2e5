"""``python -m regress.aa`` and the README's gate-sensitivity table, on fake asv
results (tests/asv_helpers.write_asv_results) inside a small temporary git repository, so
that the A/A pairs can be found from the commits' trees."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from asv_helpers import write_asv_results

from regress import aa, aa_pairs, gate, report
from regress.sensitivity import SENSITIVITY_FACTORS

MACHINE = "gpu-a"
OTHER_MACHINE = "gpu-b"  # measured c1 and c3 only: no A/A pair
FORWARD = "speed.SpeedSuite.track_forward_ms"
NONFINITE = "numerics.NumericsSuite.track_nonfinite_rate"
SEQ_LENS = [128, 256, 512, 1024, 2048, 4096, 8192, 16384]  # 8 rows: a group verdict
UNKNOWN_SHA = "ab" * 20  # measured, but not a commit of the repository
REPO = Path(__file__).resolve().parent.parent


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    _git(repo, "add", "-A", ".")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD")


def _samples(seq_len: int, impl: str) -> list[float]:
    """Ten timings with a little spread; the same on every commit (a perfect A/A pair)."""
    base = seq_len / 1000 * (1.0 if impl == "safeattn" else 0.8)
    return [base * (1 + 0.001 * i) for i in range(10)]


def _benchmarks() -> dict:
    speed = {(impl, n): _samples(n, impl) for impl in ("safeattn", "sdpa_flash") for n in SEQ_LENS}
    numerics = {
        ("left_pad", "safeattn"): 0.0,
        ("all_masked", "safeattn"): 0.0,
        ("left_pad", "sdpa_math"): 0.5,  # a peer's rate: context, never a failure
        ("all_masked", "sdpa_math"): 1.0,
    }
    return {
        FORWARD: (["impl", "seq_len"], [["safeattn", "sdpa_flash"], SEQ_LENS], speed, "1"),
        NONFINITE: (
            ["family", "impl"],
            [["left_pad", "all_masked"], ["safeattn", "sdpa_math"]],
            numerics,
            "1",
        ),
    }


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A git repository with four commits: c1 -> c2 changes only docs (A/A), c3 changes
    safeattn/ (not A/A), c3 -> c4 changes only tests (A/A); results/ holds identical fake
    results of all four on MACHINE plus an unknown commit, and c1, c3 on OTHER_MACHINE."""
    root = tmp_path_factory.mktemp("aa_repo")
    _git(root, "init", "-q")
    shas = {
        "c1": _commit(root, {"safeattn/k.py": "v1\n", "benchmarks/b.py": "v1\n"}, "c1"),
        "c2": _commit(root, {"docs/notes.md": "docs\n"}, "c2: docs only"),
        "c3": _commit(root, {"safeattn/k.py": "v2\n"}, "c3: kernel change"),
        "c4": _commit(root, {"tests/test_k.py": "t\n"}, "c4: tests only"),
    }
    results = root / "results"
    for i, sha in enumerate([*shas.values(), UNKNOWN_SHA]):
        write_asv_results(results, MACHINE, sha, 1_700_000_000_000 + i * 60_000, _benchmarks())
    for i, key in enumerate(("c1", "c3")):
        write_asv_results(
            results, OTHER_MACHINE, shas[key], 1_700_000_000_000 + i * 60_000, _benchmarks()
        )
    return results, shas


def _digest(results: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(results.rglob("*")):
        if path.is_file():
            h.update(path.relative_to(results).as_posix().encode() + path.read_bytes())
    return h.hexdigest()


# ------------------------------------------------------------------ pairs from git


def test_aa_pairs_are_consecutive_commits_with_identical_trees(repo):
    results, shas = repo
    loaded = aa.load_results(results)
    found = aa_pairs.find_aa_pairs(loaded, MACHINE, aa_pairs.git_toplevel(results))
    # c2 -> c3 changed safeattn/; the unknown commit cannot be paired with c4.
    assert found.pairs == [(shas["c1"], shas["c2"]), (shas["c3"], shas["c4"])]
    assert found.commits[:4] == list(shas.values()) and len(found.commits) == 5
    assert found.since_last_pair() == [UNKNOWN_SHA]
    assert len(found.notes) == 1 and found.notes[0].startswith(UNKNOWN_SHA[:8])
    other = aa_pairs.find_aa_pairs(loaded, OTHER_MACHINE, aa_pairs.git_toplevel(results))
    assert other.pairs == [] and other.notes == []


def test_commits_that_measured_different_benchmarks_are_not_a_pair(tmp_path):
    """Identical trees, but the head ran another suite: not a second run of anything (the
    gate blocks its missing rows, rightly), so no pair, and a note names the suites."""
    _git(tmp_path, "init", "-q")
    one = _commit(tmp_path, {"safeattn/k.py": "v1\n", "benchmarks/b.py": "v1\n"}, "one")
    two = _commit(tmp_path, {"docs/notes.md": "docs\n"}, "two: docs only")
    three = _commit(tmp_path, {"tests/test_k.py": "t\n"}, "three: tests only")
    results = tmp_path / "results"
    full = _benchmarks()
    numerics_only = {NONFINITE: full[NONFINITE]}
    for i, (sha, benchmarks) in enumerate(((one, full), (two, numerics_only), (three, full))):
        write_asv_results(results, MACHINE, sha, 1_700_000_000_000 + i * 60_000, benchmarks)
    found = aa_pairs.find_aa_pairs(aa.load_results(results), MACHINE, tmp_path)
    assert found.pairs == []
    assert found.notes == [
        f"{one[:8]} -> {two[:8]}: identical trees, but not the same benchmarks measured "
        f"(only {one[:8]}: speed.SpeedSuite; only {two[:8]}: none): not paired",
        f"{two[:8]} -> {three[:8]}: identical trees, but not the same benchmarks measured "
        f"(only {two[:8]}: none; only {three[:8]}: speed.SpeedSuite): not paired",
    ]
    # The report says why there is no pair (exit 2: nothing to check), the notes included.
    table = aa.render_markdown(MACHINE, [], found)
    assert table.startswith(f"No A/A pairs measured yet on `{MACHINE}` (3 commits measured)")
    assert all(f"- Note: {note}" in table for note in found.notes)


def test_a_benchmarks_change_breaks_a_pair(tmp_path):
    """The suite's tree counts as much as the package's."""
    _git(tmp_path, "init", "-q")
    one = _commit(tmp_path, {"safeattn/k.py": "v1\n", "benchmarks/b.py": "v1\n"}, "one")
    two = _commit(tmp_path, {"benchmarks/b.py": "v2\n"}, "two")
    assert aa_pairs.measured_trees(tmp_path, one)[0] == aa_pairs.measured_trees(tmp_path, two)[0]
    assert aa_pairs.measured_trees(tmp_path, one)[1] != aa_pairs.measured_trees(tmp_path, two)[1]
    assert aa_pairs.measured_trees(tmp_path, UNKNOWN_SHA) is None


def test_without_git_or_outside_a_repository_it_fails_clearly(repo, tmp_path, monkeypatch):
    results, _ = repo
    with pytest.raises(aa_pairs.AAInputError, match="not inside a git repository"):
        aa_pairs.git_toplevel(tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on it
    with pytest.raises(aa_pairs.AAInputError, match="git is needed"):
        aa_pairs.git_toplevel(results)
    assert aa.main(["--results", str(results), "--machine", MACHINE]) == aa.EXIT_BAD_INPUT


# --------------------------------------------------------------------- the checks


def test_an_identical_pair_passes_and_every_plant_is_caught(repo):
    results, shas = repo
    before = _digest(results)
    loaded = aa.load_results(results)
    check = aa.check_pair(results, loaded, MACHINE, shas["c1"], shas["c2"])
    assert check.verdict == gate.PASS and check.blocked == []
    plants = {p.name: p for p in check.plants}
    assert list(plants) == [
        "5% every row",
        "20% one row",
        "non-finite rate",
        "corrupt data",
        "missing data",
    ]
    assert all(p.caught for p in plants.values()), plants
    # 5 % is below the single-row limit: the benchmark's geometric mean catches it.
    assert plants["5% every row"].cell == "1/1 means, 0/8 rows"
    # All ratios tie at 1.0: the lower median (4th of 8) in parameter-key order, which is
    # string order: seq_len=1024, 128, 16384, 2048, 256, ...
    assert "[impl=safeattn seq_len=2048]" in plants["20% one row"].detail
    assert plants["20% one row"].cell == "1.000 → 1.200×"
    assert "family=all_masked impl=safeattn" in plants["non-finite rate"].detail
    assert plants["corrupt data"].cell == plants["missing data"].cell == "exit 2"
    assert check.ok
    assert _digest(results) == before  # planted in memory and in a temporary copy only


def test_cli_finds_the_pairs_and_exits_0(repo, capsys):
    results, shas = repo
    code = aa.main(["--results", str(results), "--machine", MACHINE, "--format", "json"])
    payload = json.loads(capsys.readouterr().out)
    assert code == 0 and payload["exit_code"] == 0
    assert [(p["base"], p["head"]) for p in payload["pairs"]] == [
        (shas["c1"], shas["c2"]),
        (shas["c3"], shas["c4"]),
    ]
    assert all(p["ok"] and p["false_alarms"] == [] for p in payload["pairs"])
    sweep = payload["pairs"][0]["sweep"]
    assert [r["factor"] for r in sweep] == list(SENSITIVITY_FACTORS)
    assert sweep[0]["blocks"] is False and sweep[-1]["blocks"] is True


def test_an_insensitive_policy_misses_the_slowdowns_and_exits_1(repo, tmp_path, capsys):
    results, shas = repo
    policy = tmp_path / "lax.toml"
    policy.write_text(
        "[speed]\nmax_ratio = 100.0\nmax_group_ratio = 100.0\nmax_ratio_without_stats = 100.0\n"
    )
    args = ["--results", str(results), "--machine", MACHINE, "--policy", str(policy)]
    code = aa.main([*args, shas["c1"][:10], shas["c2"][:10]])
    out = capsys.readouterr().out
    assert code == aa.EXIT_NOT_SHOWN
    assert "5% every row: NOT CAUGHT - does not block: 0 of 8 rows flagged" in out
    assert "20% one row: NOT CAUGHT" in out
    assert "non-finite rate: CAUGHT" in out  # no threshold relaxes a must-be-zero rate


def test_a_false_alarm_on_the_real_pair_exits_1_and_is_not_counted_as_a_catch(repo, tmp_path):
    """A head whose every row is 30 % slower (not an A/A pair at all): the gate blocks the
    real pair, and the 5 % plant on rows that already block is not a catch."""
    _, shas = repo
    copy = tmp_path / "results"
    slow = {
        FORWARD: (
            ["impl", "seq_len"],
            [["safeattn", "sdpa_flash"], SEQ_LENS],
            {("safeattn", n): [s * 1.3 for s in _samples(n, "safeattn")] for n in SEQ_LENS},
            "1",
        )
    }
    write_asv_results(copy, MACHINE, shas["c1"], 1_700_000_000_000, _benchmarks())
    write_asv_results(copy, MACHINE, shas["c2"], 1_700_000_060_000, slow)
    loaded = aa.load_results(copy)
    check = aa.check_pair(copy, loaded, MACHINE, shas["c1"], shas["c2"])
    assert check.verdict == gate.FAIL and not check.ok
    assert any(b.startswith("regression: SpeedSuite.track_forward_ms") for b in check.blocked)
    plants = {p.name: p for p in check.plants}
    assert not plants["5% every row"].caught and not plants["20% one row"].caught
    assert aa.exit_code([check]) == aa.EXIT_NOT_SHOWN


def test_damage_counts_as_caught_only_when_the_gate_exits_2(repo, monkeypatch):
    """(e) reads safeattn-gate's exit code: a gate that passed damaged data, or that fails
    on the undamaged copy too, catches nothing."""
    results, shas = repo
    loaded = aa.load_results(results)
    for fake_exit in (gate.EXIT_PASS, gate.EXIT_DATA_ERROR):
        monkeypatch.setattr(gate, "main", lambda argv, code=fake_exit: code)
        check = aa.check_pair(results, loaded, MACHINE, shas["c1"], shas["c2"])
        damage = [p for p in check.plants if p.name in ("corrupt data", "missing data")]
        assert len(damage) == 2 and not any(p.caught for p in damage)
        assert not check.ok
    assert "already exits 2" in damage[0].detail


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_corrupt_or_missing_real_results_exit_2(repo, tmp_path, damage, capsys):
    _, shas = repo
    copy = tmp_path / "results"
    write_asv_results(copy, MACHINE, shas["c1"], 1_700_000_000_000, _benchmarks())
    head_file = write_asv_results(copy, MACHINE, shas["c2"], 1_700_000_060_000, _benchmarks())
    if damage == "corrupt":
        head_file.write_bytes(head_file.read_bytes()[:200])
    else:
        head_file.unlink()
    code = aa.main(["--results", str(copy), "--machine", MACHINE, shas["c1"], shas["c2"]])
    err = capsys.readouterr().err
    assert code == aa.EXIT_BAD_INPUT
    assert ("corrupt" in err) if damage == "corrupt" else ("no results for commit" in err)


def test_bad_input_exits_2(repo, tmp_path):
    results, shas = repo
    assert aa.main(["--results", str(tmp_path / "none"), "--machine", MACHINE]) == 2
    assert aa.main(["--results", str(results), "--machine", "gpu-x", shas["c1"], shas["c2"]]) == 2
    assert aa.main(["--results", str(results), "--machine", MACHINE, shas["c1"], "f" * 40]) == 2
    # A machine without any A/A pair has nothing to show: not a pass.
    assert aa.main(["--results", str(results), "--machine", OTHER_MACHINE]) == 2


# ------------------------------------------------------------------ README table


def test_readme_table_per_machine_and_honest_without_pairs(repo):
    results, shas = repo
    block = report.gate_sensitivity_block(results)
    prose = " ".join(block.split())  # paragraphs are wrapped at the README's width
    assert f"`{MACHINE}`: 2 A/A pair(s); the gate blocks 0 of them" in prose
    assert f"1 later commit(s) measured, in no A/A pair (newest `{UNKNOWN_SHA[:8]}`" in prose
    assert f"| `{shas['c1'][:8]}` → `{shas['c2'][:8]}` | pass | caught (1/1 means" in block
    assert f"No A/A pairs measured yet on `{OTHER_MACHINE}` (2 commits measured)" in prose
    assert block.count("| `") == 2  # one row per pair, none invented


def test_report_update_rewrites_only_the_block_asked_for(repo, tmp_path):
    results, _ = repo
    readme = tmp_path / "README.md"
    readme.write_text(
        f"intro\n{report.START}\nold results\n{report.END}\nmiddle\n"
        f"{report.GATE_START}\nold gate\n{report.GATE_END}\nend\n"
    )
    code = report.main(
        ["--results", str(results), "--update", str(readme), "--block", "gate-sensitivity"]
    )
    text = readme.read_text()
    assert code == 0 and "old results" in text and "old gate" not in text
    assert report.readme_section(text, report.GATE_START, report.GATE_END) == (
        report.gate_sensitivity_block(results)
    )


def _shallow(repo: Path) -> bool:
    out = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--is-shallow-repository"],
        capture_output=True,
        text=True,
        check=False,
    )
    return out.returncode != 0 or out.stdout.strip() != "false"


@pytest.mark.skipif(
    _shallow(REPO),
    reason="the A/A pairs need the repository's full git history",
)
def test_readme_gate_sensitivity_block_matches_results_dir():
    readme = (REPO / "README.md").read_text()
    fix = "python -m regress.report --update README.md --block gate-sensitivity"
    section = report.readme_section(readme, report.GATE_START, report.GATE_END)
    assert section == report.gate_sensitivity_block(REPO / "results"), (
        f"README's gate-sensitivity block is stale: run `{fix}`"
    )
