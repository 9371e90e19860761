"""The two H200 captures of one workload (nsys SQLite, Kineto JSON) summarise alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytimings.analysis.summary import trace_summary
from pytimings.ingest import load

pytestmark = pytest.mark.shared


def test_kernel_and_memory_counts_agree_across_formats(shared_dir: Path) -> None:
    h200 = shared_dir / "data" / "h200"
    nsys = trace_summary(load(h200 / "decode_16steps_h200.sqlite"))
    kineto = trace_summary(load(h200 / "decode_16steps_h200.pt.trace.json.gz"))

    def kernels(s: dict) -> dict[str, int]:  # type: ignore[type-arg]
        k = s["kernels"]
        return dict(zip(k["full_name"].tolist(), k["count"].tolist(), strict=True))

    def memory(s: dict) -> dict[str, tuple[int, int]]:  # type: ignore[type-arg]
        m = s["memory"]
        pairs = zip(m["count"].tolist(), m["bytes"].tolist(), strict=True)
        return dict(zip(m["operation"].tolist(), pairs, strict=True))

    assert kernels(nsys) == kernels(kineto)
    assert sum(kernels(nsys).values()) == 1047
    assert (
        memory(nsys)
        == memory(kineto)
        == {
            "[CUDA memcpy Device-to-Host]": (16, 512),
            "[CUDA memset]": (12, memory(nsys)["[CUDA memset]"][1]),
        }
    )
