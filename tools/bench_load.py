"""Load-speed benchmark of the dashboard: ``python -m tools.bench_load``.

Generates a results directory of ``--commits`` commits × ``--machines`` machines × the full
parameter grid of the asv suites, then times the overview page under Streamlit's AppTest:

- first load: a running app (modules imported) opening the directory for the first time:
  indexing, loading the commits shown, comparing, drawing — the budgeted figure;
- cold-process first load: the same in a fresh Python process, imports included;
- cached rerun: the same page again in the same session (a widget change, a revisit).

The data is GENERATED, not measured: each file is written in asv's result format from a
real ``benchmarks.json`` and a real result file as templates, with the grid of every suite
in ``benchmarks/`` (GPU suites included, read from the suite classes), values drawn
around the template's. It exercises the loader at scale; its numbers mean nothing else.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUITE_MODULES = ("speed", "memory", "numerics", "resources")
FIRST_LOAD_BUDGET_S = 3.0
CACHED_RERUN_BUDGET_S = 0.5


def suite_grid() -> dict[str, dict]:
    """benchmarks.json-style entries for every ``track_*`` of the suites in benchmarks/,
    GPU suites included (they delete themselves on a machine without CUDA: the check is
    overridden here, nothing is run)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    import importlib

    import benchmarks._env as common

    common.cuda_usable = lambda: True  # read the GPU grids on this CPU-only machine
    entries: dict[str, dict] = {}
    for module_name in SUITE_MODULES:
        module = importlib.import_module(f"benchmarks.{module_name}")
        for cls_name, cls in vars(module).items():
            if not (isinstance(cls, type) and hasattr(cls, "params")):
                continue
            for method in sorted(m for m in vars(cls) if m.startswith("track_")):
                name = f"{module_name}.{cls_name}.{method}"
                entries[name] = {
                    "name": name,
                    "type": "track",
                    "unit": getattr(getattr(cls, method), "unit", "unit"),
                    "param_names": list(cls.param_names),
                    # asv stores each parameter value as its repr
                    "params": [[repr(v) for v in values] for values in cls.params],
                    "version": hashlib.sha256(name.encode()).hexdigest(),
                }
    return entries


def template_dir(explicit: str | None) -> Path:
    """The real results to copy the format from: ``--template``, the repo's results/ if it
    holds runs, else a real CPU run of tools.sample_results."""
    if explicit:
        return Path(explicit)
    own = REPO / "results"
    if any(p.name != "machine.json" for p in own.glob("*/*.json")):
        return own
    from tools.sample_results import cached_sample_results

    return cached_sample_results()


def generate(template: Path, out: Path, commits: int, machines: int, seed: int = 0) -> int:
    """Write ``out`` (replaced); returns the number of result rows (benchmark × params)."""
    rng = random.Random(seed)
    bench_template = json.loads((template / "benchmarks.json").read_text())
    result_file = next(p for p in sorted(template.glob("*/*.json"))
                       if p.name != "machine.json" and "-" in p.name)
    machine_template = json.loads((result_file.parent / "machine.json").read_text())
    file_template = json.loads(result_file.read_text())
    grid = suite_grid()
    benchmarks = {**bench_template, **grid}
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / "benchmarks.json").write_text(json.dumps(benchmarks))

    columns = file_template["result_columns"]
    per_commit = 0
    base_values = {}
    for name, entry in grid.items():
        n = math.prod(len(p) for p in entry["params"])
        per_commit += n
        base_values[name] = [rng.uniform(0.5, 5.0) for _ in range(n)]
    start = 1_700_000_000_000  # ms since the epoch
    for m in range(machines):
        machine = f"gen-gpu-{m}"
        (out / machine).mkdir()
        (out / machine / "machine.json").write_text(
            json.dumps({**machine_template, "machine": machine}))
        for c in range(commits):
            sha = hashlib.sha1(f"commit {c}".encode()).hexdigest()
            results = {}
            for name, entry in grid.items():
                values, samples = [], []
                for base in base_values[name]:
                    drift = 1 + 0.05 * math.sin(c / 50) + rng.gauss(0, 0.01)
                    s = [base * drift * (1 + rng.gauss(0, 0.005)) for _ in range(5)]
                    samples.append(s)
                    values.append(sorted(s)[2])
                row = {"result": values, "params": entry["params"], "version": entry["version"],
                       "started_at": start + c * 3_600_000, "duration": 1.0,
                       "stats_ci_99_a": [v * 0.99 for v in values],
                       "stats_ci_99_b": [v * 1.01 for v in values],
                       "stats_number": [1] * len(values), "stats_repeat": [5] * len(values),
                       "samples": samples}
                results[name] = [row.get(k) for k in columns]
                while results[name] and results[name][-1] is None:
                    results[name].pop()
            data = {**file_template, "commit_hash": sha, "date": start + c * 3_600_000,
                    "results": results, "durations": {}}
            path = out / machine / f"{sha[:8]}-{file_template['env_name']}.json"
            path.write_text(json.dumps(data))
    return per_commit * commits * machines


_TIMER = r'''
import json, sys, tempfile, time
t0 = time.perf_counter()
sys.path.insert(0, {repo!r})
from streamlit.testing.v1 import AppTest
out = {{}}

def run(at):
    t = time.perf_counter()
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return time.perf_counter() - t

# A cold process straight onto the big directory: every import included (torch too, when
# importing safeattn pulls it in).
at = AppTest.from_file({app!r}, default_timeout=600)
at.session_state["results_dir"] = {results!r}
out["cold_process_first_load_s"] = run(at)
assert at.header, "the overview shows no machine"

# A running server meeting new data: the same session starts on an empty directory
# (imports and AppTest's one-off set-up paid there), then opens the big one.
at = AppTest.from_file({app!r}, default_timeout=600)
at.session_state["results_dir"] = tempfile.mkdtemp()
run(at)
import streamlit as st
st.cache_resource.clear()  # nothing of the cold run above may help
at.session_state["results_dir"] = {results!r}
out["first_load_s"] = run(at)
assert at.header, "the overview shows no machine"
out["cached_rerun_s"] = min(run(at) for _ in range(5))
print(json.dumps(out))
'''


def time_overview(results: Path) -> dict[str, float]:
    """Time the overview page in a fresh Python process (see the module docstring)."""
    code = _TIMER.format(repo=str(REPO), app=str(REPO / "dashboard" / "app.py"),
                         results=str(results))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ), cwd="/")
    if done.returncode != 0:
        raise RuntimeError(f"timing run failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--machines", type=int, default=2)
    parser.add_argument("--template", help="a real asv results directory (default: see doc)")
    parser.add_argument("--out", default="/tmp/safeattn-bench-load/results",
                        help="where to write the generated results directory")
    parser.add_argument("--reuse", action="store_true",
                        help="time an already generated --out instead of generating it")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if not args.reuse:
        t = time.perf_counter()
        rows = generate(template_dir(args.template), out, args.commits, args.machines)
        print(f"generated {rows:,} result rows ({args.commits} commits x {args.machines} "
              f"machines x full grid) in {time.perf_counter() - t:.1f} s under {out}")
    timings = time_overview(out)
    for key, value in timings.items():
        print(f"{key:32s} {value:8.3f} s")
    ok = (timings["first_load_s"] < FIRST_LOAD_BUDGET_S
          and timings["cached_rerun_s"] < CACHED_RERUN_BUDGET_S)
    print(f"budgets: first load < {FIRST_LOAD_BUDGET_S} s, cached rerun < "
          f"{CACHED_RERUN_BUDGET_S} s: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
