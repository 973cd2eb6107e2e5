"""``tools/compiled_step.py`` (eager vs torch.compile training step, a GPU script) on a
CPU: its command line, its grid and table with the measurements faked, and the function it
compiles, traced in one graph on the tiny model (safeattn under Triton's interpreter)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest
import torch
from asv_helpers import REPO
from torch._dynamo.utils import counters

from regress import workloads
from safeattn import blockmask
from safeattn.kernels import launch

sys.path.insert(0, str(REPO))  # the benchmarks package lives at the repository root
compiled_step = importlib.import_module("tools.compiled_step")
llama = importlib.import_module("benchmarks._llama")

TINY_MODEL = workloads.ModelConfig(
    layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=96, vocab=101
)


def test_help_runs_and_the_module_imports_no_torch():
    # asv imports every module under benchmarks/: the standard library only at import.
    code = "import sys, tools.compiled_step; print('torch' in sys.modules)"
    imported = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                              text=True, timeout=120, check=True)  # fmt: skip
    assert imported.stdout.strip() == "False"
    shown = subprocess.run([sys.executable, "-m", "tools.compiled_step", "--help"],
                           cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "--json" in shown.stdout and "--seq-len" in shown.stdout


def test_default_grid_eager_first_flex_last():
    combos = compiled_step.grid(compiled_step.parse_args([]))
    assert len(combos) == 3 * 2 * 2 + 2 * 2 * 2  # flex has no compiled mode of its own
    assert combos[0] == ("safeattn", "eager", 2048, "none")
    assert [c[0] for c in combos[-4:]] == ["flex"] * 4
    assert ("flex", "compiled", 2048, "none") not in combos
    modes = [c[1] for c in combos if c[0] != "flex"]
    assert modes == sorted(modes, key=lambda m: m != "eager")  # eager tunes first


def test_options_restrict_the_grid():
    args = compiled_step.parse_args(["--impl", "safeattn", "--mode", "compiled",
                                     "--seq-len", "1024", "--padding", "left"])  # fmt: skip
    assert compiled_step.grid(args) == [("safeattn", "compiled", 1024, "left")]
    with pytest.raises(SystemExit):
        compiled_step.parse_args(["--impl", "xformers"])
    with pytest.raises(SystemExit):
        compiled_step.parse_args(["--samples", "0"])


def test_run_with_faked_measurements_makes_the_table():
    args = compiled_step.parse_args(["--impl", "safeattn", "--impl", "sdpa", "--seq-len", "2048"])
    measured = []

    def measure(steps, impl, mode, seq_len, padding, samples):
        measured.append((impl, mode, seq_len, padding))
        if impl == "sdpa" and mode == "compiled" and padding == "left":
            raise RuntimeError("Dynamo failed\nsecond line")
        ms = 10.0 if mode == "eager" else 8.0
        return {"step_ms": [ms, ms + 1, ms - 1], "peak_bytes": 3 * 2**30}

    def explain(impl, padding, seq_len):
        return {"graph_breaks": 0, "reasons": []}

    rows, breaks = compiled_step.run(args, measure, explain)
    assert measured == [tuple(r[k] for k in ("impl", "mode", "seq_len", "padding")) for r in rows]
    assert breaks == {"safeattn/none": {"graph_breaks": 0, "reasons": []},
                      "safeattn/left": {"graph_breaks": 0, "reasons": []}}  # fmt: skip
    table = compiled_step.markdown_table(rows)
    lines = table.splitlines()
    assert lines[0].startswith("| impl | mode | seq_len | padding | step ms (median)")
    assert len(lines) == 2 + len(rows) == 2 + 8
    assert "| safeattn | compiled | 2048 | none | 8.00 | 3.00 | 1.25x | 0 |" in table
    assert "not measured: RuntimeError: Dynamo failed |" in table
    json.dumps(rows)  # what --json writes

    late = compiled_step.parse_args(["--impl", "sdpa", "--mode", "eager", "--budget-s", "1e-9"])
    rows, _ = compiled_step.run(late, measure, explain)
    assert rows and all(r["error"] == "not started: --budget-s used up" for r in rows)


needs_kernels = pytest.mark.skipif(
    not launch.INTERPRET and not torch.cuda.is_available(),
    reason="runs the Triton kernels: set TRITON_INTERPRET=1 on a CPU",
)


@needs_kernels
def test_compiled_loss_is_one_graph_and_matches_eager(device):
    """What the compiled mode compiles: the safeattn loss with a left-padding mask (the
    unpadded loss is the same graph without the mask) in one graph (no break, so
    fullgraph=True holds), the sequence dimension dynamic (a second length reuses the
    graph), with the loss and gradients of the eager step."""
    torch._dynamo.reset()
    counters.clear()
    loss_fn = compiled_step.model_loss("safeattn", TINY_MODEL)
    compiled = torch.compile(loss_fn, fullgraph=True, backend="aot_eager")
    tile = blockmask.block_size(torch.device(device))  # 32 interpreted, 128 on a GPU
    for seq_len in (2 * tile, 3 * tile):  # one tile would specialise (a size-1 dimension)
        pads = (0, seq_len // 2)  # B=2: the interpreter's time grows with B and N
        batch = llama.make_batch(TINY_MODEL, pads, seq_len, device)
        fresh = compiled_step._with_new_mask(batch)
        compiled_step.mark_seq_dynamic(fresh)
        grads = []
        for fn, b in ((compiled, fresh), (loss_fn, batch)):
            params = llama.init_params(TINY_MODEL, device, "float32")
            value = fn(params, b)
            value.backward()
            grads.append((value.detach(), [p.grad for p in params.values()]))
        (got, got_grads), (want, want_grads) = grads
        torch.testing.assert_close(got, want)
        for g, w in zip(got_grads, want_grads, strict=True):
            torch.testing.assert_close(g, w, atol=1e-6, rtol=1e-4)
    assert dict(counters["graph_break"]) == {}
    assert counters["stats"]["unique_graphs"] == 1
    torch._dynamo.reset()
