r"""``safeattn-gate --confirm`` for real, in one command: a planted slowdown must be
confirmed and a planted false alarm cleared.

    python tools/confirm_demo.py --log docs/perf/confirm_demo_h100_<date>.log
    python tools/confirm_demo.py --log /tmp/demo.log --target cpu --rounds 1  # no GPU

Not an asv suite (asv imports every module here, so nothing beyond the standard library is
imported at module level).

In a temporary clone of this checkout's HEAD (uncommitted changes are not carried over) it
makes two scratch commits on top of HEAD (the *base*), which never leave the clone:

- *slow*: ``safeattn.attention`` launches the forward kernel once more per call and discards
  the result (``safeattn/api.py``, like tests/test_gate_e2e.py's slow head): a real slowdown
  of the measured row, about 2x in forward time.
- *same*: an empty commit, so its ``safeattn/`` and ``benchmarks/`` trees are the base's.

The slowdown is in ``safeattn/`` because ``run.py --same`` measures every commit with the
checkout's own ``benchmarks/`` (asv imports the suite from its ``benchmark_dir``; only the
package comes from each commit's worktree): a benchmark edited in a head commit would not
be measured at all.

Then it measures one safeattn row (:data:`TARGETS`: on a GPU, SpeedSuite's forward time at
fp16, D=64, N=1024, non-causal, no GQA) for base, same and slow with the gate's own measurer
(``regress.confirm.run_py_measurer``: ``run.py --same --range SHA --bench RE``, one
fresh process each), scales the samples of that row in *same*'s result file to ``--plant``
times base's (on a GPU 1.2: a 20 % false alarm), and runs ``safeattn-gate`` (a fresh process
each):

1. base -> slow, then base -> slow ``--confirm``: exit 1 both times (confirmed);
2. base -> same before the plant (exit 0: a real A/A pair), after it (exit 1: the false
   alarm is flagged) and after it with ``--confirm``: exit 0 (cleared by the re-run).

Every command, the gate's reports and its ``[confirm]`` lines go to ``--log``; a short table
of the five gate runs comes last on stdout (and in the log). Exit 0 when every gate run
exited as expected, 1 otherwise, 2 when the demo itself could not run.

Cost: 3 measurements, then 2 x 2 x ``--rounds`` (default 3) more by ``--confirm``: 15
``run.py`` processes of one combination each. Not yet timed on a GPU; ``--rounds 2`` (both
pairs must block) saves four.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GIT_IDENTITY = ["-c", "user.name=confirm-demo", "-c", "user.email=confirm-demo@localhost"]

SLOW_PATCH = """

# confirm_demo.py's scratch commit (a temporary clone; never pushed): every call launches
# the forward kernel once more and discards its result, a real extra kernel launch.
_attention_once = attention


def attention(q, k, v, **kwargs):
    _attention_once(q.detach(), k.detach(), v.detach(), **kwargs)
    return _attention_once(q, k, v, **kwargs)
"""


@dataclass(frozen=True)
class Target:
    """One safeattn row to measure: its asv benchmark and parameters, in the suite's
    ``param_names`` order (the gate's selection regexes are built from them), and how much
    slower the false alarm's samples are made (``plant``)."""

    benchmark: str
    params: dict
    plant: float


TARGETS: dict[str, Target] = {
    "gpu": Target(
        "speed.SpeedSuite.track_forward_ms",
        {
            "impl": "safeattn",
            "dtype": "float16",
            "head_dim": 64,
            "seq_len": 1024,
            "causal": False,
            "gqa": 1,
        },
        plant=1.2,  # the "one row slowed by 20 %"
    ),
    # Triton's interpreter on a tiny shape, in CPU time: checks the demo without a GPU. Its
    # 5 samples of one shared CPU move by up to 1.3x between runs of the same code (seen on
    # 2 cores), so only a 2x false alarm is flagged there.
    "cpu": Target(
        "speed.InterpreterSpeedSuite.track_forward_ms",
        {"impl": "safeattn", "causal": False},
        plant=2.0,
    ),
}

# The gate runs, in order: (case, base, head, --confirm, planted, expected exit code).
RUNS: tuple[tuple[str, str, str, bool, bool, int], ...] = (
    ("planted slowdown", "base", "slow", False, False, 1),
    ("planted slowdown", "base", "slow", True, False, 1),
    ("A/A pair", "base", "same", False, False, 0),
    ("planted false alarm", "base", "same", False, True, 1),
    ("planted false alarm", "base", "same", True, True, 0),
)


class Log:
    """Lines to the log file (everything) and, with ``echo``, to stdout too."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = path.open("w", encoding="utf-8")

    def __call__(self, text: str, echo: bool = True) -> None:
        self.file.write(text.rstrip("\n") + "\n")
        self.file.flush()
        if echo:
            print(text.rstrip("\n"), flush=True)


class DemoError(Exception):
    """The demo itself could not run (git, a measurement, an unexpected result file): exit 2."""


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(
        ["git", *GIT_IDENTITY, *args], cwd=cwd, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise DemoError(f"git {' '.join(args)} failed in {cwd}:\n{proc.stderr}")
    return proc.stdout.strip()


def make_commits(clone: Path) -> dict[str, str]:
    """base (the clone's HEAD), same (empty commit on base) and slow (:data:`SLOW_PATCH` on
    base) -> {name: sha}; leaves the clone's working tree at base (its benchmarks/ measure
    every commit)."""
    shas = {"base": git(clone, "rev-parse", "HEAD")}
    git(clone, "commit", "-q", "--allow-empty", "-m", "confirm demo: same trees as base")
    shas["same"] = git(clone, "rev-parse", "HEAD")
    git(clone, "checkout", "-q", "--detach", shas["base"])
    with open(clone / "safeattn" / "api.py", "a", encoding="utf-8") as f:
        f.write(SLOW_PATCH)
    git(clone, "commit", "-q", "-am", "confirm demo: one extra forward launch per call")
    shas["slow"] = git(clone, "rev-parse", "HEAD")
    git(clone, "checkout", "-q", "--detach", shas["base"])
    # asv.conf.json names the branch "main"; a clone of another branch's checkout lacks it
    # (asv: "Unknown branch main in configuration").
    git(clone, "branch", "-f", "main", shas["base"])
    return shas


def plant_slowdown(
    result_file: Path, benchmark: str, factor: float, base_file: Path | None = None
) -> int:
    """Make every measured combination of ``benchmark`` in an asv result file ``factor``
    times slower: value, 99 % CI, quartiles and every sample (what the gate's tests read).
    With ``base_file``, ``factor`` times the *base's* value instead of its own: the head of
    an A/A pair can come out faster than its base (on an H100, 2026-11-25, the base's first
    process measured 7 % slower than every later one), and a plain 1.2x then stayed under the
    policy's 1.15x. Returns how many combinations were changed (NaN/null entries, here or in
    the base: not measured, left)."""
    data = json.loads(result_file.read_text())
    columns = data["result_columns"]
    row = data["results"][benchmark]
    fields = dict(zip(columns, row, strict=False))
    base_values = None
    if base_file is not None:
        base = json.loads(base_file.read_text())
        base_fields = dict(zip(base["result_columns"], base["results"][benchmark], strict=False))
        base_values = base_fields["result"]
    scaled = 0
    for i, value in enumerate(fields["result"]):
        if not isinstance(value, (int, float)) or value != value:  # null or NaN
            continue
        scale = factor
        if base_values is not None:
            ref = base_values[i]
            if not isinstance(ref, (int, float)) or ref != ref or value == 0:
                continue
            scale = factor * ref / value
        scaled += 1
        for key in ("result", "stats_ci_99_a", "stats_ci_99_b", "stats_q_25", "stats_q_75"):
            values = fields.get(key)
            if values is not None and values[i] is not None:
                values[i] = values[i] * scale
        samples = fields.get("samples")
        if samples is not None and samples[i] is not None:
            samples[i] = [s * scale for s in samples[i]]
    data["results"][benchmark] = [fields.get(c) for c in columns[: len(row)]]
    result_file.write_text(json.dumps(data))
    return scaled


def result_file_of(results: Path, sha: str) -> Path:
    """The one asv result file of ``sha`` under ``results/<machine>/``."""
    found = sorted(results.glob(f"*/{sha[:8]}-*.json"))
    if len(found) != 1:
        raise DemoError(f"expected one result file of {sha[:8]}, found {found}")
    return found[0]


def confirm_lines(stderr: str) -> list[str]:
    """The gate's verdicts on re-measured rows, shortened from its ``[confirm] CONFIRMED:
    <row>: blocked in 3/3 pairs: 2.010× p=3e-11, ...`` lines to ``CONFIRMED (blocked in 3/3
    pairs: 2.010× p=3e-11, ...)``."""
    found = []
    for line in stderr.splitlines():
        for outcome in ("CONFIRMED", "cleared"):
            if line.startswith(f"[confirm] {outcome}: ") and "blocked in " in line:
                found.append(f"{outcome} (blocked in {line.split('blocked in ', 1)[1]})")
    return found


def as_expected(code: int, expected: int, confirm: bool, found: str) -> bool:
    """A gate run went as planned: its exit code, and with --confirm the re-run's finding
    (exit 1 must come from a CONFIRMED row, exit 0 from a cleared one)."""
    if code != expected:
        return False
    return not confirm or ("CONFIRMED" if expected else "cleared") in found


def table(outcomes: list[tuple[str, str, int, int, bool, str]]) -> list[str]:
    """The closing table: one line per gate run."""
    lines = [f"{'case':<20} {'gate run':<28} {'exit':>4} {'want':>4}  ok   re-run found"]
    for case, run, code, expected, ok, found in outcomes:
        ok_text = "yes" if ok else "NO"
        lines.append(f"{case:<20} {run:<28} {code:>4} {expected:>4}  {ok_text:<4} {found}")
    return lines


def gate(clone: Path, results: Path, base: str, head: str, extra: list[str], log: Log):
    """``safeattn-gate`` in a fresh process, from the clone (``python -m`` imports the
    clone's safeattn, at base), with ``--repo`` the clone; its report and progress go to
    the log. Returns the CompletedProcess."""
    cmd = [sys.executable, "-m", "regress.gate", "--results", str(results),
           "--base", base, "--head", head, "--repo", str(clone), *extra]  # fmt: skip
    log(f"[demo] $ safeattn-gate {' '.join(cmd[3:])}")
    start = time.time()
    proc = subprocess.run(cmd, cwd=clone, capture_output=True, text=True, check=False)
    log(proc.stdout + proc.stderr, echo=False)
    log(f"[demo] exit {proc.returncode} in {time.time() - start:.0f} s")
    return proc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--log", type=Path, required=True, help="write the full log here")
    parser.add_argument("--rounds", type=int, default=3, help="--confirm-rounds (default 3)")
    parser.add_argument("--target", choices=sorted(TARGETS), default="gpu")
    parser.add_argument("--plant", type=float, help="false alarm's factor (default: target's)")
    parser.add_argument("--policy", type=Path, help="gate policy TOML (default: packaged)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary clone")
    args = parser.parse_args(argv)

    # This checkout's safeattn (not an installed one): the clone is made of it. Imported
    # here, not at module level: asv imports this module during discovery.
    sys.path.insert(0, str(REPO))
    import pandas as pd

    from regress.confirm import ConfirmError, run_py_measurer, selection

    log = Log(args.log.resolve())
    target = TARGETS[args.target]
    plant = args.plant or target.plant
    started = time.time()
    root = Path(tempfile.mkdtemp(prefix="safeattn-confirm-demo-"))
    log(f"[demo] {time.strftime('%Y-%m-%d %H:%M:%S %Z')}: clone of {REPO} in {root}")
    outcomes = []
    try:
        clone, results = root / "clone", root / "results"
        git(REPO.parent, "clone", "-q", str(REPO), str(clone))
        shas = make_commits(clone)
        log("[demo] commits: " + ", ".join(f"{k} {v[:10]}" for k, v in shas.items()))
        # The gate's own selection and measurer: what --confirm will run, for one row.
        row = {"benchmark": target.benchmark, "params": target.params, "param_key": "-"}
        selected = selection(pd.DataFrame([row]))
        measure = run_py_measurer(clone, log)
        for name in ("base", "same", "slow"):
            start = time.time()
            try:
                measure(shas[name], selected, results)
            except ConfirmError as exc:
                raise DemoError(str(exc)) from exc
            log(f"[demo] measured {name} {shas[name][:8]} in {time.time() - start:.0f} s")

        policy = ["--policy", str(args.policy.resolve())] if args.policy else []
        for case, base, head, confirm, planted, expected in RUNS:
            if planted and not any(o[0] == case for o in outcomes):  # once, before its 1st run
                n = plant_slowdown(
                    result_file_of(results, shas["same"]), target.benchmark, plant,
                    base_file=result_file_of(results, shas["base"]),
                )  # fmt: skip
                log(f"[demo] planted: {target.benchmark} of same at {plant}x base ({n} combo)")
                if n != 1:
                    raise DemoError(f"expected to plant in one combination, not {n}")
            extra = policy + ["--confirm", "--confirm-rounds", str(args.rounds)] * confirm
            log(f"\n[demo] {case}: expecting exit {expected}")
            proc = gate(clone, results, shas[base], shas[head], extra, log)
            run = f"{base} -> {head}" + (" --confirm" if confirm else "")
            found = "; ".join(confirm_lines(proc.stderr)) or "-"
            ok = as_expected(proc.returncode, expected, confirm, found)
            outcomes.append((case, run, proc.returncode, expected, ok, found))
    finally:
        if args.keep:
            log(f"[demo] kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)

    log(f"\n[demo] {time.time() - started:.0f} s in all; {target.benchmark} {target.params}; "
        f"--rounds {args.rounds}; log {args.log}")  # fmt: skip
    for line in table(outcomes):
        log(line)
    return 0 if all(ok for *_, ok, _ in outcomes) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except DemoError as exc:
        print(f"[demo] error: {exc}", file=sys.stderr)
        sys.exit(2)
