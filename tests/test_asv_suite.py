"""The asv suite: its grids and helpers, then a real asv run of the CPU-capable part (quick
mode, through tools/run.py) and the result files it wrote."""

from __future__ import annotations

import importlib.util
import itertools
import json
import math
import os
import re
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest
import torch
from asv_helpers import REPO, asv_cpu_run, make_venv_layout, torchless_python

from regress import workloads
from regress.metrics import METRICS, OWN_IMPL, PEERS, metric_for
from safeattn import families
from safeattn.kernels import configs

sys.path.insert(0, str(REPO))  # the benchmarks package lives at the repository root
bench_env = importlib.import_module("benchmarks._env")
grid = importlib.import_module("benchmarks._grid")
attention = importlib.import_module("benchmarks._attention")
gpu_measure = importlib.import_module("benchmarks._gpu_measure")
speed = importlib.import_module("benchmarks.speed")
memory = importlib.import_module("benchmarks.memory")
resources = importlib.import_module("benchmarks.resources")
numerics = importlib.import_module("benchmarks.numerics")
run_suites = importlib.import_module("tools.runner.suites")
run_machine = importlib.import_module("tools.runner.machine")
run_results = importlib.import_module("tools.runner.results")
run_invocation = importlib.import_module("tools.runner.invocation")

# What the CPU-capable part must produce, per benchmark: the value check for each entry.
CPU_BENCHMARKS = {
    **{f"speed.InterpreterSpeedSuite.track_{p}_ms": "positive" for p in speed.PASSES},
    "numerics.InterpreterNumericsSuite.track_nonfinite_rate": "fraction",
    "numerics.InterpreterNumericsSuite.track_wrong_result_rate": "fraction",
    "numerics.InterpreterNumericsSuite.track_max_rel_error": "non-negative",
    "resources.StaticAuditSuite.track_shared_bytes": "positive",
    "resources.StaticAuditSuite.track_registers": "positive",
    "resources.StaticAuditSuite.track_spills": "non-negative",
}
# (family, impl) entries of InterpreterNumericsSuite that a peer cannot run: stored as
# skipped (None), with the reason on stderr (benchmarks/_grid.py). SDPA has no soft-capping,
# and its dropout cannot be judged: it does not say which pairs it dropped (safeattn.contract).
CPU_PEER_LACKS = {("softcap", "sdpa_math"), ("dropout", "sdpa_math")}


# --- grids and helpers (no asv) ------------------------------------------------------------


def test_fixed_grids_match_the_package():
    # The suites fix their names so old commits get the same grid; they must still be HEAD's.
    assert list(configs.KERNELS) == resources.KERNELS
    assert list(families.FAMILIES) == numerics.FAMILIES
    assert speed.GPU_IMPLS[0] == OWN_IMPL and set(speed.GPU_IMPLS[1:]) <= set(PEERS)
    assert [OWN_IMPL, *PEERS] == numerics.GPU_IMPLS
    assert speed.MASKED_IMPLS[0] == OWN_IMPL and set(speed.MASKED_IMPLS[1:]) <= set(PEERS)


def test_gpu_suites_are_pruned_without_a_gpu():
    usable = bench_env.cuda_usable()
    assert usable == torch.cuda.is_available()
    for module, name in [
        (speed, "SpeedSuite"),
        (speed, "MaskedSpeedSuite"),
        (speed, "ModelStepSuite"),
        (memory, "MemorySuite"),
        (resources, "LiveResourcesSuite"),
        (resources, "LiveBuildResourcesSuite"),
        (numerics, "NumericsSuite"),
        (importlib.import_module("benchmarks.features"), "FeatureSpeedSuite"),
    ]:
        assert hasattr(module, name) == usable, f"{module.__name__}.{name}"


def _with_gpu_suites(module: str, monkeypatch):
    """A fresh copy of ``benchmarks.<module>`` as a GPU machine imports it (its GPU suite
    kept), with CUDA itself faked: for testing the suites' bookkeeping on a CPU."""
    monkeypatch.setattr(bench_env, "cuda_usable", lambda: True)
    spec = importlib.util.spec_from_file_location(
        f"benchmarks._gpu_copy_{module}", REPO / "benchmarks" / f"{module}.py"
    )
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    monkeypatch.setattr(copy, "require_cuda", lambda: None)
    return copy


def test_every_track_method_is_named_after_what_it_reads(monkeypatch):
    """_grid.pass_tracker and field_tracker name a method after the metric it reads; asv names
    the benchmark after the class attribute: both must say the same (GPU suites included)."""
    modules = [_with_gpu_suites(m, monkeypatch) for m in ("speed", "memory", "resources")]
    for module in [*modules, _with_gpu_suites("numerics", monkeypatch)]:
        suites = [c for c in vars(module).values() if isinstance(c, type) and hasattr(c, "params")]
        assert suites, module.__name__
        for suite in suites:
            for name, method in vars(suite).items():
                if name.startswith("track_"):
                    assert method.__name__ == name, (suite.__name__, name, method.__name__)

def test_gpu_grids_record_a_value_or_a_reason_for_every_entry(monkeypatch):
    """SpeedSuite's and MemorySuite's setup_cache with the measurement replaced: every grid
    entry (speed: every pass of it) holds a value, or a Missing reason for a pruned
    FlexAttention head dim and for a shape the implementation refuses."""
    gpu_speed = _with_gpu_suites("speed", monkeypatch)
    gpu_memory = _with_gpu_suites("memory", monkeypatch)

    def measuring(value):
        def measure(impl, dtype, head_dim, seq_len, causal, gqa):
            if impl == "sdpa_efficient" and gqa > 1:
                raise RuntimeError("No available kernel. Aborting execution.")
            return value

        return measure

    times = {name: [1.0, 2.0, 3.0] for name in speed.PASSES}
    monkeypatch.setattr(gpu_speed, "_gpu_times", measuring(times))
    monkeypatch.setattr(gpu_memory, "_peak_extra_bytes", measuring(2**20))
    timed = gpu_speed.SpeedSuite().setup_cache()
    peaks = gpu_memory.MemorySuite().setup_cache()

    combos = list(itertools.product(*gpu_speed.SpeedSuite.params))
    assert set(timed) == {(name, *c) for c in combos for name in speed.PASSES}
    assert set(peaks) == set(combos)
    for combo in combos:
        impl, head_dim, gqa = combo[0], combo[2], combo[5]
        for value in [peaks[combo], *(timed[(name, *combo)] for name in speed.PASSES)]:
            if impl == "flex" and head_dim not in grid.FLEX_HEAD_DIMS:
                assert isinstance(value, grid.Missing) and "pruned" in value.reason
            elif impl == "sdpa_efficient" and gqa > 1:
                assert isinstance(value, grid.Missing) and "No available kernel" in value.reason
            else:
                assert value in ([1.0, 2.0, 3.0], 2**20), (combo, value)


def test_masked_suites_have_the_params_and_versions_issue_11_fixes(monkeypatch):
    """The names the gate, the dashboard and the README report read (DESIGN.md, "New asv
    suites"): exactly these parameters, values, methods and versions."""
    gpu_speed = _with_gpu_suites("speed", monkeypatch)
    masked, model = gpu_speed.MaskedSpeedSuite, gpu_speed.ModelStepSuite
    assert masked.param_names == ("impl", "dtype", "head_dim", "mask")
    assert masked.params == (
        ["safeattn", "flex", "sdpa_cudnn", "sdpa_efficient"],
        ["float16", "bfloat16"],
        [64, 128],
        ["key_padding_causal", "sliding_window", "varlen_docs", "bool_mask"],
    )
    assert masked.version == "masked-speed-2"
    assert model.param_names == ("impl", "seq_len", "padding")
    assert model.params == (["safeattn", "sdpa", "flex"], [2048, 4096], ["none", "left"])
    assert model.version == "model-step-2"
    for suite, metrics in [(masked, ("forward_ms", "backward_ms", "fwd_bwd_ms")),
                           (model, ("step_ms", "peak_bytes"))]:
        tracked = sorted(n.removeprefix("track_") for n in vars(suite) if n.startswith("track_"))
        assert tracked == sorted(metrics), suite
        for metric in metrics:
            assert getattr(suite, f"track_{metric}").unit == METRICS[metric].unit


def test_masked_grids_record_a_value_or_a_reason_for_every_entry(monkeypatch):
    """MaskedSpeedSuite's and ModelStepSuite's setup_cache with the measurement replaced:
    every entry (masked: every pass) holds a value or the Missing reason of a refusal, and
    the track methods return asv's samples protocol or skip with the reason."""
    gpu_speed = _with_gpu_suites("speed", monkeypatch)
    times = {name: [1.0, 2.0, 3.0] for name in speed.PASSES}

    def masked(impl, dtype, head_dim, mask):
        if impl == "sdpa_cudnn" and mask == "varlen_docs":
            raise RuntimeError("No available kernel. Aborting execution.")
        return times

    def model(impl, seq_len, padding):
        if impl == "flex" and seq_len == 4096:
            raise FloatingPointError("loss is nan")
        return {"step_ms": [5.0, 6.0], "peak_bytes": 3 * 2**30}

    monkeypatch.setattr(gpu_speed, "_masked_times", masked)
    monkeypatch.setattr(gpu_speed, "_model_step", model)
    masked_suite, model_suite = gpu_speed.MaskedSpeedSuite(), gpu_speed.ModelStepSuite()
    timed, stepped = masked_suite.setup_cache(), model_suite.setup_cache()

    combos = list(itertools.product(*gpu_speed.MaskedSpeedSuite.params))
    assert len(combos) == 64
    assert set(timed) == {(name, *c) for c in combos for name in speed.PASSES}
    for combo in combos:
        for name in speed.PASSES:
            value = timed[(name, *combo)]
            if combo[0] == "sdpa_cudnn" and combo[3] == "varlen_docs":
                assert isinstance(value, grid.Missing) and "No available" in value.reason
            else:
                assert value == times[name]
    refused = ("sdpa_cudnn", "bfloat16", 128, "varlen_docs")
    with pytest.raises(NotImplementedError, match="No available kernel"):
        masked_suite.setup(timed, *refused)
    ok = ("safeattn", "bfloat16", 128, "bool_mask")
    assert masked_suite.track_backward_ms(timed, *ok) == {"samples": times["backward"], "number": 1}

    model_combos = list(itertools.product(*gpu_speed.ModelStepSuite.params))
    assert set(stepped) == set(model_combos) and len(model_combos) == 12
    for combo in model_combos:
        if combo[0] == "flex" and combo[1] == 4096:
            assert isinstance(stepped[combo], grid.Missing)
            with pytest.raises(NotImplementedError, match="loss is nan"):
                model_suite.setup(stepped, *combo)
        else:
            assert model_suite.track_step_ms(stepped, *combo) == {"samples": [5.0, 6.0],
                                                                  "number": 1}
            assert model_suite.track_peak_bytes(stepped, *combo) == 3 * 2**30


def test_masked_timing_refuses_to_time_a_recompile(monkeypatch, capsys):
    """_masked_times with CUDA faked: the three passes are timed on the mask case's call,
    safeattn's configs are logged; a torch.compile graph compiled during the timed calls
    (a guard failing on a new input) makes the entry a reason, not a sample."""
    from types import SimpleNamespace

    from safeattn.kernels import launch

    gpu_speed = _with_gpu_suites("speed", monkeypatch)
    masks = importlib.import_module("benchmarks._masks")

    class Out:
        def backward(self, _grad, retain_graph=False):
            pass

    case = masks.MaskCase(call=lambda q, k, v: Out(), inputs=(None, None, None, None))
    monkeypatch.setattr(masks, "mask_case", lambda *a, **k: case)
    monkeypatch.setattr(gpu_speed, "cuda_event_samples", lambda call, n, grad_to_none: [1.0])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(launch, "launched_kernels",
                        lambda: {"forward": SimpleNamespace(config="M128-N64-w4-s3")})
    monkeypatch.setattr(launch, "tuning_timings", dict)
    graphs = iter(range(100))
    monkeypatch.setattr(gpu_speed, "dynamo_graphs", lambda: 7)
    monkeypatch.setattr(gpu_measure, "dynamo_graphs", lambda: 7)
    times = gpu_speed._masked_times(OWN_IMPL, "bfloat16", 128, "bool_mask")
    assert times == {name: [1.0] for name in speed.PASSES}
    assert re.search(
        r"\[masked-speed\] \('safeattn', 'bfloat16', 128, 'bool_mask'\) first call \d+\.\d s, "
        r"launched forward=",
        capsys.readouterr().err,
    )
    monkeypatch.setattr(gpu_speed, "dynamo_graphs", lambda: next(graphs))
    monkeypatch.setattr(gpu_measure, "dynamo_graphs", lambda: next(graphs))
    with pytest.raises(RuntimeError, match=r"compiled 1 graph\(s\) inside the timed region"):
        gpu_speed._masked_times("flex", "bfloat16", 128, "bool_mask")


def test_gpu_smoke_prints_every_combination_or_its_reason(monkeypatch):
    """tools/smoke.py (the GPU smoke run outside asv) with the measurements faked: a
    row per selected combination, ms and attended-pair TFLOP/s or the reason, the peer
    ratios per mask kind; --only narrows the grid, --budget-s stops starting entries."""
    smoke = importlib.import_module("tools.smoke")
    gpu_speed = _with_gpu_suites("speed", monkeypatch)

    def masked(impl, dtype, head_dim, mask):
        if impl == "sdpa_cudnn":
            raise RuntimeError("No available kernel. Aborting execution.")
        scale = 2.0 if impl == "flex" else 1.0
        return {"forward": [scale], "backward": [2 * scale], "fwd_bwd": [3 * scale]}

    monkeypatch.setattr(gpu_speed, "_masked_times", masked)
    monkeypatch.setattr(gpu_speed, "_model_step",
                        lambda impl, n, padding: {"step_ms": [50.0], "peak_bytes": 2**31})
    only = smoke.parse_only(["impl=safeattn,flex,sdpa_cudnn", "head_dim=128"])
    text = smoke.run(gpu_speed, ("masked", "model"), only, budget_s=0)
    lines = text.splitlines()
    kp = [ln for ln in lines if ln.startswith("safeattn") and "key_padding_causal" in ln]
    assert len(kp) == 2, text  # two dtypes at head_dim 128
    pairs = workloads.MASK_WORKLOADS["key_padding_causal"].attended_pairs()
    fwd_tflops = 4 * pairs * 16 * 128 / 1e-3 / 1e12
    assert "1.000 / 2.000 / 3.000" in kp[0] and f"{fwd_tflops:.0f} / " in kp[0], kp[0]
    refused = [ln for ln in lines if ln.startswith("sdpa_cudnn")]
    assert len(refused) == 8 and all("not measured: RuntimeError: No available" in ln
                                     for ln in refused)
    ratios = text.split("peer time / safeattn time")[1].splitlines()
    assert ratios[1].split() == ["mask", "pass", "flex", "sdpa_cudnn"]
    assert "bool_mask forward 2.00 (n=2) -" in [" ".join(ln.split()) for ln in ratios], text
    model_lines = [ln for ln in lines if ln.split()[:1] in (["safeattn"], ["flex"])
                   and ("none" in ln.split() or "left" in ln.split())]
    assert len(model_lines) == 8 and all("50.00" in ln and "2.00" in ln for ln in model_lines)
    late = smoke.run(gpu_speed, ("model",), {}, budget_s=1e-9)
    assert late.count("not measured: TimeoutError: not started") == 12, late
    with pytest.raises(ValueError, match="NAME=VALUE"):
        smoke.parse_only(["impl"])


def _fake_launches(monkeypatch, gpu_resources, kernels=("forward", "bwd_dkdv", "bwd_dq")):
    """Fake safeattn's GPU calls for a live-resources suite: each backward "launches"
    ``kernels`` (a fresh record each, as launch._record makes) and tunes one new forward key;
    returns the list of calls made (args of safeattn.attention)."""
    from safeattn.kernels import launch

    tuned: dict = {}
    launched: dict = {}
    calls: list = []

    def fake_attention_call(*args, **kwargs):
        calls.append((args, kwargs))

        class Out:
            def backward(self, _grad):
                tuned[("forward", len(tuned))] = [("M128-N64-w4-s3", 0.4121), ("M64-N64", 0.5)]
                for name in kernels:
                    launched[name] = SimpleNamespace(
                        config=f"{name}-cfg", shared_bytes=1024, registers=128, spills=0
                    )

        return Out()

    monkeypatch.setattr(gpu_resources, "attention_inputs", lambda *a: (None, None, None, None))
    monkeypatch.setattr("safeattn.attention", fake_attention_call)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(launch, "launched_kernels", lambda: dict(launched))
    monkeypatch.setattr(launch, "tuning_timings", lambda: dict(tuned))
    return calls


def test_live_resources_record_each_kernel_and_log_the_tuners_choice(monkeypatch, capsys):
    """LiveResourcesSuite's setup_cache with the GPU call faked: each launched kernel's
    figures are recorded, one not launched is a Missing reason, and the progress line names
    the configs launched and what the tuner timed (the H100 history's live-resource flips
    could not be traced to a config without it)."""
    gpu_resources = _with_gpu_suites("resources", monkeypatch)
    _fake_launches(monkeypatch, gpu_resources)  # three of the four kernels
    measured = gpu_resources.LiveResourcesSuite().setup_cache()

    combos = list(itertools.product(*gpu_resources.LiveResourcesSuite.params))
    assert set(measured) == set(combos)
    for kernel, dtype, head_dim in combos:
        value = measured[(kernel, dtype, head_dim)]
        if kernel == "bwd_preprocess":
            assert isinstance(value, grid.Missing) and "not launched" in value.reason
        else:
            assert value == {"shared_bytes": 1024, "registers": 128, "spills": 0}
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[resources]")]
    assert len(lines) == len(resources.LIVE_DTYPES) * len(resources.LIVE_HEAD_DIMS), lines
    for line in lines:  # each call tuned one new key: only that one is shown
        assert "bwd_dkdv=bwd_dkdv-cfg bwd_dq=bwd_dq-cfg forward=forward-cfg" in line, line
        assert line.count("tuned forward: M128-N64-w4-s3 0.412 ms, M64-N64 0.500 ms") == 1, line


def test_live_build_resources_cover_the_speed_suites_builds(monkeypatch, capsys):
    """LiveBuildResourcesSuite: every causal/GQA build of SpeedSuite but the dense multi-head
    one (LiveResourcesSuite's) and every MaskedSpeedSuite mask kind, each called as those
    suites call it; a kernel launched by an earlier build but not by this one is Missing,
    not the earlier build's figures."""
    gpu_resources = _with_gpu_suites("resources", monkeypatch)
    builds = gpu_resources.LIVE_BUILDS
    assert builds == ["gqa4", "causal", "causal_gqa4", *speed.MASKS]
    assert gpu_resources.SPEED_BUILDS["causal_gqa4"] == (True, 4)
    calls = _fake_launches(monkeypatch, gpu_resources)
    made = []

    def fake_mask_case(kind, impl, dtype, head_dim):
        import safeattn  # the faked safeattn.attention, looked up at call time

        made.append((kind, impl, dtype, head_dim))
        return SimpleNamespace(
            call=lambda q, k, v: safeattn.attention(q, k, v, mask=kind),
            inputs=(None, None, None, None),
        )

    monkeypatch.setattr(gpu_resources._masks, "mask_case", fake_mask_case)
    measured = gpu_resources.LiveBuildResourcesSuite().setup_cache()

    combos = list(itertools.product(*gpu_resources.LiveBuildResourcesSuite.params))
    assert set(measured) == set(combos) and len(combos) == 4 * 2 * 2 * len(builds)
    for kernel, dtype, head_dim, build in combos:
        value = measured[(kernel, dtype, head_dim, build)]
        if kernel == "bwd_preprocess":  # never launched by the fake
            assert isinstance(value, grid.Missing) and "not launched" in value.reason
        else:
            assert value == {"shared_bytes": 1024, "registers": 128, "spills": 0}
    per_call = len(resources.LIVE_DTYPES) * len(resources.LIVE_HEAD_DIMS)
    assert len(made) == per_call * len(speed.MASKS)
    assert {kind for kind, *_ in made} == set(speed.MASKS) and {m[1] for m in made} == {"safeattn"}
    # SpeedSuite's builds call safeattn.attention with their causal flag, masked ones too.
    assert sum(kw.get("causal") is True for _, kw in calls) == per_call * 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[resources]")]
    assert len(lines) == per_call * len(builds), lines
    assert any(ln.startswith("[resources] float16 D=64 causal_gqa4 done") for ln in lines)


def test_live_figures_are_missing_for_a_kernel_this_call_did_not_launch(monkeypatch):
    """Launch records outlive a call: a kernel that an earlier call launched and this one
    did not must read as not launched, not as the earlier call's figures."""
    from safeattn.kernels import launch

    gpu_resources = _with_gpu_suites("resources", monkeypatch)
    stale = {"forward": SimpleNamespace(config="x", shared_bytes=1, registers=2, spills=0)}
    monkeypatch.setattr(launch, "launched_kernels", lambda: dict(stale))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    class Out:
        def backward(self, _grad):  # launches nothing
            pass

    figures, _ = gpu_resources._live_figures(lambda: (lambda q, k, v: Out(), (None,) * 4))
    assert set(figures) == set(resources.KERNELS)
    assert all(isinstance(v, grid.Missing) for v in figures.values()), figures


def test_speed_logs_the_configs_safeattn_runs_with(monkeypatch, capsys):
    """_gpu_times with CUDA faked: for safeattn (not for a peer) the progress log names the
    configs the timed calls run and what the tuner timed for them."""
    from types import SimpleNamespace

    from safeattn.kernels import launch

    gpu_speed = _with_gpu_suites("speed", monkeypatch)
    tuned: dict = {}

    class Out:
        def backward(self, _grad, retain_graph=False):
            tuned.setdefault(("forward",), [("M128-N64-w4-s3", 0.4), ("M64-N64-w4-s3", 0.41)])

    monkeypatch.setattr(gpu_speed, "attention_call", lambda *a: lambda q, k, v: Out())
    monkeypatch.setattr(gpu_speed, "attention_inputs", lambda *a: (None, None, None, None))
    monkeypatch.setattr(gpu_speed, "cuda_event_samples", lambda call, n, grad_to_none: [1.0])
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    launched = {"forward": SimpleNamespace(config="M128-N64-w4-s3")}
    monkeypatch.setattr(launch, "launched_kernels", lambda: dict(launched))
    monkeypatch.setattr(launch, "tuning_timings", lambda: dict(tuned))

    for impl in (OWN_IMPL, "sdpa_flash"):
        times = gpu_speed._gpu_times(impl, "bfloat16", 64, 1024, True, 4)
        assert times == {name: [1.0] for name in speed.PASSES}
    lines = [ln for ln in capsys.readouterr().err.splitlines() if " launched " in ln]
    # the first (compiling, tuning) call's seconds vary: checked for shape, then dropped
    assert all(re.search(r" first call \d+\.\d s, launched ", ln) for ln in lines), lines
    lines = [re.sub(r" first call \d+\.\d s,", "", ln) for ln in lines]
    assert lines == [
        f"[speed] ('{OWN_IMPL}', 'bfloat16', 64, 1024, True, 4) launched forward=M128-N64-w4-s3; "
        "tuned forward: M128-N64-w4-s3 0.400 ms, M64-N64-w4-s3 0.410 ms"
    ], lines


def test_gpu_problem_follows_design_md():
    assert attention.gpu_problem(4096, 128, 1) == (4, 16, 16)
    assert attention.gpu_problem(1024, 64, 4) == (16, 32, 8)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
        ("NVIDIA H200", "nvidia-h200"),
        ("Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "intel-xeon-platinum-8481c"),
    ],
)
def test_machine_names(model, expected):
    assert run_machine.slug(model) == expected


def test_sample_result_and_metric_names_are_checked():
    assert grid.sample_result([2, 1.5]) == {"samples": [2.0, 1.5], "number": 1}
    with pytest.raises(ValueError, match="finite"):
        grid.sample_result([1.0, float("nan")])
    with pytest.raises(ValueError, match="no metric"):

        @grid.tracks_metric
        def track_speed_of_light(self):  # not in METRICS
            return 1

    def track_forward_ms(self):
        return 1.0

    assert grid.tracks_metric(track_forward_ms).unit == "ms"


def test_missing_entries_are_skipped_with_their_reason(capsys):
    cache = {("a",): grid.Missing("peer refuses masks")}
    with pytest.raises(NotImplementedError, match="peer refuses masks"):
        grid.lookup(cache, ("a",))
    assert "peer refuses masks" in capsys.readouterr().err


def test_suite_selections_are_anchored():
    # asv -b is re.search: "NumericsSuite" alone also selected InterpreterNumericsSuite on the
    # H200. Each suite's regex must select its own benchmarks and no other suite's.
    for suite in run_suites.SUITES:
        for other, prefix in run_suites.SUITES.items():
            name = f"{prefix}track_nonfinite_rate('leftpad_causal', 'safeattn')"
            selected = bool(re.search(run_suites.suite_regex(suite), name))
            assert selected == (suite == other), (suite, name)
    assert set(run_suites.GROUPS["gpu"]) | set(run_suites.GROUPS["cpu"]) == set(run_suites.SUITES)
    # SpeedSuite is a suffix of MaskedSpeedSuite: the anchor keeps them apart both ways.
    masked = "speed.MaskedSpeedSuite.track_forward_ms('safeattn', 'bfloat16', 64, 'bool_mask')"
    dense = "speed.SpeedSuite.track_forward_ms('safeattn', 'bfloat16', 64, 1024, True, 1)"
    assert not re.search(run_suites.suite_regex("SpeedSuite"), masked)
    assert not re.search(run_suites.suite_regex("MaskedSpeedSuite"), dense)
    assert {"MaskedSpeedSuite", "ModelStepSuite"} <= set(run_suites.GROUPS["gpu"])


def test_every_discovered_benchmark_belongs_to_a_registered_suite():
    import asv_runner.discovery as discovery

    prefixes = tuple(run_suites.SUITES.values())
    names = [b.name for b in discovery.disc_benchmarks(str(REPO / "benchmarks"))]
    assert names and all(n.startswith(prefixes) for n in names), names


def test_suite_names_expand_in_run_order():
    assert run_suites.expand_suites([], gpu=False) == list(run_suites.GROUPS["cpu"])
    assert run_suites.expand_suites([], gpu=True) == list(run_suites.SUITES)
    expanded = run_suites.expand_suites(["NumericsSuite", "gpu"], gpu=True)
    assert expanded == list(run_suites.GROUPS["gpu"])
    with pytest.raises(SystemExit, match="need a usable CUDA GPU"):
        run_suites.expand_suites(["SpeedSuite"], gpu=False)


def test_measured_suites_read_the_commit_result_file(tmp_path):
    sha = "ab" * 20
    (tmp_path / "m").mkdir()
    data = {"commit_hash": sha, "results": {"numerics.NumericsSuite.track_max_rel_error": []}}
    (tmp_path / "m" / f"{sha[:8]}-env.json").write_text(json.dumps(data))
    (tmp_path / "m" / f"{sha[:8]}-other.json").write_text("{not json")
    assert run_suites.measured_suites(tmp_path, "m", sha) == {"NumericsSuite"}
    assert run_suites.measured_suites(tmp_path, "m", "cd" * 20) == set()


def test_flex_is_pruned_from_the_speed_grid_only_off_its_head_dims():
    assert grid.pruned_reason("flex", 64).startswith("pruned")
    assert grid.pruned_reason("flex", 128) is None
    assert grid.pruned_reason(OWN_IMPL, 64) is None
    assert set(grid.FLEX_HEAD_DIMS) <= set(speed.GPU_HEAD_DIMS)


def test_a_used_budget_starts_no_suite(tmp_path):
    cmd = [sys.executable, str(REPO / "tools" / "run.py"), "--same", "--budget-s", "0.001"]
    cmd += ["--results", str(tmp_path)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not starting StaticAuditSuite" in proc.stdout, proc.stdout
    assert not list(tmp_path.glob("*/*-*.json")), "a suite ran despite the budget"


def test_every_benchmark_follows_the_naming_convention():
    # asv's discovery, through asv itself: every track_ benchmark names a metric, with its unit.
    import asv_runner.discovery as discovery

    found = list(discovery.disc_benchmarks(str(REPO / "benchmarks")))
    assert found, "asv discovered no benchmark"
    for bench in found:
        metric = metric_for(bench.name)
        assert metric is not None, bench.name
        assert bench.unit == metric.unit, bench.name


def test_every_suite_names_its_version():
    # Explicit, not asv's source hash: a refactor must not orphan history, and a shared
    # helper's change must be able to bump it (benchmarks/_grid.py says when). Read from
    # the source: without a GPU the GPU suites are not defined at import (pruned).
    import ast

    import asv_runner.discovery as discovery

    versions = {}
    for path in (REPO / "benchmarks").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and node.name in run_suites.SUITES:
                assigned = {
                    target.id: stmt.value
                    for stmt in node.body
                    if isinstance(stmt, ast.Assign)
                    for target in stmt.targets
                    if isinstance(target, ast.Name)
                }
                assert "version" in assigned, f"{node.name} has no version of its own"
                versions[node.name] = ast.literal_eval(assigned["version"])
    assert set(versions) == set(run_suites.SUITES)
    assert len(set(versions.values())) == len(versions), versions  # distinct per suite
    found = list(discovery.disc_benchmarks(str(REPO / "benchmarks")))
    assert found
    for bench in found:
        assert bench.version == versions[bench.name.split(".")[1]], bench.name


# --- a real asv run of the CPU-capable part -----------------------------------------------


@pytest.fixture(scope="module")
def asv_run():
    return asv_cpu_run()


def _check(kind: str, value: float) -> bool:
    if kind == "positive":
        return math.isfinite(value) and value > 0
    if kind == "fraction":
        return 0.0 <= value <= 1.0
    return math.isfinite(value) and value >= 0


def test_asv_wrote_results_for_head(asv_run):
    files = asv_run.result_files()
    assert len(files) == 1, files
    data = json.loads(files[0].read_text())
    assert data["commit_hash"] == asv_run.commit
    assert set(CPU_BENCHMARKS) <= set(data["results"]), sorted(data["results"])
    assert "[run] machine" in asv_run.log and "[run] done" in asv_run.log
    # Per-suite wall times, and the suites' progress echoed while asv ran.
    for suite in run_suites.GROUPS["cpu"]:
        assert f"[run] {suite} on {asv_run.commit[:8]}: " in asv_run.log, suite
    # asv stored each suite's explicit version with its results (not a hash of the source).
    columns = data["result_columns"]
    for name, row in data["results"].items():
        version = dict(zip(columns, row, strict=False))["version"]
        module_name, class_name, _ = name.split(".")
        expected = getattr(importlib.import_module(f"benchmarks.{module_name}"), class_name).version
        assert version == expected, (name, version)
    assert "[numerics-cpu] grid measured in" in asv_run.log
    # The static audit says where its rows came from: the audit cache (safeattn/audit_cache.json
    # holds HEAD's key for CI's Triton: tests/test_audit.py), else compiles, which report as
    # they go (minutes on a CPU without it: silence).
    audit_line = re.search(r"\[audit\] \d+ config rows in \d+ s: (.*)", asv_run.log)
    assert audit_line, asv_run.log[-2000:]
    if "from the audit cache" not in audit_line.group(1):
        assert re.search(r"\[audit\] \d+/\d+ compiled", asv_run.log), asv_run.log[-2000:]


@pytest.mark.parametrize("bench_name", sorted(CPU_BENCHMARKS))
def test_cpu_benchmark_values(asv_run, bench_name):
    described = asv_run.benchmarks()[bench_name]
    assert described["unit"] == METRICS[bench_name.rsplit("track_", 1)[1]].unit
    values = asv_run.values(bench_name)
    assert values, bench_name
    kind = CPU_BENCHMARKS[bench_name]
    lacks = set()
    if bench_name.startswith("numerics."):
        lacks = {c for c in values if tuple(p.strip("'") for p in c[:2]) in CPU_PEER_LACKS}
    skipped = {c for c, v in values.items() if v is None or math.isnan(v)}  # asv: NaN
    assert skipped == lacks, f"{bench_name}: skipped {skipped}, expected exactly {lacks}"
    bad = {c: v for c, v in values.items() if c not in lacks and not _check(kind, v)}
    assert not bad, f"{bench_name}: not a {kind} number for {bad}"


def test_speed_results_carry_statistics(asv_run):
    # The samples protocol: asv stored a confidence interval and the repeat count.
    data = json.loads(asv_run.result_files()[-1].read_text())
    name = "speed.InterpreterSpeedSuite.track_fwd_bwd_ms"
    row = dict(zip(data["result_columns"], data["results"][name], strict=False))
    assert all(r >= 2 for r in row["stats_repeat"]), row
    bounds = zip(row["stats_ci_99_a"], row["result"], row["stats_ci_99_b"], strict=True)
    for low, mid, high in bounds:
        assert low <= mid <= high


def test_reference_is_measured_beside_safeattn(asv_run):
    values = asv_run.values("speed.InterpreterSpeedSuite.track_forward_ms")
    impls = {combo[0].strip("'") for combo in values}
    assert impls == {OWN_IMPL, "reference"}


def test_machine_and_versions_sidecar(asv_run):
    machine = json.loads((asv_run.machine_dir / "machine.json").read_text())
    assert machine["machine"] == asv_run.machine
    expected_prefix = "nvidia-" if torch.cuda.is_available() else "cpu-"
    assert asv_run.machine.startswith(expected_prefix)
    data = json.loads(asv_run.result_files()[-1].read_text())
    sidecar_path = asv_run.machine_dir / f"versions-{data['commit_hash']}.json"
    sidecar = json.loads(sidecar_path.read_text())
    assert sidecar["schema"] == run_machine.SIDECAR_SCHEMA
    assert sidecar["machine"] == asv_run.machine
    assert sidecar["torch"] == torch.__version__
    import triton

    assert sidecar["triton"] == triton.__version__
    assert (sidecar["gpu"] is None) == (not torch.cuda.is_available())
    assert sidecar["result_file"] == asv_run.result_files()[-1].name


def test_peer_ratios_from_the_run(asv_run):
    peer_ratios = importlib.import_module("tools.peer_ratios")
    table = peer_ratios.ratio_table(asv_run.results, None, None, "speed.InterpreterSpeedSuite")
    assert set(table["metric"]) == {f"{p}_ms" for p in speed.PASSES}
    assert len(table) == 3 * len(speed.CAUSAL)
    assert (table["reference"] > 0).all()


def test_benchmarks_json_keeps_what_this_machine_did_not_discover(tmp_path):
    path = tmp_path / "benchmarks.json"
    before = {"speed.SpeedSuite.track_forward_ms": {"unit": "ms"}, "version": 2}
    path.write_text(json.dumps({"speed.InterpreterSpeedSuite.track_forward_ms": {}, "version": 2}))
    run_results.merge_benchmarks_json(path, before)
    merged = json.loads(path.read_text())
    assert merged["speed.SpeedSuite.track_forward_ms"] == {"unit": "ms"}
    assert "speed.InterpreterSpeedSuite.track_forward_ms" in merged


def test_asv_writes_into_a_staging_copy_and_results_keep_every_description(tmp_path):
    """While asv runs, results/benchmarks.json keeps the GPU suites' descriptions (a
    dashboard reads results/ during make demo); what asv wrote arrives when published."""
    results, staging = tmp_path / "results", tmp_path / "staging"
    (results / "cpu-x").mkdir(parents=True)
    described = {"speed.SpeedSuite.track_forward_ms": {"unit": "ms"},
                 "speed.InterpreterSpeedSuite.track_forward_ms": {"unit": "old"}}  # fmt: skip
    (results / "benchmarks.json").write_text(json.dumps(described))
    (results / "cpu-x" / "machine.json").write_text('{"machine": "cpu-x"}')
    run_results.stage(results, staging, "cpu-x")
    assert (staging / "cpu-x" / "machine.json").read_text() == '{"machine": "cpu-x"}'
    # asv: a fresh discovery (no GPU suite on a CPU machine) and a result file.
    (staging / "benchmarks.json").write_text(
        json.dumps({"speed.InterpreterSpeedSuite.track_forward_ms": {"unit": "ms"}})
    )
    (staging / "cpu-x" / "abc12345-env.json").write_text('{"commit_hash": "abc"}')
    assert json.loads((results / "benchmarks.json").read_text()) == described
    assert not (results / "cpu-x" / "abc12345-env.json").exists()
    assert run_results.publish(staging, results, "cpu-x") == ["abc12345-env.json"]
    merged = json.loads((results / "benchmarks.json").read_text())
    assert merged["speed.SpeedSuite.track_forward_ms"] == {"unit": "ms"}
    assert merged["speed.InterpreterSpeedSuite.track_forward_ms"] == {"unit": "ms"}
    assert (results / "cpu-x" / "abc12345-env.json").read_text() == '{"commit_hash": "abc"}'
    assert run_results.publish(staging, results, "cpu-x") == []  # nothing new: nothing copied
    assert not list(results.rglob("*.tmp"))


def test_the_venv_layout_carries_every_file_the_suite_loads_by_path():
    # _truth._load_truth reads these from the suite's checkout; a clone at HEAD with the
    # working tree's benchmarks/ but an older package would lack a new one.
    from asv_helpers import TRUTH_FILES

    loaded = re.findall(r'_load_truth\("([^"]+)"', (REPO / "benchmarks/_truth.py").read_text())
    assert loaded and set(loaded) == set(TRUTH_FILES)


def test_default_mode_from_a_venv_whose_base_lacks_torch(tmp_path):
    # The H200 layout that broke: torch only in a venv, asv's virtualenv made from the venv's
    # base with --system-site-packages, torch reaching it only through ASV_PYTHONPATH, which
    # asv 0.6.6 strips again in benchmark.py (see benchmarks/_env.restore_pythonpath).
    # Measured on 2 busy cores: ~20-40 s (venv, clone, asv virtualenv, build, one tiny suite).
    base = torchless_python()
    if base is None:
        pytest.skip("no interpreter of this Python version without torch to build the layout")
    layout = make_venv_layout(tmp_path, base)
    missing = [m for m in run_invocation.ENV_PREREQUISITES if importlib.util.find_spec(m) is None]
    if missing and not (layout.clone / ".whl").is_dir():
        pytest.skip(
            f"the offline benchmark virtualenv needs {missing} (pip install safeattn[bench])"
        )
    results = tmp_path / "results"
    cmd = [str(layout.python), "tools/run.py", "--quick", "--results", str(results)]
    cmd += ["--bench", r"^speed\.InterpreterSpeedSuite\."]
    start = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=layout.clone, env=layout.env, capture_output=True, text=True, timeout=300
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    assert "No module named" not in log, log[-6000:]
    # The layout is what it claims: the benchmark virtualenv cannot import torch by itself.
    (env_python,) = (layout.clone / ".asv" / "env").glob("*/bin/python")
    bare = subprocess.run([str(env_python), "-c", "import torch"], capture_output=True, text=True)
    assert bare.returncode != 0, "the benchmark virtualenv sees torch without ASV_PYTHONPATH"
    (result_file,) = [
        p
        for p in results.glob("*/*.json")
        if p.name != "machine.json" and not p.name.startswith("versions-")
    ]
    data = json.loads(result_file.read_text())
    for name in (f"speed.InterpreterSpeedSuite.track_{p}_ms" for p in speed.PASSES):
        row = dict(zip(data["result_columns"], data["results"][name], strict=False))
        assert all(v is not None and v > 0 for v in row["result"]), (name, row["result"])
    print(f"venv-layout run: {time.monotonic() - start:.0f} s")


@pytest.mark.parametrize("preset", [None, "/tmp/somewhere/else"])
def test_benchmark_processes_share_one_triton_cache(preset, tmp_path):
    """Importing the suites' helpers pins TRITON_CACHE_DIR (unless set), so that Inductor,
    which otherwise moves it to its own folder in a process once it builds a kernel, and
    safeattn compile into the same cache in the prewarm and in the suites."""
    import os

    code = (
        "import os, benchmarks._env\n"
        "from torch._inductor.runtime.cache_dir_utils import triton_cache_dir\n"
        "print(os.environ['TRITON_CACHE_DIR']); print(triton_cache_dir(0))\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_CACHE_DIR", "TRITON_HOME")}
    env["HOME"] = str(tmp_path)
    if preset:
        env["TRITON_CACHE_DIR"] = preset
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                         text=True, check=True).stdout.split()  # fmt: skip
    expected = preset or str(tmp_path / ".triton" / "cache")
    assert out == [expected, expected]


@pytest.mark.parametrize("preset", [None, "/opt/cuda/bin/ptxas"])
def test_benchmark_processes_share_one_assembler(preset, tmp_path):
    """Importing the suites' helpers pins TRITON_PTXAS_PATH to torch's ptxas (unless set), so
    that a safeattn kernel is assembled by the same ptxas whether Inductor (which points
    Triton at torch's ptxas once it compiles) ran before it in the process or not. Here a fake
    torch package with an executable bin/ptxas stands in for a CUDA wheel."""
    import os

    fake = tmp_path / "site" / "torch"
    (fake / "bin").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    ptxas = fake / "bin" / "ptxas"
    ptxas.write_text("#!/bin/sh\n")
    ptxas.chmod(0o755)
    code = "import os, benchmarks._env; print(os.environ.get('TRITON_PTXAS_PATH'))"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_PTXAS_PATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(tmp_path / "site")])
    if preset:
        env["TRITON_PTXAS_PATH"] = preset
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                         text=True, check=True).stdout.split()  # fmt: skip
    assert out == [preset or str(ptxas)]


def test_no_assembler_is_pinned_where_torch_ships_none(tmp_path):
    """A torch without its own ptxas (the CPU wheel): Triton keeps its bundled one."""
    from benchmarks import _env

    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "ptxas").write_text("not executable")
    assert _env.torch_ptxas(tmp_path) is None
    (tmp_path / "_inductor" / "bin").mkdir(parents=True)
    inductor = tmp_path / "_inductor" / "bin" / "ptxas"
    inductor.write_text("#!/bin/sh\n")
    inductor.chmod(0o755)
    assert _env.torch_ptxas(tmp_path) == str(inductor)


def test_grids_measure_only_the_selected_combinations(monkeypatch):
    """$SAFEATTN_BENCH_ONLY narrows a suite's setup_cache grid; the rest is skipped (NaN)."""
    measured = []
    combos = [("safeattn", "bfloat16", 128), ("flex", "bfloat16", 128), ("safeattn", "float16", 64)]
    monkeypatch.setenv(grid.ONLY_ENV, json.dumps([r"^\('safeattn', 'bfloat16', 128\)$"]))
    result = grid.measure_grid("t", combos, lambda *c: measured.append(c) or 1.0, str)
    assert measured == [combos[0]] and result[combos[0]] == 1.0
    assert all(isinstance(result[c], grid.Missing) for c in combos[1:])
    monkeypatch.delenv(grid.ONLY_ENV)
    measured.clear()
    grid.measure_grid("t", combos, lambda *c: measured.append(c) or 1.0, str)
    assert measured == combos


@pytest.mark.parametrize("first", ["triton", "safeattn"])
def test_the_interpreter_is_refused_after_an_early_import(first):
    """A CPU suite in a process that imported triton or safeattn before TRITON_INTERPRET=1
    would measure nothing (every safeattn row "not measured"): it must say why instead."""
    code = (
        f"import {first}\n"
        "from benchmarks._env import use_interpreter\n"
        "try:\n"
        "    use_interpreter()\n"
        "except RuntimeError as exc:\n"
        "    print('refused:', exc)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                         text=True)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert f"refused: benchmarks: {first} was imported before TRITON_INTERPRET=1" in res.stdout
