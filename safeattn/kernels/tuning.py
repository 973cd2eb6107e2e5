"""Reproducible config choice: the committed tuning tables and the user's tuning cache.

Which config a kernel launches must not depend on which process launched it: near-tied
configs swap places from one process's timings to the next, and the merge gate cannot tell
such a swap from a regression. So ``launch._launch`` looks a choice up, in this order:

1. **The committed table** of this GPU, ``tuning_tables/<gpu>.json`` inside this package
   (``<gpu>``: the CUDA device name's slug, ``nvidia-h100-80gb-hbm3``, as the asv machine
   is named by tools/run.py; else the architecture, ``sm90``). Written by
   ``python -m tools.tune`` on that GPU and reviewed like code.
2. **The user's tuning cache**, one file per GPU in ``~/.cache/safeattn/tuning/``
   (``$SAFEATTN_TUNING_CACHE``: another folder, or ``0``/``off`` for no cache at all):
   what the tuner chose in an earlier process for a key the table lacks.
3. **The tuner** (``launch._choose``), whose choice is then written to the cache, so the
   next process launches the same kernel. The cache is never invalidated by a code change on
   purpose: delete the file to re-tune (a kernel change that moves the best config belongs
   in the table, measured by the sweep).

A stored config is used only if it is one of the shipped candidates that fits this GPU
(``configs.candidates``, then the compiled kernel's shared memory); otherwise the launcher
logs why and tunes. ``$SAFEATTN_TUNING_TABLE``: ``0`` ignores the tables (the sweep does),
a folder reads the tables there instead.

Both kinds of file have one format (:func:`dumps`): a JSON object with ``schema``, ``gpu``,
``about`` and ``entries``, one entry per line, sorted, keyed by :func:`key_text` of
``configs.tune_key``::

    "forward bfloat16 d128 q4096 k4096 varlen=0 ... deterministic=0":
        {"config": "M64-N64-w4-s3", "times_ms": {"M64-N64-w4-s3": 0.4121, ...}}

``times_ms`` is the tuner's evidence (median ms per fitting candidate; empty when only one
candidate was left to choose, e.g. the only spill-free one), kept for review;
only ``config`` is read back. Writes are atomic (a temporary file, then
``os.replace``) under an advisory lock, so concurrent processes never leave a torn file.

Decisions are logged on the ``safeattn.tuning`` logger: a tuned key at INFO, a stored
choice that cannot be used and an unreadable file at WARNING, table and cache hits at DEBUG.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

SCHEMA = "safeattn-tuning/1"
TABLE_DIR = Path(__file__).resolve().with_name("tuning_tables")
TABLE_ENV = "SAFEATTN_TUNING_TABLE"
CACHE_ENV = "SAFEATTN_TUNING_CACHE"
DEFAULT_CACHE_DIR = Path("~/.cache/safeattn/tuning")
OFF_VALUES = ("0", "off")

log = logging.getLogger("safeattn.tuning")

_WARNED: set[str] = set()  # unreadable files already reported in this process


def gpu_slug(name: str) -> str:
    """``"NVIDIA H100 80GB HBM3"`` -> ``"nvidia-h100-80gb-hbm3"``: the name tools/run.py
    gives the asv machine (its ``slug``, which stays standard-library only and is checked
    against this one by tests/test_tuning.py)."""
    text = re.sub(r"\((r|tm|c)\)|\bcpu\b|@.*$", " ", name, flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def key_text(key: tuple) -> str:
    """The readable form of a ``configs.tune_key`` (the key of table and cache entries):
    ``"bwd_dq float16 d64 q1024 k1024 varlen=0 ... mask_kind=0 sparse=0 deterministic=0"``.
    ``flags`` are ``(name, value)`` pairs (``launch.Meta.flags``)."""
    kernel, dtype, head_dim_block, q_bucket, k_bucket, flags = key
    named = " ".join(f"{name}={int(value)}" for name, value in flags)
    dtype_name = str(dtype).removeprefix("torch.")
    return f"{kernel} {dtype_name} d{head_dim_block} q{q_bucket} k{k_bucket} {named}"


def shipped(key: str) -> set[str]:
    """The names of the configs the launcher ships for a table key (:func:`key_text`'s
    form): the candidate list of its kernel, dtype and head-dim tile under its ``sparse``,
    ``tma`` and ``dropout`` flags (``configs.candidates``; shared memory is the GPU's to
    check). An entry naming another config is stale: the launcher warns and tunes again."""
    import torch  # here, not at module level: tools read tables without the kernels

    from . import configs

    kernel, dtype, head_dim_block, _q, _k, *flags = key.split()
    on = {name for name, value in (flag.split("=") for flag in flags) if value == "1"}
    listed = configs.candidates(
        kernel, int(head_dim_block.removeprefix("d")), getattr(torch, dtype),
        masked="sparse" in on, tma="tma" in on, dropout="dropout" in on,
    )  # fmt: skip
    return {str(c) for c in listed}


def spill_free_first(fitting: list, spills: dict, dtype, head_dim_block: int) -> list:
    """The candidates the tuner times (``configs.KernelConfig``s, in candidates() order),
    from those that fit this GPU (``spills``: each one's compiled local memory, bytes per
    thread). fp16/bf16 at head-dim tiles <= 128 must not spill (issue 13's register budget,
    which LiveResourcesSuite tracks): there, the spilling ones are dropped while one fits
    without. Why: the H200, whose table lacks the Hopper-path keys, tunes them at run time,
    and its LiveResourcesSuite showed a run-time-tuned dK/dV (bf16, D=64) at 8 B spilled
    (82c66b4); a spill the timing hides on one shape costs on the next. fp32 and D=256 keep
    every candidate: some of their kernels spill in every config."""
    import torch  # here, not at module level: tools read tables without the kernels

    if dtype == torch.float32 or head_dim_block > 128:
        return fitting
    return [c for c in fitting if spills.get(c, 0) <= 0] or fitting


def table_dir() -> Path | None:
    """Where the committed tables are read from; None when ``$SAFEATTN_TUNING_TABLE`` is off."""
    value = os.environ.get(TABLE_ENV, "")
    if value.lower() in OFF_VALUES:
        return None
    return Path(value).expanduser() if value else TABLE_DIR


def cache_dir() -> Path | None:
    """The user's tuning cache folder; None when ``$SAFEATTN_TUNING_CACHE`` is off (nothing
    is read or written: the prewarm and the sweep, whose timings must not outlive them)."""
    value = os.environ.get(CACHE_ENV, "")
    if value.lower() in OFF_VALUES:
        return None
    return Path(value or DEFAULT_CACHE_DIR).expanduser()


def read_entries(path: Path) -> dict[str, dict]:
    """The entries of a table or cache file; ``{}`` when it is absent, and (with one warning
    per file and process) when it is not a readable file of this format."""
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"schema is not {SCHEMA!r}")
        entries = data["entries"]
        if not isinstance(entries, dict):
            raise ValueError("'entries' is not an object")
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError) as exc:  # JSONDecodeError is a ValueError
        if str(path) not in _WARNED:
            _WARNED.add(str(path))
            log.warning("ignoring tuning file %s: %s", path, exc)
        return {}
    return {k: v for k, v in entries.items() if isinstance(v, dict) and "config" in v}


@functools.cache
def _table(path: Path) -> dict[str, dict]:
    """A committed table, read once per process (it does not change while one runs)."""
    return read_entries(path)


def table_entry(gpu_names: Sequence[str], key: str) -> tuple[str, Path] | None:
    """(config, table file) for ``key`` from the first table of ``gpu_names`` (the GPU's
    slug, then its architecture) that has the key; None if tables are off or none has it."""
    folder = table_dir()
    if folder is None:
        return None
    for name in gpu_names:
        found = _table(folder / f"{name}.json").get(key)
        if found:
            return str(found["config"]), folder / f"{name}.json"
    return None


def cache_path(gpu: str) -> Path | None:
    """This GPU's file in the user's tuning cache (None when the cache is off)."""
    folder = cache_dir()
    return None if folder is None else folder / f"{gpu}.json"


def cache_entry(gpu: str, key: str) -> tuple[str, Path] | None:
    """(config, cache file) for ``key``, read afresh (another process may have added it)."""
    path = cache_path(gpu)
    if path is None:
        return None
    found = read_entries(path).get(key)
    return (str(found["config"]), path) if found else None


def persist(gpu: str, key: str, config: str, timings: Sequence[tuple[str, float]]) -> Path | None:
    """Add the tuner's choice for ``key`` to this GPU's cache file; returns the file, or None
    when the cache is off or cannot be written (logged: a full disk must not fail a call)."""
    path = cache_path(gpu)
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _locked(path):
            entries = read_entries(path)
            entries[key] = make_entry(config, timings)
            write_entries(path, gpu, entries, "run-time tuning choices (safeattn.kernels.tuning)")
    except OSError as exc:
        log.warning("could not persist the tuning choice for %s to %s: %s", key, path, exc)
        return None
    return path


def make_entry(config: str, timings: Sequence[tuple[str, float]], **extra) -> dict:
    """One table/cache entry: the config and the tuner's times (ms, 4 decimals)."""
    times = {cfg: round(float(ms), 4) for cfg, ms in timings}
    return {"config": config, "times_ms": times, **extra}


def dumps(gpu: str, entries: dict[str, dict], about: str) -> str:
    """The file's text: header fields, then one entry per line sorted by key, so that a
    re-tune shows in a diff as the lines of the keys that changed."""
    head = {"schema": SCHEMA, "gpu": gpu, "about": about}
    lines = ["{", *(f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in head.items())]
    body = [
        f"    {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in sorted(entries.items())
    ]
    return "\n".join([*lines, '  "entries": {', ",\n".join(body), "  }", "}"]) + "\n"


def write_entries(path: Path, gpu: str, entries: dict[str, dict], about: str) -> None:
    """Write a table/cache file atomically: a reader sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(dumps(gpu, entries, about))
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would make a table unreadable to others
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An advisory lock around read-modify-write, so two processes tuning at once do not
    drop each other's entries (the atomic replace alone only prevents torn files)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: last writer wins, files still whole
        yield
        return
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def clear() -> None:
    """Forget the tables read and the warnings given (tests: as in a new process)."""
    _table.cache_clear()
    _WARNED.clear()
