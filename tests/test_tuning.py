"""Reproducible config choice (safeattn/kernels/tuning.py, launch._launch/_choose): the
committed table wins, the tuner fills only gaps and persists its choice, and nothing stored
that cannot run here is ever launched.

No GPU: the CUDA branch of ``launch._launch`` runs with a fake kernel (its "compile"
reports a shared-memory size per config, its launch records the config), a fake device
name and a fake ``do_bench`` that returns a fixed time per config and counts the timings.
"""

from __future__ import annotations

import collections
import importlib
import json
import logging
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import triton.testing
from triton.runtime.errors import OutOfResources

from safeattn.kernels import configs, launch, tuning
from safeattn.kernels.configs import KernelConfig

REPO = Path(__file__).resolve().parent.parent
GPU = "nvidia-test-gpu-80gb"
ARCH = "sm90"
LIMIT = 232_448
# forward, bf16, head-dim 128: four shipped candidates on sm90's shared memory.
CANDIDATES = [
    str(c) for c in configs.candidates("forward", 128, torch.bfloat16, LIMIT, masked=False)
]
META = launch.Meta(
    varlen=False, batch=1, heads_q=1, heads_kv=1, seq_q=1000, seq_k=1000, head_dim=128,
    bottom_right=False, window_left=-1, window_right=-1, has_key_mask=False, mask_kind=0,
    scale=1.0, deterministic=False,
)  # fmt: skip


class FakeKernel:
    """A ``@triton.jit`` kernel as ``_launch`` uses it: ``warmup`` compiles (shared memory
    from ``shared``, else 1 KiB), ``kernel[grid](...)`` launches and records the config."""

    def __init__(
        self, shared: dict[str, int] | None = None, spills: dict[str, int] | None = None
    ) -> None:
        self.shared = shared or {}
        self.spills = spills or {}  # Triton's n_spills: 4-byte words
        self.compiled: list[str] = []
        self.launched: list[str] = []

    @staticmethod
    def _config(kw: dict) -> str:
        return str(KernelConfig(kw["BLOCK_M"], kw["BLOCK_N"], kw["num_warps"], kw["num_stages"]))

    def _binary(self, cfg: str, loaded: bool = True):
        # As Triton's: a kernel from warmup() knows its spills once loaded (_init_handles),
        # and loading one over the GPU's shared memory raises.
        words = self.spills.get(cfg, 0)
        binary = SimpleNamespace(metadata=SimpleNamespace(shared=self.shared.get(cfg, 1024)),
                                 n_regs=96, n_spills=words if loaded else None)  # fmt: skip

        def load() -> None:
            if binary.metadata.shared > LIMIT:
                raise OutOfResources(binary.metadata.shared, LIMIT, "shared memory")
            binary.n_spills = words

        binary._init_handles = load
        return binary

    def warmup(self, *args, grid, **kw):
        self.compiled.append(self._config(kw))
        return self._binary(self._config(kw), loaded=False)

    def __getitem__(self, grid):
        def run(*args, **kw):
            self.launched.append(self._config(kw))
            return self._binary(self._config(kw))

        return run


@pytest.fixture
def gpu(monkeypatch, tmp_path):
    """The CUDA branch of _launch on this CPU machine: a fake GPU, tables and cache in
    tmp_path, a do_bench returning ``times[config]`` (default 1 ms) and counting calls."""
    tables, cache = tmp_path / "tables", tmp_path / "cache"
    tables.mkdir()
    monkeypatch.setenv(tuning.TABLE_ENV, str(tables))
    monkeypatch.setenv(tuning.CACHE_ENV, str(cache))
    monkeypatch.setenv("SAFEATTN_AUTOTUNE", "1")
    monkeypatch.setattr(launch, "INTERPRET", False)
    monkeypatch.setattr(launch, "_smem_limit", lambda device: LIMIT)
    monkeypatch.setattr(launch, "_gpu_names", lambda index: (GPU, ARCH))
    state = SimpleNamespace(tables=tables, cache=cache, times={}, timed=[], kernel=None)

    def do_bench(fn, **kw):
        fn()
        cfg = state.kernel.launched.pop()
        state.timed.append(cfg)
        return state.times.get(cfg, 1.0)

    monkeypatch.setattr(triton.testing, "do_bench", do_bench)
    launch.clear_choices()
    yield state
    launch.clear_choices()


def run_forward(state, meta=META, kernel: FakeKernel | None = None) -> str:
    """One forward launch through _launch with a fresh fake kernel; returns its config."""
    state.kernel = kernel or FakeKernel()
    device = torch.device("cuda", 0)  # never touched: every CUDA query is faked
    cfg = launch._launch("forward", state.kernel, lambda c: (1,), (), meta, torch.bfloat16,
                         device, meta.seq_q, meta.seq_k)  # fmt: skip
    assert state.kernel.launched[-1] == str(cfg)
    return str(cfg)


def key_of(meta=META) -> str:
    key = configs.tune_key("forward", torch.bfloat16, meta.head_dim, meta.seq_q, meta.seq_k,
                           meta.flags)  # fmt: skip
    return tuning.key_text(key)


def write_table(path: Path, entries: dict[str, str]) -> None:
    entries = {k: tuning.make_entry(v, []) for k, v in entries.items()}
    tuning.write_entries(path, path.stem, entries, "test")


def source_of(kernel: str = "forward") -> str:
    (source,) = (s for k, s in launch.config_sources().items() if k[0] == kernel)
    return source


def test_table_hit_launches_the_tables_config_without_timing(gpu):
    assert len(CANDIDATES) > 2, CANDIDATES
    chosen = CANDIDATES[2]
    write_table(gpu.tables / f"{GPU}.json", {key_of(): chosen})
    assert run_forward(gpu) == chosen
    assert gpu.timed == [] and gpu.kernel.compiled == [chosen]  # only the table's config
    assert source_of() == "table"
    assert launch.launched_kernels()["forward"].source == "table"
    assert not (gpu.cache / f"{GPU}.json").exists()  # a table hit persists nothing


def test_the_architectures_table_serves_keys_the_gpus_table_lacks(gpu):
    write_table(gpu.tables / f"{GPU}.json", {"some other key": CANDIDATES[1]})
    write_table(gpu.tables / f"{ARCH}.json", {key_of(): CANDIDATES[3]})
    assert run_forward(gpu) == CANDIDATES[3]
    assert source_of() == "table" and gpu.timed == []


@pytest.mark.parametrize("stored", ["M256-N256-w8-s3", "not-a-config"])
def test_a_table_entry_that_is_not_a_candidate_is_logged_and_tuned_instead(gpu, caplog, stored):
    write_table(gpu.tables / f"{GPU}.json", {key_of(): stored})
    with caplog.at_level(logging.INFO, logger="safeattn.tuning"):
        chosen = run_forward(gpu)
    assert chosen == CANDIDATES[0] and gpu.timed == CANDIDATES  # all timed, first tie wins
    assert source_of() == "tuned"
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warning) == 1 and stored in warning[0] and "not a shipped candidate" in warning[0]


def test_a_table_entry_that_does_not_fit_this_gpu_is_logged_and_tuned_instead(gpu, caplog):
    too_big = CANDIDATES[1]
    write_table(gpu.tables / f"{GPU}.json", {key_of(): too_big})
    with caplog.at_level(logging.WARNING, logger="safeattn.tuning"):
        chosen = run_forward(gpu, kernel=FakeKernel(shared={too_big: LIMIT + 1}))
    assert chosen == CANDIDATES[0] and too_big not in gpu.timed
    assert f"needs {LIMIT + 1} bytes of shared memory" in caplog.text


def test_a_miss_is_tuned_persisted_and_reused_by_the_next_process(gpu, caplog):
    gpu.times = {c: 2.0 for c in CANDIDATES} | {CANDIDATES[2]: 1.0}
    with caplog.at_level(logging.INFO, logger="safeattn.tuning"):
        assert run_forward(gpu) == CANDIDATES[2]
    assert source_of() == "tuned" and gpu.timed == CANDIDATES
    (timings,) = launch.tuning_timings().values()
    assert timings == [(c, gpu.times[c]) for c in CANDIDATES]
    cache_file = gpu.cache / f"{GPU}.json"
    stored = json.loads(cache_file.read_text())
    assert stored["gpu"] == GPU and stored["schema"] == tuning.SCHEMA
    assert stored["entries"][key_of()] == {"config": CANDIDATES[2], "times_ms": gpu.times}
    (info,) = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert key_of() in info and f"-> {CANDIDATES[2]}" in info and str(cache_file) in info
    assert f"{CANDIDATES[0]} 2.0000 ms" in info

    launch.clear_choices()  # a new process: nothing in memory, the cache on disk
    gpu.timed.clear()
    gpu.times = {CANDIDATES[0]: 0.1}  # would win a re-tune
    assert run_forward(gpu) == CANDIDATES[2]
    assert gpu.timed == [] and source_of() == "cache" and launch.tuning_timings() == {}

    run_forward(gpu)  # the same process again: its memory, no file read, no compile
    assert gpu.kernel.compiled == []


def test_one_fitting_candidate_is_launched_untimed(gpu, caplog):
    """Every other candidate over the shared-memory limit: the one that fits launches
    without timing (this crashed the tuner once: no timings to pair with the configs)."""
    too_big = {c: LIMIT + 1 for c in CANDIDATES[1:]}
    with caplog.at_level(logging.INFO, logger="safeattn.tuning"):
        assert run_forward(gpu, kernel=FakeKernel(shared=too_big)) == CANDIDATES[0]
    assert gpu.timed == [] and source_of() == "tuned"
    assert "one candidate fits" in caplog.text


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_the_tuner_times_spill_free_candidates_while_one_fits(gpu, dtype):
    """fp16/bf16 at D <= 128 must not spill (tuning.spill_free_first): the fastest candidate,
    which spills, is not even timed while others fit without, and the faster of those wins.
    fp32 keeps (and times) every candidate; and when all of them spill, the fastest wins."""
    names = [str(c) for c in configs.candidates("forward", 128, dtype, LIMIT)]
    assert len(names) >= 2, names
    clean = names[-2:] if len(names) > 2 else names[-1:]
    gpu.times = {c: 3.0 for c in names} | {names[0]: 1.0, clean[-1]: 2.0}
    gpu.kernel = FakeKernel(spills={c: 2 for c in names if c not in clean})
    device = torch.device("cuda", 0)
    cfg = launch._launch("forward", gpu.kernel, lambda c: (1,), (), META, dtype, device,
                         META.seq_q, META.seq_k)  # fmt: skip
    if dtype == torch.float32:
        assert str(cfg) == names[0] and gpu.timed == names
    else:
        assert str(cfg) == clean[-1] and gpu.timed == clean
        launch.clear_choices()
        (gpu.cache / f"{GPU}.json").unlink()  # a fresh machine: tuned again
        gpu.timed.clear()
        every = FakeKernel(spills={c: 2 for c in names})
        assert run_forward(gpu, kernel=every) == names[0] and gpu.timed == names


def test_the_table_wins_over_the_cache(gpu):
    write_table(gpu.cache / f"{GPU}.json", {key_of(): CANDIDATES[1]})
    write_table(gpu.tables / f"{GPU}.json", {key_of(): CANDIDATES[3]})
    assert run_forward(gpu) == CANDIDATES[3] and source_of() == "table"


@pytest.mark.parametrize("text", ["{not json", '{"schema": "other/9", "entries": {}}', "[]"])
def test_a_corrupt_cache_file_is_ignored_with_a_warning(gpu, caplog, text):
    cache_file = gpu.cache / f"{GPU}.json"
    cache_file.parent.mkdir(parents=True)
    cache_file.write_text(text)
    with caplog.at_level(logging.WARNING, logger="safeattn.tuning"):
        assert run_forward(gpu) == CANDIDATES[0]
    assert source_of() == "tuned"
    assert f"ignoring tuning file {cache_file}" in caplog.text
    # rewritten whole, with the new choice
    assert tuning.read_entries(cache_file)[key_of()]["config"] == CANDIDATES[0]


@pytest.mark.parametrize("off", ["0", "off"])
def test_persistence_can_be_switched_off(gpu, monkeypatch, caplog, off):
    monkeypatch.setenv(tuning.CACHE_ENV, off)
    monkeypatch.setenv("HOME", str(gpu.cache))  # the default location must stay untouched too
    with caplog.at_level(logging.INFO, logger="safeattn.tuning"):
        run_forward(gpu)
    assert source_of() == "tuned" and tuning.cache_dir() is None
    assert not gpu.cache.exists()
    assert "persisted to nowhere" in caplog.text
    launch.clear_choices()
    gpu.timed.clear()
    run_forward(gpu)
    assert gpu.timed == CANDIDATES  # tuned again: nothing was stored


def test_tables_can_be_switched_off(gpu, monkeypatch):
    write_table(gpu.tables / f"{GPU}.json", {key_of(): CANDIDATES[3]})
    monkeypatch.setenv(tuning.TABLE_ENV, "0")
    assert run_forward(gpu) == CANDIDATES[0] and source_of() == "tuned"


@pytest.mark.parametrize("how", ["SAFEATTN_AUTOTUNE=0", "deterministic"])
def test_single_config_mode_ignores_table_and_cache(gpu, monkeypatch, how):
    write_table(gpu.tables / f"{GPU}.json", {key_of(): CANDIDATES[3]})
    meta = META
    if how == "deterministic":
        meta = replace(META, deterministic=True)
        write_table(gpu.tables / f"{GPU}.json", {key_of(meta): CANDIDATES[3]})
    else:
        monkeypatch.setenv("SAFEATTN_AUTOTUNE", "0")
    too_big = CANDIDATES[0]  # the first candidate does not fit: the second one runs
    assert run_forward(gpu, meta, FakeKernel(shared={too_big: LIMIT + 1})) == CANDIDATES[1]
    assert source_of() == "single" and gpu.timed == []
    assert not gpu.cache.exists()


def test_the_key_names_every_mask_flag_and_keeps_masked_problems_apart(gpu):
    variants = {
        "plain": META,
        "key_mask": replace(META, has_key_mask=True, sparse_q=128, sparse_k=128),
        "bool_mask": replace(META, mask_kind=1, sparse_q=128, sparse_k=128),
        "window": replace(META, window_left=255, window_right=0),
        "bottom_right": replace(META, bottom_right=True),
        "varlen": replace(META, varlen=True),
        "deterministic": replace(META, deterministic=True),
    }
    texts = {name: key_of(meta) for name, meta in variants.items()}
    assert len(set(texts.values())) == len(texts), texts
    assert texts["plain"] == (
        "forward bfloat16 d128 q1024 k1024 varlen=0 bottom_right=0 window_left=0 "
        "window_right=0 key_mask=0 mask_kind=0 sparse=0 deterministic=0"
    )
    assert "key_mask=1" in texts["key_mask"] and "sparse=1" in texts["key_mask"]
    assert "mask_kind=1" in texts["bool_mask"]
    assert "window_left=1 window_right=1" in texts["window"]
    # the unmasked problem's entry is not used for the masked one
    write_table(gpu.tables / f"{GPU}.json", {texts["plain"]: CANDIDATES[3]})
    run_forward(gpu, variants["key_mask"])
    assert source_of() == "tuned"


def test_a_softcap_call_has_a_key_of_its_own_that_the_tables_lack(gpu):
    """softcap is named in the key only when on: the keys the committed tables were swept
    under stay as they were, and a capped call (no table entry) is tuned, launching the
    HAS_SOFTCAP specialisation, while the uncapped call keeps the table's config."""
    capped = replace(META, softcap=30.0)
    assert key_of(capped) == key_of() + " softcap=1"
    assert "softcap" not in key_of()
    write_table(gpu.tables / f"{GPU}.json", {key_of(): CANDIDATES[3]})

    class Recording(FakeKernel):
        def __getitem__(self, grid):
            run = super().__getitem__(grid)

            def record(*args, **kw):
                self.has_softcap = kw["HAS_SOFTCAP"]
                return run(*args, **kw)

            return record

    kernel = Recording()
    assert run_forward(gpu, capped, kernel) == CANDIDATES[0]
    assert source_of() == "tuned" and kernel.has_softcap is True
    launch.clear_choices()
    kernel = Recording()
    assert run_forward(gpu, META, kernel) == CANDIDATES[3]
    assert source_of() == "table" and kernel.has_softcap is False


def test_a_gqa_dkdv_call_has_a_key_of_its_own(gpu):
    """A GQA dK/dV program loops over its query-head group (the GQA constexpr), so its
    config is keyed apart: the GQA-free call's table entry is not used for it, and in one
    process each call keeps its own choice."""
    shipped = [str(c) for c in configs.candidates("bwd_dkdv", 128, torch.bfloat16, LIMIT)]
    assert len(shipped) > 1, shipped
    gqa_meta = replace(META, heads_q=4)

    def dkdv(meta, extra) -> str:
        gpu.kernel = FakeKernel()
        cfg = launch._launch("bwd_dkdv", gpu.kernel, lambda c: (1,), (), meta, torch.bfloat16,
                             torch.device("cuda", 0), meta.seq_q, meta.seq_k, extra)  # fmt: skip
        return str(cfg)

    plain = tuning.key_text(configs.tune_key("bwd_dkdv", torch.bfloat16, 128, 1000, 1000,
                                             META.flags))  # fmt: skip
    write_table(gpu.tables / f"{GPU}.json", {plain: shipped[1]})
    gpu.times = {shipped[1]: 2.0}  # the GQA call's tuner prefers another config
    assert dkdv(gqa_meta, {"GQA": True}) != shipped[1]
    assert dkdv(META, {"GQA": False}) == shipped[1]
    keys = {tuning.key_text(k[:-1]): s for k, s in launch.config_sources().items()}
    assert keys == {plain: "table", plain + " gqa=1": "tuned"}, keys


def test_a_no_tail_dkdv_call_has_a_key_of_its_own(gpu):
    """The NO_TAIL dK/dV build (no trailing masked loop) spills differently from the general
    one, so its choice is keyed apart ("full=1"): a table entry of the general build is not
    used for it, nor is its choice used for a call whose lengths leave partial tiles."""
    shipped = [str(c) for c in configs.candidates("bwd_dkdv", 128, torch.bfloat16, LIMIT)]
    plain = tuning.key_text(configs.tune_key("bwd_dkdv", torch.bfloat16, 128, 1000, 1000,
                                             META.flags))  # fmt: skip
    write_table(gpu.tables / f"{GPU}.json", {plain: shipped[1]})
    gpu.times = {shipped[1]: 2.0}

    def dkdv(full: bool) -> str:
        gpu.kernel = FakeKernel()
        cfg = launch._launch("bwd_dkdv", gpu.kernel, lambda c: (1,), (), META, torch.bfloat16,
                             torch.device("cuda", 0), META.seq_q, META.seq_k,
                             {"NO_TAIL": full})  # fmt: skip
        return str(cfg)

    assert dkdv(True) != shipped[1]
    assert dkdv(False) == shipped[1]
    keys = {tuning.key_text(k[:-1]): s for k, s in launch.config_sources().items()}
    assert keys == {plain: "table", plain + " full=1": "tuned"}, keys


def test_the_interpreter_keeps_its_config_and_records_nothing(monkeypatch):
    monkeypatch.setattr(launch, "INTERPRET", True)
    launch.clear_choices()
    kernel = FakeKernel()
    cfg = launch._launch("forward", kernel, lambda c: (1,), (), META, torch.float32,
                         torch.device("cpu"), 64, 64)  # fmt: skip
    assert cfg == configs.interpreter_config("forward") and kernel.compiled == []
    assert launch.chosen_configs() == {} and launch.launched_kernels() == {}


def test_file_format_is_one_sorted_entry_per_line(tmp_path):
    entries = {
        "b key": tuning.make_entry("M64-N64-w4-s3", [("M64-N64-w4-s3", 0.123456)]),
        "a key": tuning.make_entry("M128-N64-w4-s3", [], votes={"M128-N64-w4-s3": 3}),
    }
    path = tmp_path / "gpu.json"
    tuning.write_entries(path, "gpu", entries, "about it")
    text = path.read_text()
    data = json.loads(text)
    assert data["entries"]["b key"]["times_ms"] == {"M64-N64-w4-s3": 0.1235}
    assert data["about"] == "about it" and tuning.read_entries(path) == data["entries"]
    lines = text.splitlines()
    first, second = (lines.index(ln) for ln in lines if '"a key"' in ln or '"b key"' in ln)
    assert second == first + 1  # one line each, sorted
    assert [p.name for p in tmp_path.iterdir()] == ["gpu.json"]  # no temporary left behind


def test_concurrent_processes_never_corrupt_the_cache(tmp_path):
    """Four processes persisting 25 keys each into one file at once: a valid file with all
    100 entries (atomic replace: no torn file; the lock: no lost entry)."""
    code = textwrap.dedent(
        """
        import sys
        from safeattn.kernels import tuning
        for i in range(25):
            tuning.persist("gpu", f"key {sys.argv[1]} {i}", "M64-N64-w4-s3", [("M", 1.0)])
        """
    )
    env = {"SAFEATTN_TUNING_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"}
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(n)], cwd=REPO, env=env) for n in range(4)
    ]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    entries = tuning.read_entries(tmp_path / "gpu.json")
    assert len(entries) == 100


@pytest.mark.parametrize(
    "name", ["NVIDIA H100 80GB HBM3", "NVIDIA H200", "NVIDIA A100-SXM4-80GB", "NVIDIA L4"]
)
def test_gpu_slug_is_the_asv_machine_name(name):
    """The tables are named like the asv machines (tools/runner/machine.py keeps its own
    copy: the runner imports nothing outside the standard library)."""
    sys.path.insert(0, str(REPO))
    machine = importlib.import_module("tools.runner.machine")
    assert tuning.gpu_slug(name) == machine.slug(name)
    assert tuning.gpu_slug("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"


# --------------------------------------------------------------------------- the sweep


def _benchmarks(module: str):
    """An asv suite module (``benchmarks``) or a tool (``tools``: prewarm, tune,
    runner.results)."""
    sys.path.insert(0, str(REPO))  # both packages live at the repository root
    package = "tools" if module in ("prewarm", "tune", "runner.results") else "benchmarks"
    return importlib.import_module(f"{package}.{module}")


def test_neither_the_prewarm_nor_the_sweep_persists_its_choices():
    """The prewarm's processes share the GPU (their timings are noise); the sweep keeps its
    own majority. Both run with the cache off; the sweep also without the table, tuning on."""
    prewarm, tune = _benchmarks("prewarm"), _benchmarks("tune")
    assert prewarm._WORKER_ENV[tuning.CACHE_ENV] in tuning.OFF_VALUES
    assert tune._WORKER_ENV[tuning.CACHE_ENV] in tuning.OFF_VALUES
    assert tune._WORKER_ENV[tuning.TABLE_ENV] in tuning.OFF_VALUES
    assert tune._WORKER_ENV["SAFEATTN_AUTOTUNE"] == "1"


def test_the_sweep_tunes_safeattns_calls_of_the_gpu_grids(capsys):
    """prewarm.tasks() of SpeedSuite, MaskedSpeedSuite and ModelStepSuite, safeattn only;
    --list shows them without a GPU."""
    tune, speed = _benchmarks("tune"), _benchmarks("speed")
    todo = tune.tune_tasks()
    kinds = collections.Counter(t[0] for t in todo)
    dense = len(speed.GPU_DTYPES) * len(speed.GPU_HEAD_DIMS) * len(speed.GPU_SEQ_LENS) * 4
    masked = len(speed.GPU_DTYPES) * len(speed.GPU_HEAD_DIMS) * len(speed.MASKS)
    assert kinds == {"speed": dense, "masked": masked, "model": 4}
    assert all(t[1] == "safeattn" for t in todo)
    assert tune.main(["--list", "--kind", "model"]) == 0
    out = capsys.readouterr().out
    assert "[tune] model safeattn 4096 left" in out and "4 calls" in out


def test_a_sweep_worker_reports_the_keys_it_tuned(gpu, monkeypatch):
    """_tune_task (in-process here) runs prewarm's call and returns each key it tuned first,
    in the tables' key text, with the tuner's times; keys it reused are not repeated."""
    tune, prewarm = _benchmarks("tune"), _benchmarks("prewarm")
    gpu.times = {c: 2.0 for c in CANDIDATES} | {CANDIDATES[1]: 1.0}
    monkeypatch.setattr(prewarm, "warm", lambda task: (run_forward(gpu) and task, 0.5, ""))
    task, _, error, new, slug = tune._tune_task(("speed", "safeattn"))
    assert (task, error, slug) == (("speed", "safeattn"), "", GPU)
    assert new == {key_of(): {"config": CANDIDATES[1], "times_ms": gpu.times}}
    assert tune._tune_task(("speed", "safeattn"))[3] == {}  # same key again: nothing new


def test_the_sweep_keeps_the_majority_and_merges_the_table(monkeypatch, tmp_path, capsys):
    tune, bench_env = _benchmarks("tune"), _benchmarks("_env")
    a, b, c = CANDIDATES[:3]
    k0, k1 = key_of(replace(META, seq_q=5000, seq_k=5000)), key_of()
    stale = key_of(replace(META, seq_q=100, seq_k=100))

    def run(config, fast):
        return {k1: tuning.make_entry(config, [(a, 1.0 + fast), (b, 1.0), (c, 3.0)])}

    runs = iter([run(a, 0.0), run(b, 0.5), run(a, 0.2)])
    monkeypatch.setattr(
        tune, "_one_repeat", lambda todo, r, n: (next(runs), GPU, {"triton": "3.9"}, 0)
    )
    monkeypatch.setattr(bench_env, "cuda_usable", lambda: True)
    table = tmp_path / f"{GPU}.json"
    # k0 the sweep does not reach; "stale" names a config no candidate list ships any more
    write_table(table, {k0: c, k1: b, stale: "M8-N8-w1-s1"})
    assert tune.main(["--repeats", "3", "--out", str(tmp_path), "--kind", "model"]) == 0
    entries = tuning.read_entries(table)
    assert entries[k0]["config"] == c  # a key the sweep did not reach: kept
    assert entries[k1] == {
        "config": a,
        "times_ms": {a: 1.2, b: 1.0, c: 3.0},  # medians over the repeats
        "votes": {a: 2, b: 1},
    }
    assert stale not in entries
    out = capsys.readouterr().out
    assert f"[tune] {k1}: {a} (2/3, was {b})" in out
    assert f"[tune] {stale}: M8-N8-w1-s1 dropped (no longer a shipped candidate)" in out
    # a tie goes to the earlier candidate
    tie = tune.vote([run(b, 0.0), run(a, 0.0)])
    assert tie[k1]["config"] == a


def test_without_a_majority_the_median_times_decide():
    """Three repeats, three choices: the medians pick (configs.pick's tie rule), not the
    earliest candidate. The figures are the H200's dense bf16 D=128 dQ key of 2026-11-29,
    where the earliest one, 1.054x the fastest median, had been kept."""
    tune = _benchmarks("tune")
    a, b, c, d = CANDIDATES[:4]
    key = key_of()
    rows = [(1.396, 1.338, 1.327, 1.479), (1.424, 1.344, 1.304, 1.453),
            (1.363, 1.328, 1.325, 1.442)]  # fmt: skip
    chosen = [b, c, a]  # what each repeat's tuner launched
    runs = [{key: tuning.make_entry(cfg, list(zip((a, b, c, d), row, strict=True)))}
            for cfg, row in zip(chosen, rows, strict=True)]  # fmt: skip
    entry = tune.vote(runs)[key]
    assert entry["votes"] == {a: 1, b: 1, c: 1}
    # medians a 1.396, b 1.338, c 1.325: b is the first within the tolerance of c
    assert entry["config"] == b
    # two of three still decide, whatever the medians
    assert tune.vote([*runs[:2], runs[1]])[key]["config"] == c


def test_new_keys_only_adds_what_the_table_lacks(monkeypatch, tmp_path, capsys):
    """--new-keys-only: a key the table has keeps its entry whatever the sweep chose; a key
    it lacks is added; the table's description keeps what it said and names the addition."""
    tune, bench_env = _benchmarks("tune"), _benchmarks("_env")
    a, b = CANDIDATES[:2]
    old, new = key_of(), key_of(replace(META, seq_q=5000, seq_k=5000))
    run = {old: tuning.make_entry(a, [(a, 1.0), (b, 2.0)]),
           new: tuning.make_entry(a, [(a, 1.0), (b, 2.0)])}  # fmt: skip
    monkeypatch.setattr(tune, "_one_repeat", lambda todo, r, n: (run, GPU, {"triton": "3.9"}, 0))
    monkeypatch.setattr(bench_env, "cuda_usable", lambda: True)
    table = tmp_path / f"{GPU}.json"
    write_table(table, {old: b})
    before = json.loads(table.read_text())["about"]
    assert tune.main(["--repeats", "1", "--out", str(tmp_path), "--new-keys-only"]) == 0
    entries = tuning.read_entries(table)
    assert entries[old]["config"] == b and entries[new]["config"] == a
    about = json.loads(table.read_text())["about"]
    assert about.startswith(before) and "the keys it lacked" in about, about
    assert f"[tune] {old}: {a} not written (the table has it)" in capsys.readouterr().out


def test_prune_drops_only_the_entries_naming_unshipped_configs(tmp_path, capsys):
    """--prune (no GPU): a candidate list changed after a tune; the entries that name a
    config it no longer holds go, each printed, the rest and the header stay."""
    tune = _benchmarks("tune")
    table = tmp_path / f"{GPU}.json"
    keep, stale = key_of(), key_of(replace(META, seq_q=100, seq_k=100))
    write_table(table, {keep: CANDIDATES[1], stale: "M8-N8-w1-s1"})
    assert tune.main(["--prune", "--gpu", GPU, "--out", str(tmp_path)]) == 0
    assert {k: e["config"] for k, e in tuning.read_entries(table).items()} == {
        keep: CANDIDATES[1]
    }
    assert json.loads(table.read_text())["about"] == "test"
    out = capsys.readouterr().out
    assert f"{stale}: M8-N8-w1-s1 dropped" in out and "1 stale entries dropped, 1 kept" in out
    assert tune.main(["--prune", "--gpu", "nvidia-absent", "--out", str(tmp_path)]) == 2
    with pytest.raises(SystemExit):
        tune.main(["--prune"])  # which table: --gpu is required


# ------------------------------------------------- results record the configs that ran


def test_the_gpu_suites_record_each_combinations_configs(monkeypatch, tmp_path):
    """record_launch appends safeattn's launched configs and their sources to the file
    tools/run.py names; without one it does nothing, and it never raises."""
    launches = _benchmarks("_launches")
    launched = {
        "forward": SimpleNamespace(config="M128-N64-w4-s3", source="table"),
        "bwd_dq": SimpleNamespace(config="M64-N64-w4-s2"),  # a commit without sources
    }
    monkeypatch.setattr(launch, "launched_kernels", lambda: dict(launched))
    monkeypatch.delenv(launches.LAUNCHES_ENV, raising=False)
    launches.record_launch("speed.SpeedSuite", ("impl", "head_dim"), ("safeattn", 64))
    path = tmp_path / "launches.jsonl"
    monkeypatch.setenv(launches.LAUNCHES_ENV, str(path))
    launches.record_launch("speed.SpeedSuite", ("impl", "head_dim"), ("safeattn", 64))
    (line,) = path.read_text().splitlines()
    assert json.loads(line) == {
        "suite": "speed.SpeedSuite",
        "params": {"impl": "safeattn", "head_dim": 64},
        "configs": {"bwd_dq": "M64-N64-w4-s2", "forward": "M128-N64-w4-s3"},
        "sources": {"bwd_dq": "", "forward": "table"},
    }
    launches.record_launch("speed.SpeedSuite", ("impl",), ("safeattn", 64))  # wrong: no raise
    assert len(path.read_text().splitlines()) == 1


def test_run_py_keeps_the_launched_configs_in_the_commits_sidecar(tmp_path):
    results = _benchmarks("runner.results")
    sha = "ab" * 20
    machine_dir = tmp_path / "results" / "gpu"
    machine_dir.mkdir(parents=True)
    (machine_dir / f"{sha[:8]}-env.json").write_text(json.dumps({"commit_hash": sha}))
    sidecar = machine_dir / f"versions-{sha}.json"

    def record(mask, config):
        return {"suite": "speed.MaskedSpeedSuite", "params": {"impl": "safeattn", "mask": mask},
                "configs": {"forward": config}, "sources": {"forward": "table"}}  # fmt: skip

    launches = tmp_path / f"launches-{sha}.jsonl"
    lines = [json.dumps(record("bool_mask", "A")), json.dumps(record("varlen_docs", "B"))]
    launches.write_text("\n".join([*lines, '{"torn']) + "\n")
    written = results.write_sidecars(tmp_path / "results", "gpu", 0.0, {"gpu": None}, tmp_path)
    assert written == [sha]
    assert json.loads(sidecar.read_text())["safeattn_launches"] == [
        record("bool_mask", "A"), record("varlen_docs", "B")
    ]  # fmt: skip
    # the run's last call (its temporary folder gone) keeps them; a re-measure replaces one
    results.write_sidecars(tmp_path / "results", "gpu", 0.0, {"gpu": None})
    launches.write_text(json.dumps(record("bool_mask", "C")) + "\n")
    results.write_sidecars(tmp_path / "results", "gpu", 0.0, {"gpu": None}, tmp_path)
    assert json.loads(sidecar.read_text())["safeattn_launches"] == [
        record("bool_mask", "C"), record("varlen_docs", "B")
    ]  # fmt: skip


COMMITTED = sorted(tuning.TABLE_DIR.glob("*.json"))


def test_every_gpu_in_the_results_history_has_a_committed_table():
    """results/ names the GPUs the project measures; a GPU without a table would launch
    whatever its process's timings chose, and the gate could not tell that from a change."""
    gpus = {p.name for p in (REPO / "results").iterdir() if p.is_dir()}
    assert gpus and gpus <= {p.stem for p in COMMITTED}


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.stem)
def test_a_committed_table_is_the_sweeps_format_and_names_shipped_configs(path):
    """A hand edit or a bad merge shows here, not as a 'not a candidate' warning and a
    re-tune on the GPU: the file is dumps()'s own text, and each key's config is one the
    launcher ships for that kernel, dtype, head-dim tile and mask variant, timed by the sweep
    (or, with nothing timed, the one candidate the tuner kept, e.g. the only spill-free one:
    then every repeat voted for it)."""
    text = path.read_text()
    data = json.loads(text)
    assert data["gpu"] == path.stem
    assert text == tuning.dumps(data["gpu"], data["entries"], data["about"])
    for key, entry in data["entries"].items():
        assert entry["config"] in tuning.shipped(key), key
        timed, votes = entry["times_ms"], entry.get("votes", {})
        assert entry["config"] in timed or (not timed and set(votes) == {entry["config"]}), key
