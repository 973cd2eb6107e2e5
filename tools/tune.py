"""Tune safeattn's kernels on this GPU for the asv GPU grids and write this GPU's tuning
table (``safeattn/kernels/tuning_tables/<gpu>.json``, committed and reviewed like code).

    python -m tools.tune [--repeats 3] [--kind speed --kind masked --kind model]
                              [--gpu NAME] [--out DIR]
    python -m tools.tune --list    # the calls it would tune, and the table's keys
    python -m tools.tune --prune --gpu NAME   # drop the entries naming unshipped configs
    python -m tools.tune --new-keys-only      # add the keys the table lacks, keep the rest

Not an asv suite (asv imports every module here, so nothing beyond the standard library is
imported at module level).

What it runs: safeattn's calls of SpeedSuite's dense shapes, MaskedSpeedSuite's masked
workloads and ModelStepSuite's attention, i.e. tools/prewarm.py's ``tasks()`` of those
kinds, each one untimed forward+backward by prewarm's ``warm()``, with the committed tables
and the user's tuning cache switched off and autotuning on (so every tune key they reach is
timed afresh; ``safeattn/kernels/tuning.py``). All the calls run one after another in one
fresh process per repeat, alone on the GPU (never beside the prewarm or a benchmark: its
timings would be noise). With ``--repeats N`` every key is tuned N times, in N processes,
and the majority's config is kept; without a majority the median times decide, by the
tuner's own tie rule (``vote``).

What it writes: the tuned keys merged into the table of this GPU (the CUDA device name's
slug, as the asv machine is named; ``--gpu sm90`` names an architecture's table instead),
keys it did not reach kept as they were unless their config is no longer shipped
(a candidate list changed since: ``tuning.shipped``; each dropped key is printed, and
``--prune`` does only that, without a GPU). ``--new-keys-only`` writes only the tuned keys
the table has no entry for (a new kernel build's keys), so that the table's other choices
stay as the suites measured them. Each entry has the config, the candidates' median
times over the repeats and the votes. It prints one line per call and one per key, marking
the keys whose config changed from the table's.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import json
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path

KINDS = ("speed", "masked", "model")
# The tuner must time every key, and its choices must not outlive the sweep's processes
# (safeattn/kernels/tuning.py): no table, no cache, autotuning on.
_WORKER_ENV = {
    "SAFEATTN_TUNING_TABLE": "0",
    "SAFEATTN_TUNING_CACHE": "0",
    "SAFEATTN_AUTOTUNE": "1",
    "TORCHINDUCTOR_COMPILE_THREADS": "1",
}


def tune_tasks(kinds: tuple[str, ...] = KINDS) -> list[tuple]:
    """prewarm's tasks of these kinds whose implementation is safeattn."""
    from benchmarks._truth import metrics
    from tools import prewarm

    return [t for t in prewarm.tasks() if t[0] in kinds and t[1] == metrics.OWN_IMPL]


def _init_worker() -> None:
    os.environ.update(_WORKER_ENV)


def _worker_versions() -> dict:
    import torch
    import triton

    return {"torch": torch.__version__, "triton": triton.__version__}


def _tune_task(task: tuple) -> tuple[tuple, float, str, dict[str, dict], str]:
    """Run one call in this worker; returns (task, seconds, error or "", {key text: {config,
    times_ms}} of the keys it tuned first in this process, GPU slug)."""
    from safeattn.kernels import launch, tuning
    from tools import prewarm

    before = set(launch.chosen_configs())
    task, seconds, error = prewarm.warm(task)
    sources, timings = launch.config_sources(), launch.tuning_timings()
    tuned: dict[str, dict] = {}
    gpu = ""
    for memo, cfg in launch.chosen_configs().items():
        if memo in before or sources.get(memo) != "tuned":
            continue
        *key, gpu = memo  # launch.chosen_configs(): (*configs.tune_key(...), gpu slug)
        tuned[tuning.key_text(tuple(key))] = tuning.make_entry(str(cfg), timings.get(memo, []))
    return task, seconds, error, tuned, gpu


def _one_repeat(todo: list[tuple], repeat: int, repeats: int) -> tuple[dict, str, dict, int]:
    """All calls in one fresh process: ({key: entry}, GPU slug, versions, failed calls)."""
    tuned: dict[str, dict] = {}
    gpu, failed, versions = "", 0, {}
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked after init
    pending = list(todo)
    while pending:  # a call that kills its process is reported; the rest go on in a new one
        with concurrent.futures.ProcessPoolExecutor(
            1, mp_context=context, initializer=_init_worker
        ) as pool:
            try:
                versions = versions or pool.submit(_worker_versions).result()
                while pending:
                    task, seconds, error, new, slug = pool.submit(_tune_task, pending[0]).result()
                    pending.pop(0)
                    gpu = gpu or slug
                    failed += bool(error)
                    outcome = f"failed ({error})" if error else f"{len(new)} new key(s)"
                    _say(f"{repeat + 1}/{repeats} {_name(task)}: {outcome} ({seconds:.1f} s)")
                    for key, entry in new.items():
                        times = ", ".join(f"{c} {t:.3f}" for c, t in entry["times_ms"].items())
                        _say(f"    {key}: {entry['config']} ({times or 'one fits'})")
                    tuned.update(new)
            except concurrent.futures.process.BrokenProcessPool as exc:
                failed += 1
                task = pending.pop(0) if versions else "(start)"
                _say(f"{repeat + 1}/{repeats} {_name(task)}: the process died ({exc})")
                if not versions:
                    break
    return tuned, gpu, versions, failed


def _name(task) -> str:
    return " ".join(map(str, task)) if isinstance(task, tuple) else str(task)


def vote(runs: list[dict[str, dict]]) -> dict[str, dict]:
    """One entry per key from the repeats' entries: the config more than half the repeats
    chose, else the one the median times pick by the tuner's own rule (``configs.pick``: the
    first candidate within its tie tolerance of the fastest); the median time of each
    candidate, and the votes.

    Why the medians without a majority: three repeats that each chose another of three
    near-tied candidates used to fall to the earliest candidate in the list, whatever its
    time; on the H200 that kept the dense bf16 D=128 dQ at M64-N64-w4-s2, 1.054x the fastest
    median (docs/perf/tune_h200_2026-11-29.log)."""
    from safeattn.kernels import configs, tuning

    merged: dict[str, dict] = {}
    for key in sorted({k for run in runs for k in run}):
        entries = [run[key] for run in runs if key in run]
        votes = collections.Counter(e["config"] for e in entries)
        order = list(dict.fromkeys(c for e in entries for c in [*e["times_ms"], e["config"]]))
        times = [
            (c, statistics.median(e["times_ms"][c] for e in entries if c in e["times_ms"]))
            for c in order
            if any(c in e["times_ms"] for e in entries)
        ]
        best, top = max(votes.items(), key=lambda cv: (cv[1], -order.index(cv[0])))
        if 2 * top <= len(entries) and times:
            best = times[configs.pick([t for _, t in times])][0]
        merged[key] = tuning.make_entry(best, times, votes=dict(votes))
    return merged


def drop_unshipped(entries: dict[str, dict]) -> dict[str, dict]:
    """The entries whose config the launcher still ships (``tuning.shipped``); each other
    one is printed and left out: its candidate list changed after the tune that chose it."""
    from safeattn.kernels import tuning

    kept = {}
    for key, entry in sorted(entries.items()):
        if entry["config"] in tuning.shipped(key):
            kept[key] = entry
        else:
            _say(f"{key}: {entry['config']} dropped (no longer a shipped candidate)")
    return kept


def _prune(path: Path, name: str) -> int:
    """``--prune``: rewrite one table without its stale entries (no GPU needed)."""
    from safeattn.kernels import tuning

    if not path.exists():
        _say(f"{path}: no such table")
        return 2
    entries = tuning.read_entries(path)
    kept = drop_unshipped(entries)
    tuning.write_entries(path, name, kept, json.loads(path.read_text())["about"])
    _say(f"{path}: {len(entries) - len(kept)} stale entries dropped, {len(kept)} kept")
    return 0


def _say(line: str) -> None:
    print(f"[tune] {line}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="processes per key (default 3)")
    parser.add_argument("--kind", action="append", choices=KINDS, help="only these calls")
    parser.add_argument("--gpu", help="table name (default: this GPU's slug, e.g. nvidia-h200)")
    parser.add_argument("--out", type=Path, help="table folder (default: the package's)")
    parser.add_argument("--list", "--dry-run", action="store_true", help="list, run nothing")
    parser.add_argument("--prune", action="store_true",
                        help="only drop --gpu's entries that name unshipped configs")  # fmt: skip
    parser.add_argument("--new-keys-only", action="store_true",
                        help="write only the tuned keys the table lacks")  # fmt: skip
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")

    from benchmarks._env import cuda_usable
    from safeattn.kernels import tuning

    out = args.out or tuning.TABLE_DIR
    if args.prune:
        if not args.gpu:
            parser.error("--prune needs --gpu (the table's name, e.g. nvidia-h200)")
        return _prune(out / f"{args.gpu}.json", args.gpu)
    todo = tune_tasks(tuple(args.kind or KINDS))
    if args.list:
        for task in todo:
            _say(" ".join(map(str, task)))
        _say(f"{len(todo)} calls; their tune keys show when they run (on a GPU)")
        if args.gpu:
            path = out / f"{args.gpu}.json"
            entries = tuning.read_entries(path)
            for key, entry in sorted(entries.items()):
                _say(f"    {key}: {entry['config']}")
            _say(f"{path}: {len(entries)} entries")
        return 0
    if not cuda_usable():
        _say("no usable CUDA GPU here: nothing to tune (--list shows the calls)")
        return 2

    start = time.perf_counter()
    runs, gpus, failed, versions = [], set(), 0, {}
    _say(f"{len(todo)} calls, {args.repeats} repeat(s), one fresh process each")
    for repeat in range(args.repeats):
        tuned, gpu, versions, n_failed = _one_repeat(todo, repeat, args.repeats)
        runs.append(tuned)
        gpus.add(gpu)
        failed += n_failed
    gpus.discard("")
    if not any(runs) or len(gpus) != 1:
        _say(f"nothing written: tuned {sum(map(len, runs))} keys on GPU(s) {sorted(gpus)}")
        return 1
    name = args.gpu or gpus.pop()
    path = out / f"{name}.json"
    table = tuning.read_entries(path)
    merged = vote(runs)
    if args.new_keys_only:
        for key in [k for k in merged if k in table]:
            _say(f"{key}: {merged.pop(key)['config']} not written (the table has it)")
    for key, entry in merged.items():
        old = table.get(key, {}).get("config")
        change = "new" if old is None else ("same" if old == entry["config"] else f"was {old}")
        agree = max(entry["votes"].values())
        _say(f"{key}: {entry['config']} ({agree}/{sum(entry['votes'].values())}, {change})")
    table = drop_unshipped({**table, **merged})
    about = (
        f"tools/tune.py: the asv GPU grids' safeattn calls ({', '.join(args.kind or KINDS)}),"
        f" majority of {args.repeats} process(es); torch {versions.get('torch')}, "
        f"triton {versions.get('triton')}"
    )
    if args.new_keys_only and path.exists():
        about = f"{json.loads(path.read_text())['about']}; the keys it lacked: {about}"
    tuning.write_entries(path, name, table, about)
    seconds = time.perf_counter() - start
    _say(f"{len(merged)} keys tuned, {len(table)} in {path} ({seconds:.0f} s, {failed} failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
