"""Shared test setup: the `gpu` marker policy and paths to real captures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
DATA = Path(__file__).resolve().parent / "data"

# Test against the installed package, never the source tree: a Python subprocess started
# from the checkout would otherwise import ./pytimings, which has no compiled modules.
os.environ["PYTHONSAFEPATH"] = "1"


def _gpu_present() -> bool:
    try:
        import pytimings

        return bool(getattr(pytimings, "cuda_available", lambda: False)())
    except Exception:
        return False


SHARED_ABSENT = f"{SHARED} (real captures beside the checkout) is not present"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not SHARED.is_dir():  # a fresh clone: tests marked `shared` skip, saying why, once
        absent = pytest.mark.skip(reason=SHARED_ABSENT)
        for item in items:
            if item.get_closest_marker("shared") is not None:
                item.add_marker(absent, append=False)  # before "empty parameter set"
    require = os.environ.get("PYTIMINGS_REQUIRE_GPU") == "1"
    if require or _gpu_present():
        return  # gpu tests run (and fail, not skip, when the GPU is missing but required)
    skip = pytest.mark.skip(reason="no CUDA GPU (set PYTIMINGS_REQUIRE_GPU=1 to fail instead)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip(SHARED_ABSENT)
    return SHARED
