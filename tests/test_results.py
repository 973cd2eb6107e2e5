"""regress.results on result files written by real asv runs.

The fixture builds a tiny throwaway benchmark project (a git repo in a tmp dir) whose
commits change what the benchmarks measure, and runs real asv on each commit
(``--python=same --record-samples``). Corrupt-file tests use damaged copies of those real
files. test_compare.py and test_gate.py reuse :func:`toy_results`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from regress.results import BASE_COLUMNS, load_results, results_mtime

pytest.importorskip("asv", reason="the results tests run real asv (pip install -e '.[bench]')")

TOY_MACHINE = "toybox"
# The GPU the toy results claim to come from: the live shared-memory row is checked
# against this architecture's limit (sm86: 101376 bytes).
TOY_SIDECAR = {"gpu_name": "NVIDIA A10", "compute_capability": "8.6"}

_SUITE = '''
"""A stand-in for the real suite: same naming convention, tiny cost."""
import random

DELAY_S = {delay_s!r}
NONFINITE = {nonfinite!r}
SHARED_BYTES = {shared_bytes!r}
WRONG_RESULT_FAILS = {wrong_result_fails!r}


class SpeedSuite:
    params = (["safeattn", "sdpa_flash"], [64])
    param_names = ["impl", "head_dim"]
    # Ten samples of one call each, no warm-up: enough for Mann-Whitney, fast.
    number = 1
    repeat = 10
    rounds = 1
    warmup_time = 0
    # asv reads this clock before and after each call (its ``timer`` attribute), and the call
    # advances it: the test_results module's NOTE on the virtual clock.
    timer = staticmethod(lambda: _CLOCK[0])

    def time_forward(self, impl, head_dim):
        delay = DELAY_S if impl == "safeattn" else 0.020
        _CLOCK[0] += delay * (1.0 + _JITTER.uniform(-0.01, 0.01))


_CLOCK = [0.0]
_JITTER = random.Random({seed!r})


class NumericsSuite:
    params = (["safeattn", "flex"], ["left_pad_causal", "all_masked"])
    param_names = ["impl", "family"]

    def track_nonfinite_rate(self, impl, family):
        # The peer is broken on purpose: a peer's rate is context, never a failure.
        return NONFINITE if impl == "safeattn" else 0.5

    def track_wrong_result_rate(self, impl, family):
        if WRONG_RESULT_FAILS and impl == "safeattn":
            raise RuntimeError("kernel crashed")
        return 0.0

    def track_max_rel_error(self, impl, family):
        return 1e-3


class SkippedSuite:
    params = (["safeattn", "flex"],)
    param_names = ["impl"]

    def setup(self, impl):
        if impl == "flex":
            raise NotImplementedError  # asv: skipped (NaN)

    def track_max_rel_error(self, impl):
        return 1e-3


class StaticResourceSuite:
    params = (["sm80", "sm86"],)
    param_names = ["arch"]

    def track_shared_bytes(self, arch):
        return SHARED_BYTES


class LiveResourceSuite:
    def track_shared_bytes(self):
        return SHARED_BYTES
{extra}
'''

_EXTRA_BENCHMARK = '''

class ExtraSuite:
    def track_registers(self):
        return 128
'''

# name -> how the suite differs from the base commit.
TOY_VARIANTS: dict[str, dict] = {
    "base": {},
    "same": {},  # an unrelated change (a comment): must not be flagged
    "slow": {"delay_s": 0.040},
    "nan": {"nonfinite": 0.25},
    "broken": {"wrong_result_fails": True, "shared_bytes": 120_000, "extra": False},
}
# NOTE: the virtual clock — the toy SpeedSuite's samples are its nominal delay times a seeded
# uniform 1 +- 1 % (a seed per commit, so an unchanged pair still differs), on a clock that
# asv reads as its timer and the call advances. Real sleeps (5 ms, then 20 ms) woke late on
# the busy two-core CI machine: 2026-12-03's run flagged the unchanged commit as faster and
# hid the A/A report's planted 20 % slowdown (four red tests). What these tests check is
# the path from asv's files to the verdicts, not this machine's scheduler.
_BASE_SETTINGS = {
    "delay_s": 0.020,
    "nonfinite": 0.0,
    "shared_bytes": 65_536,
    "wrong_result_fails": False,
    "extra": True,
}


def _run(cmd: list[str], cwd: Path, env: dict[str, str], ok_codes: tuple[int, ...] = (0,)) -> None:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode not in ok_codes:
        raise RuntimeError(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )


def build_toy_results(root: Path) -> tuple[Path, dict[str, str]]:
    """Create the toy project under ``root``, commit every variant of
    :data:`TOY_VARIANTS` and run real asv on each. Returns (results dir, name -> sha)."""
    repo = root / "toy"
    (repo / "benchmarks").mkdir(parents=True)
    (repo / "benchmarks" / "__init__.py").write_text("")
    (repo / "asv.conf.json").write_text(json.dumps({
        "version": 1, "project": "toy", "repo": ".", "environment_type": "existing",
        "benchmark_dir": "benchmarks", "results_dir": "results", "html_dir": "html",
        "branches": ["HEAD"],
    }))
    # asv keeps machine info in ~/.asv-machine.json: give it a private HOME.
    env = {**os.environ, "HOME": str(root / "home"), "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}
    (root / "home").mkdir()
    _run(["git", "init", "-q"], repo, env)
    _run([sys.executable, "-m", "asv", "machine", "--yes", "--machine", TOY_MACHINE], repo, env)

    shas = {}
    for seed, (name, change) in enumerate(TOY_VARIANTS.items()):
        settings = {**_BASE_SETTINGS, **change, "seed": seed}
        extra = _EXTRA_BENCHMARK if settings.pop("extra") else ""
        source = _SUITE.format(extra=extra, **settings)
        if name == "same":
            source += "\n# an unrelated change\n"
        (repo / "benchmarks" / "suite.py").write_text(textwrap.dedent(source))
        _run(["git", "add", "-A"], repo, env)
        _run(["git", "commit", "-q", "-m", name], repo, env)
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True,
                             text=True, check=True).stdout.strip()
        _run([sys.executable, "-m", "asv", "run", "--python=same", "--record-samples",
              f"--set-commit-hash={sha}", "--machine", TOY_MACHINE, "--show-stderr",
              "--launch-method", "forkserver"], repo, env,
             ok_codes=(0, 2))  # asv exits 2 when a benchmark fails, as "broken" does
        if not list((repo / "results" / TOY_MACHINE).glob(f"{sha[:8]}-*.json")):
            raise RuntimeError(f"asv wrote no results for the {name!r} commit")
        shas[name] = sha
    results = repo / "results"
    (results / TOY_MACHINE / "gpu.json").write_text(json.dumps(TOY_SIDECAR))
    return results, shas


def toy_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The toy results, built once per test session (shared by the test files)."""
    root = tmp_path_factory.getbasetemp() / "toy_asv"
    done = root / "shas.json"
    if not done.exists():
        if root.exists():
            shutil.rmtree(root)
        root.mkdir()
        _, shas = build_toy_results(root)
        done.write_text(json.dumps(shas))
    return root / "toy" / "results", json.loads(done.read_text())


def copy_results(results: Path, dest: Path) -> Path:
    """A private copy of the results, for tests that damage files."""
    return Path(shutil.copytree(results, dest / "results"))


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    return toy_results(tmp_path_factory)


def test_table_has_one_row_per_commit_benchmark_and_parameters(toy):
    results, shas = toy
    loaded = load_results(results)
    assert loaded.problems == []
    table = loaded.table
    assert list(table.columns[: len(BASE_COLUMNS)]) == list(BASE_COLUMNS)
    assert {"impl", "head_dim", "family", "arch"} <= set(loaded.param_names)
    assert set(table["commit"]) == set(shas.values())
    base = table[table["commit"] == shas["base"]]
    # 2 speed + 3 x 4 numerics + 2 skipped-suite + 2 static + 1 live + 1 extra
    assert len(base) == 20
    assert not base.duplicated(["benchmark", "param_key"]).any()


def test_parameters_are_parsed_from_asv_reprs(toy):
    results, shas = toy
    table = load_results(results).table
    row = table[(table["benchmark"] == "suite.SpeedSuite.time_forward")
                & (table["commit"] == shas["base"]) & (table["impl"] == "safeattn")].iloc[0]
    assert row["params"] == {"impl": "safeattn", "head_dim": 64}
    assert row["head_dim"] == 64 and isinstance(row["head_dim"], int)
    assert row["param_key"] == "impl=safeattn head_dim=64"
    assert row["suite"] == "suite.SpeedSuite"
    assert row["metric"] is None and row["unit"] == "seconds" and row["better"] == "lower"


def test_time_benchmarks_carry_samples_and_confidence_interval(toy):
    results, shas = toy
    table = load_results(results).table
    rows = table[(table["benchmark"] == "suite.SpeedSuite.time_forward")
                 & (table["commit"] == shas["base"])]
    for _, row in rows.iterrows():
        assert row["status"] == "ok"
        assert len(row["samples"]) == 10
        assert 0.019 < row["value"] < 0.2  # sleeps 20 ms
        assert row["ci_low"] <= row["value"] <= row["ci_high"]


def test_track_metrics_take_unit_and_direction_from_the_registry(toy):
    results, _ = toy
    table = load_results(results).table
    row = table[(table["benchmark"] == "suite.NumericsSuite.track_nonfinite_rate")].iloc[0]
    assert (row["metric"], row["unit"], row["better"]) == ("nonfinite_rate", "fraction", "lower")
    assert row["samples"] is None


def test_failed_and_skipped_results_are_kept_with_their_status(toy):
    results, shas = toy
    table = load_results(results).table
    broken = table[table["commit"] == shas["broken"]]
    failed = broken[(broken["benchmark"] == "suite.NumericsSuite.track_wrong_result_rate")
                    & (broken["impl"] == "safeattn")]
    assert set(failed["status"]) == {"failed"} and failed["value"].isna().all()
    skipped = table[(table["benchmark"] == "suite.SkippedSuite.track_max_rel_error")
                    & (table["impl"] == "flex")]
    assert set(skipped["status"]) == {"skipped"} and skipped["value"].isna().all()


def test_commits_are_ordered_and_dated(toy):
    results, shas = toy
    loaded = load_results(results)
    commits = loaded.commits
    assert list(commits.columns) == ["machine", "commit", "date", "order"]
    # Committed in TOY_VARIANTS order, within the same second or two: ties are broken
    # by the order asv ran them in.
    assert list(commits.sort_values("order")["commit"]) == list(shas.values())
    assert str(commits["date"].dt.tz) == "UTC"


def test_machine_info_and_sidecar(toy):
    results, _ = toy
    machines = load_results(results).machines
    assert set(machines) == {TOY_MACHINE}
    info = machines[TOY_MACHINE]
    assert info["machine"] == TOY_MACHINE
    assert info["sidecars"] == {"gpu.json": TOY_SIDECAR}


def test_corrupt_and_partial_files_are_reported_and_the_rest_loads(toy, tmp_path):
    results, shas = toy
    copy = copy_results(results, tmp_path)
    files = {p.name[:8]: p for p in (copy / TOY_MACHINE).glob("*-*.json")}
    truncated = files[shas["slow"][:8]]
    truncated.write_text(truncated.read_text()[:200])
    partial = files[shas["nan"][:8]]
    data = json.loads(partial.read_text())
    row = data["results"]["suite.SpeedSuite.time_forward"]
    row[0] = row[0][:1]  # one result for two parameter combinations
    partial.write_text(json.dumps(data))

    loaded = load_results(copy)
    assert len(loaded.problems) == 2, loaded.problems
    slow_problem, nan_problem = sorted(loaded.problems, key=lambda p: p.startswith(
        f"{TOY_MACHINE}/{shas['nan'][:8]}"))
    assert slow_problem.startswith(f"{TOY_MACHINE}/{truncated.name}: not valid JSON")
    assert nan_problem.startswith(f"{TOY_MACHINE}/{partial.name}: suite.SpeedSuite.time_forward")
    assert "'result' has 1 entries for 2 parameter combinations" in nan_problem
    table = loaded.table
    assert shas["slow"] not in set(table["commit"])
    nan_rows = table[table["commit"] == shas["nan"]]
    assert "suite.SpeedSuite.time_forward" not in set(nan_rows["benchmark"])
    assert len(nan_rows) == 18  # every other benchmark of that file still loads


def test_missing_benchmarks_json_falls_back_to_positional_names(toy, tmp_path):
    results, _ = toy
    copy = copy_results(results, tmp_path)
    (copy / "benchmarks.json").unlink()
    loaded = load_results(copy)
    assert loaded.problems == [
        "benchmarks.json: missing (parameter names and units unknown)"
    ]
    assert "param1" in loaded.param_names and "impl" not in loaded.param_names


def test_missing_directory_raises():
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_results("/nonexistent/results")


def test_results_mtime_tracks_the_newest_file(toy, tmp_path):
    results, _ = toy
    copy = copy_results(results, tmp_path)
    before = results_mtime(copy)
    newest = max(p.stat().st_mtime for p in copy.rglob("*"))
    assert before == pytest.approx(max(newest, copy.stat().st_mtime))
    target = next((copy / TOY_MACHINE).glob("*-*.json"))
    os.utime(target, (before + 100, before + 100))
    assert results_mtime(copy) == pytest.approx(before + 100)
    assert results_mtime(tmp_path / "absent") == 0.0


def test_empty_results_directory(tmp_path):
    loaded = load_results(tmp_path)
    assert loaded.table.empty and list(loaded.table.columns) == list(BASE_COLUMNS)
    assert loaded.commits.empty and loaded.machines == {}


def test_loads_the_real_cpu_suite_output():
    """The repository's own suite, run for real (shared with test_asv_suite.py)."""
    from asv_helpers import asv_cpu_run

    from regress.metrics import METRICS

    run = asv_cpu_run()
    loaded = load_results(run.results)
    assert loaded.problems == []
    table = loaded.table
    # One commit: the working tree, recorded as HEAD (not compared with run.commit: another
    # commit landing during the run moves HEAD).
    (commit,) = set(table["commit"])
    assert set(table["machine"]) == {run.machine}
    # Every benchmark follows the track_<metric> convention of the metric registry.
    assert set(table["metric"]) <= set(METRICS), set(table["metric"]) - set(METRICS)
    own = table[table["impl"] == "safeattn"]
    assert len(own) and (own["status"] == "ok").any()
    # tools/run.py's per-commit sidecar reaches the machine info.
    assert f"versions-{commit}.json" in loaded.machines[run.machine]["sidecars"]
