"""``tools/run.py --gpus``: the GPU listing and selection, the work-stealing scheduler (with
CUDA faked: fake ``nvidia-smi`` and child commands that report the GPU they were given), and
several runs publishing into one results directory at once without losing a result."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # tools/ lives at the repository root (alone, the file ran
# only after another test file had put it on the path)

from tools.runner import gpus, results  # noqa: E402

H100 = "NVIDIA H100 80GB HBM3"
H200 = "NVIDIA H200"


def fake_nvidia_smi(tmp_path: Path, monkeypatch, lines: list[str]) -> None:
    """Put an ``nvidia-smi`` on PATH that prints ``lines`` (its --query-gpu csv)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + "".join(f"echo '{line}'\n" for line in lines))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def test_gpus_are_listed_from_nvidia_smi(tmp_path, monkeypatch):
    fake_nvidia_smi(tmp_path, monkeypatch, [f"0, {H100}", f"1, {H100}", f"3, {H200}"])
    assert gpus.list_gpus() == [gpus.Gpu(0, H100), gpus.Gpu(1, H100), gpus.Gpu(3, H200)]


def test_no_nvidia_smi_lists_no_gpu(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert gpus.list_gpus() == []


def test_selection_all_indices_and_errors():
    here = [gpus.Gpu(0, H100), gpus.Gpu(1, H100), gpus.Gpu(2, H200)]
    assert gpus.select("all", here) == here
    assert gpus.select("2, 0,2", here) == [here[2], here[0]]
    with pytest.raises(ValueError, match=r"'5' is not a GPU here; GPUs: 0 \(NVIDIA H100"):
        gpus.select("0,5", here)
    with pytest.raises(ValueError, match="'x' is not a GPU"):
        gpus.select("x", here)
    with pytest.raises(ValueError, match="lists no GPU"):
        gpus.select("all", [])


def child(folder: Path | None = None, slow: str = "", others: tuple[str, ...] = ()):
    """A command per commit (a stand-in for ``tools/run.py`` on one commit) that prints the
    GPU it sees and leaves a file named after its commit in ``folder``; the ``slow`` commit
    ends only once the ``others`` have (so it is the slowest, whatever the machine's load)."""

    def command(commit: str) -> list[str]:
        wait = [str(folder / name) for name in others] if commit == slow else []
        code = (
            "import os, sys, time; "
            "print('sees', os.environ['CUDA_VISIBLE_DEVICES'], os.environ['CUDA_DEVICE_ORDER']); "
            f"end = time.time() + 120\nwhile not all(map(os.path.exists, {wait!r})):\n"
            "    time.sleep(0.05)\n    assert time.time() < end, 'the others never ended'\n"
            + (f"open({str(folder / commit)!r}, 'w').close()" if folder else "")
        )
        return [sys.executable, "-c", code]

    return command


def test_a_slow_commit_keeps_one_gpu_while_the_other_drains_the_queue(tmp_path):
    two = [gpus.Gpu(0, H100), gpus.Gpu(1, H100)]
    lines: list[str] = []
    command = child(tmp_path, slow="c1", others=("c2", "c3", "c4"))
    jobs = gpus.run_all(two, ["c1", "c2", "c3", "c4"], command, lines.append)
    assert sorted(j.commit for j in jobs) == ["c1", "c2", "c3", "c4"]  # each exactly once
    slow = next(j.gpu for j in jobs if j.commit == "c1")
    assert [j.commit for j in jobs if j.gpu == slow] == ["c1"]
    assert [j.commit for j in jobs if j.gpu != slow] == ["c2", "c3", "c4"]
    assert all(j.exit_status == 0 for j in jobs)
    # Each child saw its own GPU only, in nvidia-smi's order; a progress line per commit.
    for gpu in two:
        seen = {line for line in lines if line.startswith(f"[gpu{gpu.index}] sees")}
        assert seen == {f"[gpu{gpu.index}] sees {gpu.index} PCI_BUS_ID"}, lines
    assert sum("started" in line for line in lines) == 4
    assert sum(" done in " in line for line in lines) == 4


def test_each_gpu_model_measures_every_commit():
    mixed = [gpus.Gpu(0, H100), gpus.Gpu(1, H200), gpus.Gpu(2, H100)]
    jobs = gpus.run_all(mixed, ["a", "b", "c"], child(), lambda line: None)
    per_model = {m: sorted(j.commit for j in jobs if j.gpu.name == m) for m in (H100, H200)}
    assert per_model == {H100: ["a", "b", "c"], H200: ["a", "b", "c"]}
    assert {j.gpu.index for j in jobs if j.gpu.name == H200} == {1}


def test_a_failed_commit_is_reported_and_the_rest_go_on():
    def command(commit: str) -> list[str]:
        return [sys.executable, "-c", f"raise SystemExit({3 if commit == 'bad' else 0})"]

    lines: list[str] = []
    jobs = gpus.run_all([gpus.Gpu(0, H100)], ["ok1", "bad", "ok2"], command, lines.append)
    assert [(j.commit, j.exit_status) for j in jobs] == [("ok1", 0), ("bad", 3), ("ok2", 0)]
    assert any("bad done in" in line and "exit status 3" in line for line in lines)


def test_no_commit_starts_after_the_deadline():
    lines: list[str] = []
    jobs = gpus.run_all([gpus.Gpu(0, H100)], ["a", "b"], child(), lines.append, time.time())
    assert jobs == []
    assert any("budget used: 2 commit(s)" in line for line in lines)


# --- several runs writing one results directory ---------------------------------------------


def result_file(folder: Path, commit: str, value: float) -> Path:
    path = folder / f"{commit[:8]}-env.json"
    path.write_text(json.dumps({"commit_hash": commit, "results": {"bench": value}}))
    return path


def test_a_run_never_puts_back_a_stale_copy_of_another_runs_result(tmp_path):
    store, machine = tmp_path / "results", "nvidia-h100-80gb-hbm3"
    (store / machine).mkdir(parents=True)
    result_file(store / machine, "a" * 40, 1.0)  # commit a, measured before
    (store / "benchmarks.json").write_text(json.dumps({"old.bench": {}}))
    # Two runs start: both stage a copy of a's file.
    stage_a, stage_b = tmp_path / "sa", tmp_path / "sb"
    staged_a = results.stage(store, stage_a, machine)
    staged_b = results.stage(store, stage_b, machine)
    # Run A re-measures commit a (its asv rewrites the file) and publishes first.
    result_file(stage_a / machine, "a" * 40, 2.0)
    (stage_a / "benchmarks.json").write_text(json.dumps({"a.bench": {}}))
    assert results.publish(stage_a, store, machine, staged_a) == [f"{'a' * 8}-env.json"]
    # Run B measured commit b only; its staging still holds a's old file.
    result_file(stage_b / machine, "b" * 40, 3.0)
    (stage_b / "benchmarks.json").write_text(json.dumps({"b.bench": {}}))
    assert results.publish(stage_b, store, machine, staged_b) == [f"{'b' * 8}-env.json"]
    saved = {p.name: json.loads(p.read_text())["results"] for p in (store / machine).glob("*")}
    assert saved == {f"{'a' * 8}-env.json": {"bench": 2.0}, f"{'b' * 8}-env.json": {"bench": 3.0}}
    union = json.loads((store / "benchmarks.json").read_text())
    assert set(union) == {"old.bench", "a.bench", "b.bench"}
    # Without stage's digests (one run alone, as before --gpus) B would have put back a's
    # stale copy: what the digests prevent.
    results.publish(stage_b, store, machine)
    assert json.loads((store / machine / f"{'a' * 8}-env.json").read_text())["results"] == {
        "bench": 1.0
    }


def test_runs_publishing_at_once_keep_every_file_and_description(tmp_path):
    store, machine = tmp_path / "results", "cpu-x"
    store.mkdir()
    names = [f"{i:02d}" * 20 for i in range(8)]
    stagings = []
    for i, commit in enumerate(names):
        staging = tmp_path / f"s{i}"
        staged = results.stage(store, staging, machine)
        result_file(staging / machine, commit, float(i))
        (staging / "benchmarks.json").write_text(json.dumps({f"bench{i}": {}}))
        stagings.append((staging, staged))
    barrier = threading.Barrier(len(stagings))

    def go(staging: Path, staged: dict) -> None:
        barrier.wait()
        results.publish(staging, store, machine, staged)

    threads = [threading.Thread(target=go, args=pair) for pair in stagings]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(list((store / machine).glob("*-env.json"))) == len(names)
    assert set(json.loads((store / "benchmarks.json").read_text())) == {
        f"bench{i}" for i in range(len(names))
    }
    assert not list(store.rglob("*.tmp"))


def test_sidecars_are_written_for_this_runs_commits_only(tmp_path):
    store, machine = tmp_path / "results", "cpu-x"
    (store / machine).mkdir(parents=True)
    started = time.time() - 1
    result_file(store / machine, "a" * 40, 1.0)
    result_file(store / machine, "b" * 40, 1.0)  # another run's, written meanwhile
    info = {"gpu": None}
    written = results.write_sidecars(store, machine, started, info, commits={"a" * 40})
    assert written == ["a" * 40]
    assert sorted(p.name for p in (store / machine).glob("versions-*")) == [
        f"versions-{'a' * 40}.json"
    ]


# --- end to end: tools/run.py --gpus with two faked GPUs ------------------------------------


@pytest.mark.slow
def test_run_py_measures_a_range_on_two_gpus_and_resumes(tmp_path, monkeypatch):
    """Two faked GPUs (on a CPU machine the children measure the interpreter suite and name
    the machine after the CPU: one folder written by two asv runs at once)."""
    import subprocess

    if int(subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=REPO,
                          capture_output=True, text=True).stdout or 0) < 3:  # fmt: skip
        pytest.skip("needs a checkout with history")
    fake_nvidia_smi(tmp_path, monkeypatch, [f"0, {H100}", f"1, {H100}"])
    store = tmp_path / "results"
    cmd = [sys.executable, str(REPO / "tools" / "run.py"), "--gpus", "all", "--same", "--quick",
           "-b", r"^speed\.InterpreterSpeedSuite\.", "--range", "HEAD~2..HEAD",
           "--results", str(store)]  # fmt: skip
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-4000:]
    # asv walks a range's first parents: a merge at HEAD adds no commit of the merged branch.
    commits = subprocess.run(["git", "rev-list", "--first-parent", "--reverse", "HEAD~2..HEAD"],
                             cwd=REPO, capture_output=True, text=True).stdout.split()  # fmt: skip
    (machine,) = [p for p in store.iterdir() if p.is_dir()]
    measured = {
        json.loads(p.read_text())["commit_hash"]: json.loads(p.read_text())["results"]
        for p in machine.glob("*-*.json")
        if not p.name.startswith("versions-")
    }
    assert sorted(measured) == sorted(commits), log[-4000:]
    for commit, rows in measured.items():
        assert any(name.startswith("speed.InterpreterSpeedSuite.") for name in rows), commit
        sidecar = json.loads((machine / f"versions-{commit}.json").read_text())
        assert sidecar["commit"] == commit
    described = json.loads((store / "benchmarks.json").read_text())
    assert any(name.startswith("speed.InterpreterSpeedSuite.") for name in described)
    # One commit per GPU, each with its progress lines; the summary per GPU.
    for index in (0, 1):
        assert f"[gpu{index}] {H100}: commit " in log
        assert f"gpu{index} ({H100}): 1 commit(s)" in log, log[-3000:]
    # A second call resumes: nothing is measured again (a re-measured time would differ).
    again = subprocess.run([*cmd, "--skip-existing"], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=900)  # fmt: skip
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    for path in machine.glob("*-*.json"):
        if not path.name.startswith("versions-"):
            data = json.loads(path.read_text())
            assert data["results"] == measured[data["commit_hash"]], path.name


def test_run_py_stops_with_a_hint_in_a_clone_without_the_measured_branch(tmp_path):
    """A clone with no local ``main`` (``git clone`` of a bundle whose HEAD is unnamed, then a
    detached checkout): asv would fail every commit with "Unknown branch main" after minutes
    of GPU time, so run.py stops first, naming the branch and the fix."""
    import shutil
    import subprocess

    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    subprocess.run(["git", "checkout", "-q", "--detach"], cwd=clone, check=True)
    subprocess.run(["git", "branch", "-q", "-D", "main"], cwd=clone, check=True)
    shutil.copytree(REPO / "tools", clone / "tools", dirs_exist_ok=True)  # this tree's runner
    run = subprocess.run(
        [sys.executable, "tools/run.py", "--same", "--range", "HEAD", "--gpus", "all"],
        cwd=clone, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert run.returncode != 0
    assert "branch 'main'" in run.stderr and "git checkout -B main" in run.stderr, run.stderr
    assert "[gpu" not in run.stdout + run.stderr  # stopped before any GPU was listed or used
