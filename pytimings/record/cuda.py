"""Whether CUDA is usable here, and why not: the runtime is loaded at run time, never linked.

The native side looks for a libcudart already loaded in the process (torch's, so events live
on the same streams), then ``$PYTIMINGS_CUDART`` (a path), then the standard sonames.
Without one, every region is timed on the host only; nothing fails.
"""

from __future__ import annotations

from pytimings import _core


def cuda_available() -> bool:
    """True when a CUDA runtime was found and reports at least one device."""
    return _core.cuda_available()


def cuda_status() -> str:
    """One line: the runtime's version, path and device count, or why CUDA is unusable."""
    return _core.cuda_status()


__all__ = ["cuda_available", "cuda_status"]
