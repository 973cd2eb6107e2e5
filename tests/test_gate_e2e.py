"""End to end: the merge gate on real asv runs of the real CPU-capable suite.

In a temporary clone of this repository (plus any uncommitted changes of the working tree,
so a developer tests what they see; a no-op on CI's fresh checkout) the fixture commits
three heads on top of the base:

- ``same``: an unrelated change (README) — the gate must not raise a false alarm;
- ``slow``: ``safeattn.attention`` runs the forward kernel five times per call — the
  interpreter speed benchmark must be a significant regression;
- ``nan``: ``safeattn.attention`` returns a NaN-poisoned output — the interpreter numerics
  benchmark must report a non-finite rate above 0, a failure whatever the base.

Then it measures base and heads for real with ``tools/run.py --same`` (asv
``--python=same``, each commit imported from its own git worktree), only the two
benchmarks involved (``--bench``), and runs ``safeattn-gate`` on the results. Corrupt and
missing result files must give exit 2.

The gate runs with the packaged policy except for the speed ratio threshold, raised to
:data:`E2E_SPEED_MAX_RATIO`: the interpreter benchmark times wall-clock on a CPU, and on a
shared two-core machine busy with other work, the same code measured a few minutes apart
was seen up to 3.8x apart (timing the process's CPU time instead would remove most of
that). The test checks the pipeline (real asv runs, loading, statistics, verdicts, exit
codes); the GPU A/A measurement decides the production threshold.

Cost: one interpreter speed grid (5 samples) and four entries of the quick numerics grid
(:data:`NUMERICS_ONLY`) per commit, four commits.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from regress.gate import main as gate_main

pytest.importorskip("asv", reason="the end-to-end gate test runs real asv (.[bench] extra)")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))  # the benchmarks package lives at the repository root

from benchmarks._grid import ONLY_ENV  # noqa: E402

# The slow head is ~5x slower. A/A runs on an idle CPU stay well within 2x; a machine busy
# with other work can still push one run further (see the module docstring).
E2E_SPEED_MAX_RATIO = 2.0
SPEED = "speed.InterpreterSpeedSuite.track_forward_ms"
NUMERICS = "numerics.InterpreterNumericsSuite.track_nonfinite_rate"
# The numerics grid's entries measured (asv's form: family, impl, dtype), through
# $SAFEATTN_BENCH_ONLY as `safeattn-gate --confirm` narrows a grid; the others are NaN on
# every commit alike (not comparable, never blocking). Both impls of two families, one
# dtype: the headline empty-row family, and one where the peer is non-finite on every
# commit (context: it must not block). The whole grid cost ~80 s per commit on 2 cores.
NUMERICS_ONLY = [r"^\('(leftpad_causal|nan_in_excluded_kv)', '(safeattn|sdpa_math)', 'bfloat16'\)$"]

SLOW_PATCH = '''

# gate end-to-end test: a slower kernel. Every call runs the forward kernel five times and
# discards the first four results.
_fast_attention = attention


def attention(q, k, v, **kwargs):
    for _ in range(4):
        _fast_attention(q.detach(), k.detach(), v.detach(), **kwargs)
    return _fast_attention(q, k, v, **kwargs)
'''

NAN_PATCH = '''

# gate end-to-end test: a kernel that returns non-finite values.
_finite_attention = attention


def attention(q, k, v, **kwargs):
    result = _finite_attention(q, k, v, **kwargs)
    if isinstance(result, tuple):
        return (result[0] + float("nan"), *result[1:])
    return result + float("nan")
'''

HEADS = {
    "same": ("README.md", "\n<!-- gate end-to-end test: an unrelated change -->\n"),
    "slow": ("safeattn/api.py", SLOW_PATCH),
    "nan": ("safeattn/api.py", NAN_PATCH),
}


def _git(cwd: Path, *args: str, env: dict | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {cwd}:\n{proc.stderr}")
    return proc.stdout.strip()


def _clone_with_working_tree(dest: Path, env: dict) -> str:
    """Clone REPO, carry its uncommitted changes over as one commit; return the base sha."""
    _git(REPO.parent, "clone", "-q", str(REPO), str(dest), env=env)
    tracked_and_new = _git(REPO, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for rel in filter(None, tracked_and_new.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    for rel in filter(None, _git(REPO, "ls-files", "-z", "--deleted").split("\0")):
        (dest / rel).unlink(missing_ok=True)
    _git(dest, "add", "-A", env=env)
    _git(dest, "commit", "-q", "--allow-empty", "-m", "e2e base: working tree", env=env)
    return _git(dest, "rev-parse", "HEAD")


def _measure(clone: Path, sha: str, results: Path, env: dict) -> None:
    """The two benchmarks, for real, on one commit (tools/run.py --same)."""
    runs = [
        # 5 timing samples (run.py records them): Mann-Whitney
        (["--bench", SPEED], env),
        # one trial per entry (a rate is a rate), of the entries NUMERICS_ONLY selects
        (["--bench", NUMERICS, "--quick"], {**env, ONLY_ENV: json.dumps(NUMERICS_ONLY)}),
    ]
    for extra, run_env in runs:
        cmd = [sys.executable, "tools/run.py", "--same", "--range", sha,
               "--results", str(results), *extra]
        proc = subprocess.run(cmd, cwd=clone, env=run_env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(
                f"{' '.join(cmd)} failed ({proc.returncode}):\n"
                f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
            )


@pytest.fixture(scope="module")
def e2e(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate_e2e")
    (root / "home").mkdir()
    # A private HOME: asv registers machines in ~/.asv-machine.json.
    env = {**os.environ, "HOME": str(root / "home"), "GIT_AUTHOR_NAME": "e2e",
           "GIT_AUTHOR_EMAIL": "e2e@example.com", "GIT_COMMITTER_NAME": "e2e",
           "GIT_COMMITTER_EMAIL": "e2e@example.com"}
    env.pop("TRITON_INTERPRET", None)  # the CPU suites set it themselves
    started = time.monotonic()
    clone = root / "clone"
    base = _clone_with_working_tree(clone, env)
    shas = {"base": base}
    for name, (rel, addition) in HEADS.items():
        _git(clone, "checkout", "-q", "--detach", base, env=env)
        with open(clone / rel, "a", encoding="utf-8") as f:
            f.write(addition)
        _git(clone, "commit", "-q", "-am", f"e2e {name}", env=env)
        shas[name] = _git(clone, "rev-parse", "HEAD")
    # The suite itself is the base's for every commit (asv benchmarks old commits with
    # the current suite).
    _git(clone, "checkout", "-q", "--detach", base, env=env)
    results = root / "results"
    for sha in shas.values():
        _measure(clone, sha, results, env)
    print(f"\n[gate e2e] 4 commits measured in {time.monotonic() - started:.0f} s")
    policy = root / "e2e_policy.toml"
    policy.write_text(f"[speed]\nmax_ratio = {E2E_SPEED_MAX_RATIO}\n")
    return results, shas, policy


def _gate(capsys, e2e, base: str, head: str, *extra: str) -> tuple[int, str, str]:
    results, _, policy = e2e
    args = ["--results", str(results), "--base", base, "--head", head, "--policy", str(policy)]
    code = gate_main([*args, *extra])
    out, err = capsys.readouterr()
    with capsys.disabled():  # the report, for whoever reads the CI log (JSON is too long)
        shown = "" if "json" in extra else out
        print(f"\n$ safeattn-gate {' '.join(args + list(extra))}  -> exit {code}\n{shown}{err}")
    return code, out, err


def _blocking(capsys, e2e, base: str, head: str) -> tuple[int, list[dict]]:
    code, out, err = _gate(capsys, e2e, base, head, "--format", "json")
    if code == 2:
        raise AssertionError(f"gate data error: {err}")
    rows = json.loads(out)["rows"]
    return code, [r for r in rows if r["verdict"] in ("regression", "failure", "missing")]


def test_unchanged_head_passes(e2e, capsys):
    _, shas, _ = e2e
    code, blocking = _blocking(capsys, e2e, shas["base"], shas["same"])
    assert (code, blocking) == (0, [])
    code, out, _ = _gate(capsys, e2e, shas["base"], shas["same"], "--format", "markdown")
    assert code == 0 and out.startswith("## safeattn-gate: ✅ PASS")


def test_slower_kernel_is_a_significant_regression(e2e, capsys):
    _, shas, _ = e2e
    code, blocking = _blocking(capsys, e2e, shas["base"], shas["slow"])
    assert code == 1
    assert {r["benchmark"] for r in blocking} == {SPEED}, blocking
    assert {r["impl"] for r in blocking} == {"safeattn"}
    for row in blocking:
        assert row["verdict"] == "regression" and row["significant"] is True, row
        assert row["test"] == "mann-whitney" and row["ratio"] > E2E_SPEED_MAX_RATIO, row
    code, out, _ = _gate(capsys, e2e, shas["base"], shas["slow"], "--format", "markdown")
    assert code == 1 and out.startswith("## safeattn-gate: ❌ FAIL") and SPEED in out


def test_nonfinite_kernel_is_a_failure(e2e, capsys):
    _, shas, _ = e2e
    code, blocking = _blocking(capsys, e2e, shas["base"], shas["nan"])
    assert code == 1
    assert {r["benchmark"] for r in blocking} == {NUMERICS}, blocking
    assert {r["impl"] for r in blocking} == {"safeattn"}
    assert all(r["verdict"] == "failure" and r["head_value"] > 0 for r in blocking)
    code, out, _ = _gate(capsys, e2e, shas["base"], shas["nan"])
    assert code == 1 and NUMERICS in out


def test_corrupt_and_missing_results_give_exit_2(e2e, tmp_path, capsys):
    results, shas, policy = e2e
    copy = Path(shutil.copytree(results, tmp_path / "results"))
    damaged = (copy, shas, policy)
    (machine,) = [p for p in copy.iterdir() if p.is_dir()]
    head_file = next(machine.glob(f"{shas['slow'][:8]}-*.json"))
    head_file.write_text(head_file.read_text()[: len(head_file.read_text()) // 2])
    code, _, err = _gate(capsys, damaged, shas["base"], shas["slow"])
    assert code == 2 and head_file.name in err
    head_file.unlink()
    code, _, err = _gate(capsys, damaged, shas["base"], shas["slow"])
    assert code == 2 and "no results for commit" in err
    code, _, err = _gate(capsys, (tmp_path / "absent", shas, policy), shas["base"], shas["slow"])
    assert code == 2 and "does not exist" in err
