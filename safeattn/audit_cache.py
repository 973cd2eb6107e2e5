"""The static audit's results, keyed by what they depend on, so that an audit is compiled
once per key rather than once per run.

What an audit row says (shared memory, registers, spills of one kernel × config × dtype ×
head dim × variant on one architecture) is a function of

- the kernel sources and the config tables (``kernels/forward.py``, ``kernels/backward.py``,
  ``kernels/configs.py``, the block-mask tile size in ``blockmask.py``), and the Hopper
  path's rules that set some of their constants (``kernels/hopper.py``: ``fold_delta``,
  ``split_dkdv``, ``half_partial``, ``pairs``),
- the architecture list and its limits (``gpu_limits.py``),
- the way the audit specialises and compiles (``audit.py``),
- the compiler: the Triton version (its wheel carries ptxas; ``TRITON_PTXAS_PATH`` too,
  when set).

:func:`audit_key` hashes exactly those (file contents, not git history, so a fresh clone, a
wheel installed by asv and a working tree compute the same key). Two stores hold rows per
key, one *slice* (kernel × arch × dtype × head dim, every config and variant) at a time:

``safeattn/audit_cache.json`` (committed, reviewed like code)
    Written only by ``python -m safeattn.audit --record``, which compiles everything afresh
    and keeps the entries of the current sources (one per Triton version recorded). A fresh
    clone of a commit whose sources are unchanged since the last ``--record`` compiles
    nothing: ``make demo``, CI and the asv suite read it first.
the local store (``$SAFEATTN_AUDIT_CACHE``, default ``~/.cache/safeattn/audit``)
    One file per key, written after every compile that the committed file did not cover:
    an asv history run compiles a kernel source once, however many commits share it.

``SAFEATTN_AUDIT_CACHE=off`` reads and writes neither (every audit compiles). Stored rows
are the rows a compile returned, field for field; ``tests/test_audit.py`` checks a key
change misses and a slice compiled afresh equals the committed one.

This module imports nothing outside the standard library: the asv suite (benchmarks/
resources.py) loads *this checkout's* copy by path and applies it to the package of the
commit under test, old commits included.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import os
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

SCHEMA = "safeattn-audit-cache/1"
# Relative to the safeattn package directory. A file a commit lacks hashes as absent.
KEY_FILES: tuple[str, ...] = (
    "audit.py",
    "gpu_limits.py",
    "blockmask.py",
    "kernels/configs.py",
    "kernels/forward.py",
    "kernels/backward.py",
    "kernels/hopper.py",
)
COMMITTED = Path(__file__).resolve().with_name("audit_cache.json")
ENV = "SAFEATTN_AUDIT_CACHE"

Slice = tuple[str, str, str, int]  # (kernel, arch, dtype name, head-dim tile)


def triton_version() -> str:
    """The installed Triton's version, without importing it."""
    return importlib.metadata.version("triton")


def audit_key(package_dir: str | Path, triton: str | None = None) -> dict:
    """``{"key", "sources", "triton", "ptxas"}`` for the safeattn package in ``package_dir``.

    ``sources`` maps each of :data:`KEY_FILES` to the sha256 of its bytes (``"absent"`` when
    the commit lacks it); ``key`` is the sha256 of the whole description."""
    root = Path(package_dir)
    sources = {}
    for name in KEY_FILES:
        path = root / name
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "absent"
        sources[name] = digest
    described = {
        "sources": sources,
        "triton": triton or triton_version(),
        "ptxas": os.environ.get("TRITON_PTXAS_PATH", ""),  # "": the one in Triton's wheel
    }
    blob = json.dumps(described, sort_keys=True).encode()
    return {"key": hashlib.sha256(blob).hexdigest()[:32], **described}


def slice_name(s: Slice) -> str:
    kernel, arch, dtype, head_dim = s
    return f"{kernel}/{arch}/{dtype}/{head_dim}"


def slice_of(row: dict) -> Slice:
    return (row["kernel"], row["arch"], row["dtype"], int(row["head_dim"]))


def local_store() -> Path | None:
    """The local store's directory, or None when ``SAFEATTN_AUDIT_CACHE=off``."""
    value = os.environ.get(ENV, "")
    if value.lower() == "off":
        return None
    if value:
        return Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "safeattn" / "audit"


def enabled() -> bool:
    return os.environ.get(ENV, "").lower() != "off"


def _read(path: Path) -> list[dict]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    if data.get("schema") != SCHEMA:
        return []
    return list(data.get("entries", []))


def _rows(entry: dict) -> list[dict]:
    columns = entry["columns"]
    return [dict(zip(columns, values, strict=True)) for values in entry["rows"]]


def lookup(key: dict, slices: Iterable[Slice], paths: Iterable[Path]) -> tuple[list[dict], set]:
    """Rows of the wanted ``slices`` found under ``key`` in ``paths`` (first path first),
    and the slices found nowhere."""
    wanted = {slice_name(s): s for s in slices}
    rows: list[dict] = []
    for path in paths:
        for entry in _read(path):
            if entry.get("key") != key["key"]:
                continue
            have = set(entry.get("slices", [])) & set(wanted)
            if not have:
                continue
            rows += [r for r in _rows(entry) if slice_name(slice_of(r)) in have]
            for name in have:
                del wanted[name]
    return rows, set(wanted.values())


def _entry(key: dict, rows: list[dict], slices: Iterable[Slice]) -> dict:
    columns = list(rows[0]) if rows else []
    return {
        "key": key["key"],
        "triton": key["triton"],
        "ptxas": key["ptxas"],
        "sources": key["sources"],
        "recorded_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "slices": sorted(slice_name(s) for s in slices),
        "columns": columns,
        "rows": [[r[c] for c in columns] for r in rows],
    }


def _write(path: Path, entries: list[dict], about: str) -> None:
    """One row per line, so that a change reads as a diff of the rows it changed."""
    lines = ["{", f'  "schema": {json.dumps(SCHEMA)},', f'  "about": {json.dumps(about)},']
    lines.append('  "entries": [')
    for i, entry in enumerate(entries):
        lines.append("    {")
        head = [k for k in entry if k != "rows"]
        for k in head:
            lines.append(f"      {json.dumps(k)}: {json.dumps(entry[k], sort_keys=True)},")
        lines.append('      "rows": [')
        rows = [json.dumps(r) for r in entry["rows"]]
        lines += [f"        {r}{',' if j < len(rows) - 1 else ''}" for j, r in enumerate(rows)]
        lines.append("      ]")
        lines.append("    }" + ("," if i < len(entries) - 1 else ""))
    lines += ["  ]", "}", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        f.write("\n".join(lines))
    os.chmod(f.name, 0o644)  # NamedTemporaryFile makes it 0600
    os.replace(f.name, path)  # atomic: a concurrent reader sees the old or the new file


def store_local(key: dict, rows: list[dict], slices: Iterable[Slice]) -> Path | None:
    """Add ``rows`` (compiled for ``slices``) to the local store's file of ``key``."""
    root = local_store()
    if root is None:
        return None
    path = root / f"{key['key']}.json"
    entries = [e for e in _read(path) if e.get("key") == key["key"]]
    slices = set(slices)
    names = {slice_name(s) for s in slices}
    kept: list[dict] = []
    for entry in entries:  # merge: the new rows replace those of the same slices
        kept += [r for r in _rows(entry) if slice_name(slice_of(r)) not in names]
        slices |= {s for s in map(slice_of, _rows(entry))}
    merged = kept + list(rows)
    try:
        _write(path, [_entry(key, merged, slices)], "safeattn static-audit rows (local store)")
    except OSError:
        return None  # a read-only home: the audit still ran, it is just not kept
    return path


def record(key: dict, rows: list[dict], slices: Iterable[Slice], path: Path = COMMITTED) -> Path:
    """Write the committed file's entry for ``key``; entries of other sources are dropped
    (they describe kernels this commit no longer ships), those of the same sources under
    another Triton version are kept."""
    kept = [
        e for e in _read(path)
        if e.get("sources") == key["sources"] and e.get("key") != key["key"]
    ]  # fmt: skip
    entries = sorted([*kept, _entry(key, rows, slices)], key=lambda e: e["triton"])
    about = (
        "Static resource audit rows (safeattn/audit.py) per key: a hash of the kernel "
        "sources, config tables, architecture list and Triton version. Written by "
        "`python -m safeattn.audit --record`; read before compiling (safeattn/audit_cache.py)."
    )
    _write(path, entries, about)
    return path


def cached_audit(
    compile_slices: Callable[[list[str], list[str], list[str], list[int]], list[dict]],
    package_dir: str | Path,
    archs: Iterable[str],
    kernels: Iterable[str],
    dtypes: Iterable[str],
    head_dims: Iterable[int],
    report: Callable[[str], None] | None = None,
    committed: Path = COMMITTED,
) -> tuple[list[dict], str]:
    """Audit rows (dicts) for every slice of ``archs × kernels × dtypes × head_dims``, read
    from the stores where ``audit_key(package_dir)`` has them; the rest compiled by
    ``compile_slices(archs, kernels, dtypes, head_dims)`` (lists of names) and kept in the
    local store. Returns the rows and where they came from, in words."""
    archs, kernels, dtypes, head_dims = map(list, (archs, kernels, dtypes, head_dims))
    slices = {(k, a, d, int(h)) for k in kernels for a in archs for d in dtypes for h in head_dims}
    if not enabled():
        return compile_slices(archs, kernels, dtypes, head_dims), "compiled (cache off)"
    key = audit_key(package_dir)
    store = local_store()
    paths = [committed] + ([store / f"{key['key']}.json"] if store else [])
    found, missing = lookup(key, slices, paths)
    if not missing:
        return found, f"all {len(slices)} slices from the audit cache (key {key['key'][:12]})"
    if report:
        report(
            f"[audit] key {key['key'][:12]} (triton {key['triton']}): {len(slices) - len(missing)}"
            f" of {len(slices)} slices cached, compiling the other {len(missing)}"
        )
    # Compile the smallest product that covers the missing slices (Triton's own disk cache
    # makes any covered-twice slice cheap).
    compiled = compile_slices(
        sorted({s[1] for s in missing}), sorted({s[0] for s in missing}),
        sorted({s[2] for s in missing}), sorted({s[3] for s in missing}),
    )  # fmt: skip
    new = [r for r in compiled if slice_of(r) in missing]
    where = store_local(key, new, missing)
    note = f"; stored in {where}" if where else ""
    return found + new, f"{len(missing)} of {len(slices)} slices compiled{note}"
