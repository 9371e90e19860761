"""What the output header states about the machine: versions, driver, devices."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from pytimings.errors import UsageError, install_hint

_NO_GPU = "needs a CUDA GPU and torch built with CUDA"


def torch_or_none() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def require_cuda(what: str) -> Any:
    """torch with a visible CUDA device, or a UsageError naming what needed it."""
    torch = torch_or_none()
    if torch is None:
        raise UsageError(f"{what} {_NO_GPU}; torch is not installed ({install_hint('torch')})")
    if not torch.cuda.is_available():
        raise UsageError(f"{what} {_NO_GPU}; none is visible here (torch {torch.__version__})")
    return torch


def kernel_driver_version() -> str | None:
    """The NVIDIA kernel driver's version as /proc reports it (Linux), else None."""
    try:
        first = Path("/proc/driver/nvidia/version").read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    words = first.split()
    versions = [w for w in words if w.count(".") >= 1 and w.replace(".", "").isdigit()]
    return versions[0] if versions else first.strip()


def system_header(devices: bool) -> dict[str, Any]:
    """Host, Python, torch, CUDA, NCCL and driver versions; device names when ``devices``."""
    torch = torch_or_none()
    head: dict[str, Any] = {
        "host": f"{platform.machine()} {platform.system()}, python {platform.python_version()}",
        "torch": torch.__version__ if torch is not None else "not installed",
    }
    if torch is not None and devices and torch.cuda.is_available():
        head["cuda_runtime"] = torch.version.cuda
        head["driver"] = kernel_driver_version() or "unknown"
        try:
            version = torch.cuda.nccl.version()  # a tuple; an int in old torch releases
            is_tuple = isinstance(version, tuple)
            head["nccl"] = ".".join(map(str, version)) if is_tuple else str(version)
        except (AttributeError, RuntimeError):
            head["nccl"] = "not available"
        head["devices"] = [
            f"cuda:{i} {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())
        ]
    return head
