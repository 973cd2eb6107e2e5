"""Many runners, one store: tools/publish_results.py, tools/follow_results.py, the dashboard's
"results updated" line, the compose follower and the benchmark workflow.

No network: "origin" is a local bare repository, each simulated GPU runner a clone of it with
its own results/ (fake asv files: only their names and ``commit_hash`` matter to publishing).
Runners publish at the same moment, lined up so that their pushes really race (a barrier
before the push, or a delay between fetch and push), and the branch must end up with every
file of every runner.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from dashboard import follow_status  # noqa: E402
from tools import follow_results, publish_results  # noqa: E402
from tools.publish_results import Published, publish  # noqa: E402

BRANCH = "benchmark-results"
SHA_X = "1" * 40
SHA_Y = "2" * 40


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, f"git {' '.join(args)} in {cwd}:\n{proc.stdout}{proc.stderr}"
    return proc.stdout.strip()


@pytest.fixture(autouse=True)
def isolated_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No global or system git configuration (CI has no identity; a developer's hooks or URL
    rewrites must not matter)."""
    empty = tmp_path / "gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_TERMINAL_PROMPT", "0")
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME",
                 "GIT_COMMITTER_EMAIL", "EMAIL", publish_results.RACE_DELAY_ENV):
        monkeypatch.delenv(name, raising=False)


def make_origin(tmp_path: Path) -> Path:
    """A bare repository with one commit on main, as the project's GitHub repository."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "--bare", "--quiet", "--initial-branch=main", str(origin))
    seed = tmp_path / "seed"
    git(tmp_path, "init", "--quiet", "--initial-branch=main", str(seed))
    identity(seed)
    (seed / "README.md").write_text("safeattn\n")
    git(seed, "add", "README.md")
    git(seed, "commit", "--quiet", "-m", "first")
    git(seed, "push", "--quiet", str(origin), "main")
    return origin


def identity(repo: Path, name: str = "Test Runner") -> None:
    git(repo, "config", "user.name", name)
    git(repo, "config", "user.email", "runner@example.com")


def make_runner(tmp_path: Path, origin: Path, name: str, with_identity: bool = True) -> Path:
    runner = tmp_path / name
    git(tmp_path, "clone", "--quiet", str(origin), str(runner))
    if with_identity:
        identity(runner, name)
    return runner


def write_results(results: Path, machine: str, sha: str, benchmarks: dict) -> set[str]:
    """One machine's asv files for ``sha`` (and results/benchmarks.json); returns their
    paths relative to ``results``."""
    mdir = results / machine
    mdir.mkdir(parents=True, exist_ok=True)
    files = {
        "machine.json": {"machine": machine, "version": 1},
        f"{sha[:8]}-virtualenv-py3.11.json": {"commit_hash": sha, "results": {"x": [sha]},
                                              "version": 2},
        f"versions-{sha}.json": {"commit": sha, "machine": machine},
    }
    for name, content in files.items():
        (mdir / name).write_text(json.dumps(content, indent=2))
    (results / "benchmarks.json").write_text(json.dumps(benchmarks, indent=4))
    return {f"{machine}/{name}" for name in files}


def branch_files(origin: Path, ref: str = BRANCH) -> dict[str, bytes]:
    """Every file of the branch: path -> content."""
    names = git(origin, "ls-tree", "-r", "--name-only", ref).splitlines()
    return {
        n: subprocess.run(["git", "show", f"{ref}:{n}"], cwd=origin, capture_output=True,
                          check=True).stdout
        for n in names
    }


def assert_branch_holds(origin: Path, runners: dict[Path, set[str]]) -> dict[str, bytes]:
    """Every file each runner published is on the branch, byte for byte, under results/."""
    on_branch = branch_files(origin)
    assert {p.split("/", 1)[0] for p in on_branch} == {"results"}, sorted(on_branch)
    for runner, files in runners.items():
        for rel in files:
            assert f"results/{rel}" in on_branch, f"{rel} of {runner.name} is missing"
            assert on_branch[f"results/{rel}"] == (runner / "results" / rel).read_bytes(), rel
    return on_branch


# ---------------------------------------------------------------------- publishing


def test_two_runners_publish_at_once_and_the_branch_holds_both(tmp_path: Path) -> None:
    """Two machines, one commit (HEAD, the workflow's case), the branch not there yet: both
    publish as the workflow does, started together, each waiting between fetch and push,
    so one push is rejected and that runner retries on the other's tip."""
    origin = make_origin(tmp_path)
    head = git(origin, "rev-parse", "main")
    runners = {}
    for name, machine, benches in (
        ("runner-h100", "nvidia-h100-80gb-hbm3", {"speed.A": {"n": 1}, "shared.S": {"v": 1}}),
        ("runner-h200", "nvidia-h200", {"memory.B": {"n": 2}, "shared.S": {"v": 1}}),
    ):
        runner = make_runner(tmp_path, origin, name)
        runners[runner] = write_results(runner / "results", machine, head, benches)
    env = {**os.environ, publish_results.RACE_DELAY_ENV: "1.5"}
    command = [sys.executable, str(REPO / "tools" / "publish_results.py"), "--remote", "origin",
               "--branch", BRANCH, "--backoff-s", "0.1"]
    procs = [subprocess.Popen(command, cwd=r, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in runners]
    outputs = [p.communicate(timeout=60)[0] for p in procs]
    for proc, out in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, out
    both = "\n".join(outputs)
    assert "push rejected" in both and "attempt 2/" in both, both
    on_branch = assert_branch_holds(origin, runners)
    benchmarks = json.loads(on_branch["results/benchmarks.json"])
    assert set(benchmarks) == {"speed.A", "memory.B", "shared.S"}
    # One orphan root, the other runner's commit on top of it: nothing was forced over.
    assert len(git(origin, "rev-list", "--max-parents=0", BRANCH).split()) == 1
    assert git(origin, "rev-list", "--count", BRANCH) == "2"
    for runner in runners:  # the checkout itself: HEAD, index and working tree untouched
        assert git(runner, "rev-parse", "HEAD") == head
        assert git(runner, "status", "--porcelain", "--untracked-files=no") == ""
    # Publishing again adds nothing.
    h200 = tmp_path / "runner-h200"
    again = publish(h200 / "results", "nvidia-h200", [head], repo=h200, branch=BRANCH,
                    say=lambda _: None)
    assert again.pushed is False and again.commit == git(origin, "rev-parse", BRANCH)


def test_same_machine_different_commits_race_and_the_branch_keeps_every_file(
        tmp_path: Path) -> None:
    """One machine on two runners, two commits, publishing in threads lined up just before
    the push: both built on the same tip, then one pushes, then the other pushes its now
    stale commit (a forced push would succeed and drop the first runner's files). It is
    rejected and retries on the new tip; the files and benchmarks of an earlier runner stay
    too."""
    origin = make_origin(tmp_path)
    earlier = make_runner(tmp_path, origin, "runner-old")
    earlier_files = write_results(earlier / "results", "cpu-old", SHA_X, {"old.C": {"n": 0}})
    first = publish(earlier / "results", "cpu-old", [SHA_X], repo=earlier, branch=BRANCH,
                    say=lambda _: None)
    assert first.pushed and first.attempts == 1

    machine = "nvidia-h100-80gb-hbm3"
    a, b = (make_runner(tmp_path, origin, n) for n in ("runner-a", "runner-b"))
    files = {a: write_results(a / "results", machine, SHA_X, {"speed.A": {"n": 1}}),
             b: write_results(b / "results", machine, SHA_Y, {"memory.B": {"n": 2}})}
    barrier = threading.Barrier(2, timeout=30)
    logs: dict[Path, list[str]] = {a: [], b: []}
    done: dict[Path, Published | BaseException] = {}

    def run(runner: Path, sha: str) -> None:
        def line_up(attempt: int) -> None:
            if attempt != 1:
                return
            barrier.wait()  # both have fetched and built on the same tip
            if runner == b:  # b pushes its stale commit after a's push has landed
                deadline = time.monotonic() + 30
                while git(origin, "rev-parse", BRANCH) == first.commit:
                    assert time.monotonic() < deadline, "a never pushed"
                    time.sleep(0.02)

        try:
            done[runner] = publish(runner / "results", machine, [sha], repo=runner,
                                   branch=BRANCH, backoff_s=0.05, before_push=line_up,
                                   say=logs[runner].append)
        except BaseException as exc:  # reported below, with the logs
            done[runner] = exc

    threads = [threading.Thread(target=run, args=(a, SHA_X)),
               threading.Thread(target=run, args=(b, SHA_Y))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    results = {r: done.get(r) for r in (a, b)}
    assert all(isinstance(r, Published) for r in results.values()), (results, logs)
    assert (results[a].attempts, results[b].attempts) == (1, 2), logs
    assert any("push rejected" in line for lines in logs.values() for line in lines), logs
    on_branch = assert_branch_holds(origin, {earlier: earlier_files, **files})
    assert set(json.loads(on_branch["results/benchmarks.json"])) == {"old.C", "speed.A",
                                                                     "memory.B"}
    tip = git(origin, "rev-parse", BRANCH)
    git(origin, "merge-base", "--is-ancestor", first.commit, tip)  # fast-forwards only
    assert git(origin, "rev-list", "--count", BRANCH) == "3"


def test_a_push_that_keeps_failing_stops_with_a_clear_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    origin = make_origin(tmp_path)
    hook = origin / "hooks" / "pre-receive"
    hook.write_text("#!/bin/sh\necho 'results branch is frozen' >&2\nexit 1\n")
    hook.chmod(0o755)
    runner = make_runner(tmp_path, origin, "runner")
    write_results(runner / "results", "nvidia-h200", SHA_X, {"speed.A": {}})
    code = publish_results.main(["--results", str(runner / "results"), "--repo", str(runner),
                                 "--commit", SHA_X, "--attempts", "3", "--backoff-s", "0.01"])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert "attempt 3/3" in out and "attempt 4/" not in out, out
    assert "gave up after 3 attempts" in err and "results branch is frozen" in err, err
    assert "force" in err  # says that nothing was forced
    assert git(origin, "branch", "--list", BRANCH) == ""


def test_bad_input_is_reported_clearly(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    origin = make_origin(tmp_path)
    runner = make_runner(tmp_path, origin, "runner")
    results = runner / "results"

    def run(*args: str) -> str:
        code = publish_results.main(["--repo", str(runner), "--results", str(results), *args])
        err = capsys.readouterr().err
        assert code == 2, err
        return err

    assert f"no results directory {results}" in run("--commit", SHA_X)
    write_results(results, "nvidia-h200", SHA_X, {})
    assert "machines there: nvidia-h200" in run("--machine", "nvidia-h100", "--commit", SHA_X)
    assert "no result file for commit 22222222" in run("--machine", "nvidia-h200",
                                                       "--commit", SHA_Y)
    assert "no machine" in run("--commit", SHA_Y)  # which machine measured it?
    assert "not a commit" in run("--commit", "no-such-revision")
    assert git(origin, "branch", "--list", BRANCH) == ""


def test_all_commits_backfills_one_machine(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    origin = make_origin(tmp_path)
    runner = make_runner(tmp_path, origin, "runner")
    results = runner / "results"
    files = write_results(results, "nvidia-h200", SHA_X, {"speed.A": {}})
    files |= write_results(results, "nvidia-h200", SHA_Y, {"speed.A": {}})
    write_results(results, "nvidia-h100", SHA_Y, {"speed.A": {}})  # another machine: not sent
    args = ["--repo", str(runner), "--results", str(results), "--all-commits"]
    assert publish_results.main(args) == 2
    assert "--all-commits needs --machine" in capsys.readouterr().err
    assert publish_results.main([*args, "--machine", "nvidia-h200"]) == 0
    on_branch = assert_branch_holds(origin, {runner: files})
    assert not any("nvidia-h100" in p for p in on_branch), sorted(on_branch)
    subject = git(origin, "log", "-1", "--format=%s", BRANCH)
    assert subject == "results: nvidia-h200 11111111 22222222", subject


def test_a_runner_without_a_git_identity_commits_as_the_publisher(tmp_path: Path) -> None:
    origin = make_origin(tmp_path)
    runner = make_runner(tmp_path, origin, "runner", with_identity=False)
    write_results(runner / "results", "nvidia-h200", SHA_X, {})
    publish(runner / "results", "nvidia-h200", [SHA_X], repo=runner, branch=BRANCH,
            say=lambda _: None)
    name, email = publish_results.FALLBACK_IDENTITY
    assert git(origin, "log", "-1", "--format=%an <%ae>", BRANCH) == f"{name} <{email}>"
    assert git(origin, "log", "-1", "--format=%s", BRANCH) == "results: nvidia-h200 11111111"


def test_the_union_is_the_runners_rule(tmp_path: Path) -> None:
    """benchmarks.json on the branch follows tools/runner/results.merge_benchmarks_json."""
    from tools.runner.results import merge_benchmarks_json

    ours = {"a": {"v": "ours"}, "b": {"v": "ours"}, "version": 2}
    theirs = {"b": {"v": "theirs"}, "c": {"v": "theirs"}, "version": 2}
    path = tmp_path / "benchmarks.json"
    path.write_text(json.dumps(ours))
    merge_benchmarks_json(path, theirs)
    assert publish_results.union_benchmarks(ours, theirs) == json.loads(path.read_text())
    assert publish_results.union_benchmarks(ours, theirs)["b"] == {"v": "ours"}


# ---------------------------------------------------------------------- following


def published_origin(tmp_path: Path) -> tuple[Path, Path]:
    """An origin whose results branch holds one H200 commit; and that runner."""
    origin = make_origin(tmp_path)
    runner = make_runner(tmp_path, origin, "runner-h200")
    write_results(runner / "results", "nvidia-h200", SHA_X, {"speed.A": {}})
    publish(runner / "results", "nvidia-h200", [SHA_X], repo=runner, branch=BRANCH,
            say=lambda _: None)
    return origin, runner


def served_files(dest: Path) -> dict[str, bytes]:
    return {str(p.relative_to(dest)): p.read_bytes() for p in dest.rglob("*") if p.is_file()}


def test_the_follower_updates_the_served_dir_and_writes_its_status(tmp_path: Path) -> None:
    origin, _ = published_origin(tmp_path)
    dest, git_dir = tmp_path / "served", tmp_path / "follow.git"
    first = follow_results.follow_once(str(origin), BRANCH, dest, git_dir)
    assert first is not None and first.written[0] == "benchmarks.json"
    status = json.loads((dest / follow_results.STATUS_NAME).read_text())
    assert status["commit"] == git(origin, "rev-parse", BRANCH)
    assert status["branch"] == BRANCH and status["written"] == 4
    age = datetime.datetime.now(datetime.timezone.utc) - datetime.datetime.fromisoformat(
        status["updated_at"])
    assert abs(age.total_seconds()) < 60
    expected = {p.removeprefix("results/"): c for p, c in branch_files(origin).items()}
    expected[follow_results.STATUS_NAME] = (dest / follow_results.STATUS_NAME).read_bytes()
    assert served_files(dest) == expected

    # Nothing new: nothing is written, not even the status (the dashboard's cache key).
    before = {p: p.stat().st_mtime_ns for p in dest.rglob("*")}
    assert follow_results.follow_once(str(origin), BRANCH, dest, git_dir) is None
    assert {p: p.stat().st_mtime_ns for p in dest.rglob("*")} == before

    # Another machine publishes: only its files (and the union) are written; the H200's
    # unchanged files keep their inode (never rewritten).
    kept = dest / "nvidia-h200" / "machine.json"
    inode = kept.stat().st_ino
    other = make_runner(tmp_path, origin, "runner-h100")
    write_results(other / "results", "nvidia-h100", SHA_Y, {"memory.B": {}})
    publish(other / "results", "nvidia-h100", [SHA_Y], repo=other, branch=BRANCH,
            say=lambda _: None)
    second = follow_results.follow_once(str(origin), BRANCH, dest, git_dir)
    assert second is not None
    assert sorted(second.written) == sorted(
        ["benchmarks.json", *(f"nvidia-h100/{n}" for n in (
            "machine.json", "22222222-virtualenv-py3.11.json", f"versions-{SHA_Y}.json"))])
    assert kept.stat().st_ino == inode
    assert set(json.loads((dest / "benchmarks.json").read_text())) == {"speed.A", "memory.B"}

    # A file deleted on the branch goes from the served dir too; no temporary file is left.
    editor = tmp_path / "editor"
    git(tmp_path, "clone", "--quiet", "--branch", BRANCH, str(origin), str(editor))
    identity(editor)
    git(editor, "rm", "--quiet", f"results/nvidia-h100/versions-{SHA_Y}.json")
    git(editor, "commit", "--quiet", "-m", "drop a sidecar")
    git(editor, "push", "--quiet", "origin", BRANCH)
    third = follow_results.follow_once(str(origin), BRANCH, dest, git_dir)
    assert third is not None and third.removed == [f"nvidia-h100/versions-{SHA_Y}.json"]
    assert not (dest / "nvidia-h100" / f"versions-{SHA_Y}.json").exists()
    assert not list(dest.rglob(f"*{follow_results.TMP_SUFFIX}"))
    assert json.loads((dest / follow_results.STATUS_NAME).read_text())["removed"] == 1


def test_the_status_never_shows_a_token() -> None:
    assert (follow_results.redact("https://x-access-token:s3cr3t@github.com/o/r.git")
            == "https://github.com/o/r.git")
    assert follow_results.redact("https://s3cr3t@host:8443/r.git") == "https://host:8443/r.git"
    assert follow_results.redact("/srv/safeattn.git") == "/srv/safeattn.git"


def compose_value(value: object) -> str:
    """A compose environment value with ``${VAR:-default}`` filled in as Compose does."""
    return re.sub(r"\$\{(\w+):-([^}]*)\}", lambda m: os.environ.get(m[1]) or m[2], str(value))


def test_the_compose_follower_runs_its_command_and_shares_the_dashboards_results(
        tmp_path: Path) -> None:
    """The results-follower service: opt-in (profile), writes the directory the dashboard
    reads, and its exact command, run here from the repository root with Docker's mappings
    translated (remote, mounts, interval), follows a branch and stops cleanly on SIGTERM."""
    services = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    follower, dashboard = services["results-follower"], services["dashboard"]
    assert follower["profiles"] == ["follow"] and "profiles" not in dashboard
    env = follower["environment"]
    target = dashboard["environment"]["SAFEATTN_RESULTS"]
    assert env["SAFEATTN_RESULTS"] == target
    source = next(v.split(":/")[0] for v in dashboard["volumes"] if f":{target}:" in v)
    assert f"{source}:{target}" in follower["volumes"]  # the same directory, writable
    assert "SAFEATTN_FOLLOW_INTERVAL_S" in env and "SAFEATTN_FOLLOW_REMOTE" in env
    script = follower["command"][-1]
    dockerfile = (REPO / follower["build"]["dockerfile"]).read_text()
    assert f"COPY {script} {script}" in dockerfile

    origin, _ = published_origin(tmp_path)
    dest = tmp_path / "served"
    run_env = {**os.environ, **{k: compose_value(v) for k, v in env.items()},
               "SAFEATTN_FOLLOW_REMOTE": str(origin), "SAFEATTN_RESULTS": str(dest),
               "SAFEATTN_FOLLOW_GIT_DIR": str(tmp_path / "follow.git"),
               "SAFEATTN_FOLLOW_INTERVAL_S": "0.2"}
    run_env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), run_env["PATH"]])
    proc = subprocess.Popen(follower["command"], cwd=REPO, env=run_env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (dest / follow_results.STATUS_NAME).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)  # a few more intervals: "up to date"
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, out
    assert "up to date" in out, out
    assert (dest / "nvidia-h200" / f"versions-{SHA_X}.json").exists(), out


# ---------------------------------------------------------------------- the dashboard


def test_follower_and_dashboard_name_the_status_file_alike() -> None:
    assert follow_status.STATUS_NAME == follow_results.STATUS_NAME
    assert follow_status.STATUS_SCHEMA == follow_results.STATUS_SCHEMA


def test_the_dashboard_says_when_the_results_were_updated(tmp_path: Path) -> None:
    from streamlit.testing.v1 import AppTest

    from dashboard import data

    def sidebar_captions(results: Path) -> str:
        at = AppTest.from_file(str(REPO / "dashboard" / "app.py"), default_timeout=120)
        at.session_state["results_dir"] = str(results)
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return "\n".join(c.value for c in at.sidebar.caption)

    plain = tmp_path / "plain"
    plain.mkdir()
    assert "Results updated" not in sidebar_captions(plain)

    followed = tmp_path / "followed"
    followed.mkdir()
    updated = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=5)
    status = {"schema": follow_results.STATUS_SCHEMA, "branch": BRANCH, "commit": SHA_Y,
              "updated_at": updated.isoformat(timespec="seconds")}
    (followed / follow_status.STATUS_NAME).write_text(json.dumps(status))
    shown = sidebar_captions(followed)
    assert "Results updated" in shown and "(5 min ago)" in shown, shown
    assert f"`{BRANCH}` at `22222222`" in shown and updated.strftime("%H:%M UTC") in shown
    # The status file is no machine's results: the index neither uses nor complains about it.
    index = data.index_results(followed)
    assert index.files.empty and not index.problems
    # A foreign or broken file shows nothing rather than an error.
    (followed / follow_status.STATUS_NAME).write_text("{not json")
    assert follow_status.read_status(followed) is None
    assert follow_status.describe({"updated_at": "yesterday"}) is None


# ---------------------------------------------------------------------- the workflow


def test_the_benchmark_workflow_runs_every_gpu_and_publishes() -> None:
    workflow = yaml.safe_load((REPO / ".github" / "workflows" / "benchmark.yml").read_text())
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert triggers["push"]["branches"] == ["main"] and "workflow_dispatch" in triggers
    assert workflow["permissions"]["contents"] == "write"
    (job,) = workflow["jobs"].values()
    runners = job["strategy"]["matrix"]["runner"]
    assert len(runners) >= 2 and all({"self-hosted", "gpu"} <= set(r) for r in runners), runners
    assert len({tuple(r) for r in runners}) == len(runners)
    assert job["runs-on"] == "${{ matrix.runner }}"
    assert job["strategy"]["fail-fast"] is False
    assert job["concurrency"]["cancel-in-progress"] is False
    assert "matrix.runner" in job["concurrency"]["group"]  # one group per GPU kind
    steps = job["steps"]
    checkout = next(s for s in steps if str(s.get("uses", "")).startswith("actions/checkout"))
    assert checkout["with"]["fetch-depth"] == 0
    runs = [str(s.get("run", "")) for s in steps]
    bench = next(i for i, r in enumerate(runs) if "tools/run.py" in r)
    publish_at = next(i for i, r in enumerate(runs) if "tools/publish_results.py" in r)
    assert bench < publish_at
    assert 'tools/run.py --range "${GITHUB_SHA}^!" --skip-existing --suite gpu' in runs[bench]
    assert "--remote origin --branch benchmark-results" in runs[publish_at]
    for line in "\n".join(runs).splitlines():  # the runner's own CUDA torch, no download
        if "pip install" in line:
            assert not any(w in line for w in ("torch", "triton", "nvidia", "index-url")), line
    # The commands exist with these options: run.py's --help, publish's own parser.
    help_text = subprocess.run([sys.executable, str(REPO / "tools" / "run.py"), "--help"],
                               cwd=REPO, capture_output=True, text=True, timeout=120).stdout
    assert all(opt in help_text for opt in ("--range", "--skip-existing", "--suite")), help_text
    publish_args = runs[publish_at].split("tools/publish_results.py", 1)[1].split()
    parsed = publish_results.build_parser().parse_args(
        [a.replace('"${GITHUB_SHA}"', SHA_X) for a in publish_args])
    assert (parsed.remote, parsed.branch) == ("origin", "benchmark-results")
