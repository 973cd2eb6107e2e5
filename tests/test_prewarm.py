"""tools/prewarm.py warms what the chosen suites compile, and tools/run.py and
tools/gpu_history.sh pass their suite selection on (a SpeedSuite-only history on an H100
spent 171 s warming every suite's compiles against 39 s for the speed shapes alone,
docs/perf/aa_history_h100_34dc869_2026-11-26.log)."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from tools import prewarm

REPO = Path(__file__).resolve().parents[1]


def test_kinds_follow_the_suites_and_groups():
    assert prewarm.kinds_for([]) is None  # nothing named: every kind
    assert prewarm.kinds_for(["SpeedSuite"]) == ("speed",)
    assert prewarm.kinds_for(["SpeedSuite", "MemorySuite", "NumericsSuite"]) == (
        "speed",
        "numerics",
    )
    assert prewarm.kinds_for(["LiveResourcesSuite"]) == ()
    assert prewarm.kinds_for(["cpu"]) == ()
    assert set(prewarm.kinds_for(["gpu"])) == {"speed", "numerics", "model", "masked"}
    with pytest.raises(ValueError, match="unknown suite 'SpeedSuit'"):
        prewarm.kinds_for(["SpeedSuit"])


def test_every_task_kind_belongs_to_a_gpu_suite():
    from tools.runner.suites import GROUPS

    assert set(prewarm.KINDS_OF_SUITE) == set(GROUPS["gpu"])
    warmed = {kind for kinds in prewarm.KINDS_OF_SUITE.values() for kind in kinds}
    assert warmed == {"speed", "masked", "model", "numerics"}


def test_main_warms_only_the_named_suites(monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(prewarm, "run", lambda workers, kinds=None: calls.append(kinds) or 0)
    assert prewarm.main(["--workers", "2", "--suite", "MaskedSpeedSuite"]) == 0
    assert prewarm.main(["--workers", "2"]) == 0
    assert prewarm.main(["--suite", "LiveResourcesSuite"]) == 0
    assert calls == [("masked",), None]
    assert "nothing to compile ahead" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        prewarm.main(["--suite", "NoSuchSuite"])


def _fake_python(tmp_path: Path) -> tuple[dict, Path]:
    """PATH with a ``python3`` that logs its arguments (one line per call) and succeeds,
    except the pandas probe, and an ``nvidia-smi`` that prints nothing."""
    log = tmp_path / "calls.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(
        f'#!/bin/bash\necho "$*" >> "{log}"\n[ "$*" = "-c import pandas" ] && exit 1\nexit 0\n'
    )
    (bin_dir / "nvidia-smi").write_text("#!/bin/bash\nexit 0\n")
    for f in bin_dir.iterdir():
        f.chmod(f.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("SAFEATTN_PREWARM", None)
    return env, log


@pytest.mark.parametrize(
    ("args", "warm"),
    [
        (["--suite", "SpeedSuite", "--suite=NumericsSuite"],
         "-m tools.prewarm --suite SpeedSuite --suite NumericsSuite"),
        (["-s", "MaskedSpeedSuite"], "-m tools.prewarm --suite MaskedSpeedSuite"),
        ([], "-m tools.prewarm"),
        (["--bench", "^speed"], "-m tools.prewarm"),
    ],
)  # fmt: skip
def test_gpu_history_warms_what_it_measures(tmp_path, args, warm):
    env, log = _fake_python(tmp_path)
    proc = subprocess.run(
        ["bash", str(REPO / "tools" / "gpu_history.sh"), "1", *args],
        cwd=REPO, env=env, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines()
    assert [c for c in calls if "tools.prewarm" in c] == [warm]
    measured = [c for c in calls if c.startswith("tools/run.py")]
    assert len(measured) == 1 and " ".join(args) in measured[0]


def test_run_py_warms_its_gpu_suites(monkeypatch):
    import importlib

    run = importlib.import_module("tools.run")
    seen = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd[1:])
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(run.subprocess, "run", fake_run)
    run.prewarm({}, ["SpeedSuite", "ModelStepSuite"])
    assert seen == [["-m", "tools.prewarm", "--suite", "SpeedSuite", "--suite", "ModelStepSuite"]]


def test_gpu_history_hands_the_whole_range_to_one_multi_gpu_run(tmp_path):
    env, log = _fake_python(tmp_path)
    proc = subprocess.run(
        ["bash", str(REPO / "tools" / "gpu_history.sh"), "3", "--same", "--gpus", "all"],
        cwd=REPO, env={**env, "SAFEATTN_HISTORY_BUDGET_S": "600"}, capture_output=True,
        text=True,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    measured = [c for c in log.read_text().splitlines() if c.startswith("tools/run.py")]
    assert measured == [
        "tools/run.py --range HEAD~3..HEAD --skip-existing --no-prewarm --suite gpu "
        "--budget-s 600 --same --gpus all"
    ]
