"""Cost of serving measurement itself: the in-engine request recorder and the loadgen's
per-chunk client work, each beside the bare operation it cannot avoid (ratios).

* ``token()``: one clock read + one append; beside ``time.monotonic_ns()`` alone.
* request enter+exit (no tokens): the log's lock and the record's assembly.
* loadgen per chunk: SSE framing, clock read, JSON decode of an OpenAI chunk, beside
  ``json.loads`` of the same chunk alone (the part any client must do).

Asserts no absolute time; exits 1 if a measured cost is not positive or the recorded
counts are wrong (the benchmark measured something else).

    python benches/bench_serving.py [--n N] [--repeats R]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable

from pytimings.model.requests import RequestRecord
from pytimings.record.requests import RequestLog, request
from pytimings.serving.loadgen import Config, _read_events


def _best_ns(fn: Callable[[], None], n: int, repeats: int) -> float:
    """Median over repeats of the per-iteration time of ``fn`` (which loops n times)."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t0) / n)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    n, reps = args.n, args.repeats
    problems = []

    def bare_clock() -> None:
        clock = time.monotonic_ns
        for _ in range(n):
            clock()

    log = RequestLog()

    def tokens() -> None:
        with request("bench", log=log) as r:
            tok = r.token
            for _ in range(n):
                tok()

    def requests() -> None:
        fresh = RequestLog()  # a log of this run's requests only
        for i in range(n // 10):
            with request(i, log=fresh):
                pass

    clock_ns = _best_ns(bare_clock, n, reps)
    token_ns = _best_ns(tokens, n, reps)
    req_ns = _best_ns(requests, n // 10, reps)
    if sum(r.n_output for r in log.records()) != n * reps:
        problems.append("token() calls were not all recorded")

    choice = {"index": 0, "text": " tok", "finish_reason": None}
    chunk = json.dumps({"id": "x", "object": "text_completion", "model": "m", "choices": [choice]})
    lines = [f"data: {chunk}\n".encode(), b"\n"] * (n // 10) + [b"data: [DONE]\n", b"\n"]

    class _Content:
        async def __aiter__(self) -> AsyncIterator[bytes]:
            for line in lines:
                yield line

    class _Resp:
        content = _Content()

    cfg = Config("http://x/v1", "m", "completions", (1,), 1, 1, 1, 1, 0, None, 0, 1.0, 1.0,
                 True, "vllm")  # fmt: skip
    recs: list[RequestRecord] = []

    def parse() -> None:
        rec = RequestRecord("b", 0)
        asyncio.run(_read_events(_Resp(), cfg, rec))
        recs.append(rec)

    def bare_json() -> None:
        loads = json.loads
        for _ in range(n // 10):
            loads(chunk)

    parse_ns = _best_ns(parse, n // 10, reps)
    json_ns = _best_ns(bare_json, n // 10, reps)
    if any(len(r.chunk_ns) != n // 10 for r in recs):
        problems.append("the SSE reader did not see every chunk")

    rows = [
        ("time.monotonic_ns()", clock_ns, 1.0),
        ("request token()", token_ns, token_ns / clock_ns),
        ("request enter+exit", req_ns, req_ns / clock_ns),  # once per request, not per token
        ("json.loads(chunk)", json_ns, 1.0),
        ("loadgen per chunk", parse_ns, parse_ns / json_ns),
    ]
    print(f"{'operation':<22} {'ns':>9} {'ratio':>7}   (ratio: to the row above it marked 1.00)")
    for name, ns, ratio in rows:
        print(f"{name:<22} {ns:9.1f} {ratio:7.2f}")
        if not ns > 0:
            problems.append(f"{name}: no positive time")
    for prob in problems:
        print("FAIL:", prob)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
