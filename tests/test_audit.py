"""The static resource audit cross-compiles without a GPU and catches configs over a limit.

The full audit (every kernel, config, dtype, head dim and architecture: 2,574 compiles) is
``python -m safeattn.audit``; its rows are committed (``safeattn/audit_cache.json``), and CI
checks that they cover every job and that every row fits. CI also audits the tightest
architecture for one kernel afresh, and checks the audit cache (``safeattn/audit_cache.py``):
the committed rows equal that fresh compile, a changed source or Triton version misses, and a
miss compiles only what is missing.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from safeattn import audit, audit_cache
from safeattn.gpu_limits import ARCHS
from safeattn.kernels import configs
from safeattn.kernels.configs import KernelConfig

PACKAGE = Path(audit.__file__).resolve().parent
RECORD_HINT = (
    "HINT: the kernel sources, config tables, architecture list, audit or Triton version "
    "changed since safeattn/audit_cache.json was recorded; run `python -m safeattn.audit "
    "--record` (everything; ~2.5 hours on 2 cores, less where Triton's cache has the "
    "unchanged kernels) with the Triton CI installs, and commit the file."
)


def committed_rows(slices: list[tuple[str, str, str, int]]) -> list[dict]:
    """The committed cache's rows of ``slices`` under this checkout's key. On CI a missing
    key fails (make demo and the asv suite would compile for ~20 minutes); elsewhere (a GPU
    machine's Triton) it skips."""
    key = audit_cache.audit_key(PACKAGE)
    rows, missing = audit_cache.lookup(key, slices, [audit_cache.COMMITTED])
    if missing:
        message = (f"safeattn/audit_cache.json has no rows for key {key['key'][:12]} "
                   f"(triton {key['triton']}) of {sorted(missing)}.\n{RECORD_HINT}")  # fmt: skip
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return rows


def test_every_config_shipped_to_sm86_fits_it_and_the_cache_holds_exactly_that():
    lines: list[str] = []
    rows = audit.audit(
        archs=["sm86"], kernels=["forward"], dtypes=[torch.bfloat16], head_dims=[128],
        variants=["causal"], workers=1, progress=lines.append,
    )  # fmt: skip
    assert lines[-1] == f"[audit] {len(rows)}/{len(rows)} compiled", lines
    shipped = configs.candidates("forward", 128, torch.bfloat16, ARCHS["sm86"].smem_optin_bytes)
    assert {r.config for r in rows} == {str(c) for c in shipped}
    for r in rows:
        assert not r.error, r
        assert 0 < r.shared_bytes <= r.smem_limit == 101_376, r
        assert 0 < r.registers <= 255, r
    # The committed rows of this slice are what this compile produced, field for field.
    cached = committed_rows([("forward", "sm86", "bfloat16", 128)])
    cached_causal = sorted((r for r in cached if r["variant"] == "causal"), key=str)
    assert cached_causal == sorted((asdict(r) for r in rows), key=str)
    # the variants audited for the forward kernel ("dbias" is the dQ kernels' alone)
    jobs = audit._jobs(["sm86"], ["forward"], [torch.bfloat16], [128], audit.VARIANTS)
    audited = {job[4] for job in jobs}
    assert "dbias" not in audited and {r["variant"] for r in cached} == audited
    # `python -m safeattn.audit` reads them (AuditRow objects) instead of compiling.
    read, source = audit.cached(["sm86"], ["forward"], [torch.bfloat16], [128], workers=1)
    assert "from the audit cache" in source, source
    assert sorted(map(asdict, read), key=str) == sorted(cached, key=str)


def test_the_committed_cache_covers_the_asv_suites_grid():
    """make demo, CI and an asv run of HEAD read the static audit instead of compiling it."""
    import importlib

    import _serve  # noqa: F401  (puts the checkout on sys.path for `benchmarks`)

    resources = importlib.import_module("benchmarks.resources")
    grid = [
        (k, a, d, h)
        for k in resources.KERNELS
        for a in ARCHS  # the full grid (quick mode audits one slice of it)
        for d in ("bfloat16", "float32")
        for h in (64, 128, 256)
    ]
    rows = committed_rows(grid)
    assert {audit_cache.slice_of(r) for r in rows} == set(grid) - {
        s for s in grid if not configs.candidates(s[0], s[3], getattr(torch, s[2]), None)
    }


def test_the_committed_audit_is_everything_shipped_and_every_row_fits():
    """The committed cache holds the whole audit (``--record`` without filters): one row per
    job the audit would compile (kernel × arch × dtype × head-dim tile × variant × shipped
    config), and none over its architecture's limit or failed to compile. A config shipped to
    a GPU it does not fit, or a cache recorded for part of the grid, fails here."""
    jobs = list(audit._jobs(list(ARCHS), list(audit.KERNELS), list(configs.DTYPES),
                            list(configs.HEAD_DIM_BUCKETS), list(audit.VARIANTS)))  # fmt: skip
    rows = committed_rows({(k, a.name, audit._DTYPE_NAMES[d], h) for k, a, d, h, *_ in jobs})
    assert sorted((r["kernel"], r["arch"], r["dtype"], r["head_dim"], r["variant"], r["config"])
                  for r in rows) == sorted(
        (k, a.name, audit._DTYPE_NAMES[d], h, variant, str(c)) for k, a, d, h, variant, c in jobs
    )  # fmt: skip
    bad = [r for r in rows if not r["fits"] or r["error"]]
    assert not bad, bad[:5]


def _package_copy(root: Path) -> Path:
    for name in audit_cache.KEY_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(PACKAGE / name, root / name)
    return root


def test_a_changed_source_or_triton_version_is_another_key_and_misses(tmp_path):
    copy = _package_copy(tmp_path / "safeattn")
    key = audit_cache.audit_key(PACKAGE)
    assert audit_cache.audit_key(copy) == key  # the same bytes: the same key
    slices = [("forward", "sm86", "bfloat16", 128)]
    committed_rows(slices)  # present under the unchanged key
    with open(copy / "kernels" / "forward.py", "a") as f:
        f.write("\n# an edit\n")
    edited = audit_cache.audit_key(copy)
    assert edited["key"] != key["key"]
    assert edited["sources"]["kernels/forward.py"] != key["sources"]["kernels/forward.py"]
    assert audit_cache.lookup(edited, slices, [audit_cache.COMMITTED]) == ([], set(slices))
    other_triton = audit_cache.audit_key(PACKAGE, triton="0.0.1")
    assert other_triton["key"] != key["key"]
    assert audit_cache.lookup(other_triton, slices, [audit_cache.COMMITTED])[1] == set(slices)
    (copy / "blockmask.py").unlink()  # a commit without a file: a key of its own
    assert audit_cache.audit_key(copy)["sources"]["blockmask.py"] == "absent"


def test_a_miss_compiles_only_the_missing_slices_and_keeps_them(tmp_path, monkeypatch):
    """The mechanism, with a stand-in compiler: the second call compiles nothing; with the
    cache off, every call compiles."""
    monkeypatch.setenv(audit_cache.ENV, str(tmp_path / "store"))
    calls: list[tuple] = []

    def compile_slices(archs, kernels, dtypes, head_dims):
        calls.append((tuple(archs), tuple(kernels), tuple(dtypes), tuple(head_dims)))
        return [
            dict(kernel=k, arch=a, dtype=d, head_dim=h, variant="causal", config="M1",
                 shared_bytes=len(calls), registers=1, spills=0, smem_limit=9, fits=True,
                 error="")
            for k in kernels for a in archs for d in dtypes for h in head_dims
        ]  # fmt: skip

    empty = tmp_path / "committed.json"
    args = (compile_slices, PACKAGE, ["sm80", "sm86"], ["forward"], ["bfloat16"], [64])
    first, source = audit_cache.cached_audit(*args, committed=empty)
    assert len(calls) == 1 and "compiled" in source and len(first) == 2
    again, source = audit_cache.cached_audit(*args, committed=empty)
    assert len(calls) == 1 and "from the audit cache" in source
    assert sorted(again, key=str) == sorted(first, key=str)
    # One more architecture: only it is compiled; the stored slices are read.
    wider = (compile_slices, PACKAGE, ["sm80", "sm86", "sm90"], ["forward"], ["bfloat16"], [64])
    more, _ = audit_cache.cached_audit(*wider, committed=empty)
    assert calls[-1] == (("sm90",), ("forward",), ("bfloat16",), (64,))
    assert len(more) == 3 and {r["shared_bytes"] for r in more} == {1, 2}
    monkeypatch.setenv(audit_cache.ENV, "off")
    audit_cache.cached_audit(*args, committed=empty)
    assert len(calls) == 3


def test_audit_flags_a_config_over_the_limit():
    """A Hopper-sized config, compiled for sm86, needs more than sm86 has: fits=False."""
    big = KernelConfig(128, 128, 8, 3)
    assert big in configs.candidates("forward", 128, torch.bfloat16, None)
    assert big not in configs.candidates("forward", 128, torch.bfloat16, 101_376)
    [row] = audit.audit(
        archs=["sm86"], kernels=["forward"], dtypes=[torch.bfloat16], head_dims=[128],
        variants=["causal"], workers=1, configs_override=[big],
    )  # fmt: skip
    assert row.config == str(big)
    assert row.shared_bytes > row.smem_limit and not row.fits


def test_the_dkdv_kernel_compiles_for_every_architecture_with_its_pair_rule():
    """``hopper.pairs``: the dK/dV kernel loads the LSE and delta as one pair on sm90 at 64
    keys and 3 stages or more; Triton 3.9 failed to compile the pair for sm80/86/89 and for
    sm90's 32-key D = 256 tiles (2026-12-03). A causal fp16 build per architecture at D = 64
    with a tile sm90 pairs, and sm90's at D = 256 with 32 keys, compiled afresh with this
    Triton."""
    cfg, cfg_256 = KernelConfig(64, 64, 4, 3), KernelConfig(64, 32, 4, 3)
    for arch in ARCHS.values():
        cx = audit._constexprs("bwd_dkdv", cfg, torch.float16, 64, "causal", arch.capability)
        assert cx["PAIR_STATS"] == (arch.name == "sm90"), arch
    assert not audit._constexprs("bwd_dkdv", cfg_256, torch.float16, 256, "causal")["PAIR_STATS"]
    rows = audit.audit(
        kernels=["bwd_dkdv"], dtypes=[torch.float16], head_dims=[64], variants=["causal"],
        workers=2, configs_override=[cfg],
    ) + audit.audit(
        archs=["sm90"], kernels=["bwd_dkdv", "bwd_dkdv_tma"], dtypes=[torch.float16],
        head_dims=[256], variants=["causal"], workers=2, configs_override=[cfg_256],
    )  # fmt: skip
    assert sorted(r.arch for r in rows) == sorted([*ARCHS, "sm90", "sm90"])
    for r in rows:
        assert not r.error and r.registers > 0, r


def test_dropout_needs_are_known_to_the_config_choice():
    """Dropout's Philox tile adds shared memory to the forward: a config that fits sm86 with a
    block mask does not with dropout, so candidates() must drop it (the audit found it over)."""
    cfg, bf16 = KernelConfig(64, 64, 4, 3), torch.bfloat16
    assert cfg in configs.candidates("forward", 128, bf16, 101_376, masked=True)
    assert cfg not in configs.candidates("forward", 128, bf16, 101_376, True, dropout=True)
    assert cfg in configs.candidates("forward", 128, bf16, 232_448, True, dropout=True)
