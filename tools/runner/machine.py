"""What this machine is, for the runner: its GPU (or CPU) and software versions (the
versions sidecar's content) and the asv machine name made from them."""

from __future__ import annotations

import platform
import re
from pathlib import Path

SIDECAR_SCHEMA = "safeattn-bench-versions/1"


def slug(text: str) -> str:
    """``"NVIDIA H100 80GB HBM3"`` -> ``"nvidia-h100-80gb-hbm3"``."""
    text = re.sub(r"\((r|tm|c)\)|\bcpu\b|@.*$", " ", text, flags=re.IGNORECASE)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvml_driver_version() -> str | None:
    import ctypes

    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    if nvml.nvmlInit_v2() != 0:
        return None
    try:
        buf = ctypes.create_string_buffer(96)
        ok = nvml.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) == 0
        return buf.value.decode() if ok else None
    finally:
        nvml.nvmlShutdown()


def versions() -> dict:
    """The software and hardware a result was measured with (the sidecar file's content).

    Keys: ``schema``; ``machine`` (added by the caller); ``gpu`` (null without a usable
    GPU, else ``name``, ``count``, ``arch`` like ``"sm90"``, ``memory_bytes``);
    ``driver`` (NVIDIA driver, or null); ``cuda`` and ``cudnn`` (as torch reports them);
    ``torch``; ``triton``; ``python``; ``asv``; ``cpu``; ``platform``.
    """
    import asv
    import torch
    import triton

    gpu = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        gpu = {
            "name": props.name,
            "count": torch.cuda.device_count(),
            "arch": f"sm{props.major}{props.minor}",
            "memory_bytes": int(props.total_memory),
        }
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {
        "schema": SIDECAR_SCHEMA,
        "gpu": gpu,
        "driver": _nvml_driver_version(),
        "cuda": torch.version.cuda,
        "cudnn": cudnn,
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "asv": asv.__version__,
        "cpu": cpu_model(),
        "platform": platform.platform(),
    }


def machine_name(info: dict) -> str:
    """GPU model for GPU machines, ``cpu-<model>`` otherwise."""
    if info["gpu"] is not None:
        return slug(info["gpu"]["name"])
    return "cpu-" + slug(info["cpu"])
