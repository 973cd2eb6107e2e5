"""The GPU architecture behind a result: the machine's (from its ``machine.json`` or
environment sidecars) or a row's own ``arch`` parameter (the static audit's), and that
architecture's shared-memory limit (:mod:`safeattn.gpu_limits`) for the comparison's
shared-memory rule.
"""

from __future__ import annotations

import re
from typing import Any

from safeattn.gpu_limits import ARCHS, arch_name


def machine_arch(info: dict[str, Any]) -> str | None:
    """The GPU architecture (``"sm90"``) a machine's results were measured on, from its
    ``machine.json`` or environment sidecars, or None when they don't say.

    Accepted keys: ``compute_capability`` / ``capability`` (``"9.0"``, ``[9, 0]``, ``90``)
    and ``gpu_arch`` / ``cuda_arch`` / ``arch`` (``"sm90"``, ``"sm_90"``). asv's own
    ``arch`` (``"x86_64"``) is the CPU and is ignored.
    """
    candidates: list[dict[str, Any]] = [info]
    for sidecar in (info.get("sidecars") or {}).values():
        if isinstance(sidecar, dict):
            candidates.append(sidecar)
            candidates.extend(v for v in sidecar.values() if isinstance(v, dict))
    for entry in candidates:
        for key in ("compute_capability", "capability", "gpu_arch", "cuda_arch", "arch"):
            arch = _arch_from(entry.get(key))
            if arch is not None:
                return arch
    return None


def _arch_from(value: Any) -> str | None:
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
        isinstance(v, int) for v in value
    ):
        return arch_name((value[0], value[1]))
    if isinstance(value, int) and not isinstance(value, bool):
        return arch_name(value)
    if isinstance(value, str):
        text = value.strip().lower()
        if m := re.fullmatch(r"sm_?(\d{2,3})a?", text):
            return arch_name(int(m.group(1)))
        if m := re.fullmatch(r"(\d+)\.(\d)", text):
            return arch_name((int(m.group(1)), int(m.group(2))))
        if re.fullmatch(r"\d{2,3}", text):
            return arch_name(int(text))
    return None


def row_arch_limit(
    row: dict[str, Any], machine_arch_name: str | None
) -> tuple[str | None, int | None]:
    """(arch, shared-memory opt-in limit) for a shared_bytes row: the row's own ``arch``
    parameter (static audit) or else the machine's GPU (live rows)."""
    arch = _arch_from(row["params"].get("arch")) if "arch" in row["params"] else None
    arch = arch or machine_arch_name
    limits = ARCHS.get(arch) if arch else None
    return arch, (limits.smem_optin_bytes if limits else None)
