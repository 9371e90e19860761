"""A small valid loadgen run file (``pytimings.serving/1``), for tests of the commands that
read run files."""

from __future__ import annotations

from typing import Any

from pytimings.model.requests import RequestRecord
from pytimings.serving.runfile import SCHEMA


def small_run_doc() -> dict[str, Any]:
    """A small valid run file: one level, one round of four requests 10 ms apart."""
    reqs = []
    for i in range(4):
        t = 1_000_000_000 + i * 10_000_000
        chunks = [t + 5_000_000 + k * 1_000_000 for k in range(4)]
        reqs.append(
            RequestRecord(
                req_id=f"r{i}", start_ns=t, end_ns=chunks[-1] + 1000, chunk_ns=chunks,
                chunk_tokens=[1] * 4, input_tokens=8, output_tokens=4,
            ).to_json()
        )  # fmt: skip
    rnd = {"round": 0, "start_ns": 1_000_000_000, "end_ns": 1_050_000_000, "errors": {},
           "summary": {}, "requests": reqs}  # fmt: skip
    level = {"concurrency": 1, "rate": None, "warmup": {}, "rounds": [rnd], "summary": {}}
    return {"schema": SCHEMA, "config": {}, "levels": [level]}
