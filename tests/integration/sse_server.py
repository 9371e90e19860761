"""A real OpenAI-compatible streaming server for the load-generator tests (loopback only).

aiohttp web server on 127.0.0.1 and a free port, in its own process. Each
request gets the next behaviour of ``plan`` (cycled, in arrival order): stream
``max_tokens`` tokens with ``ttft_s`` before the first and ``itl_s`` between the others,
or fail in one of the ways a real server does (HTTP 500, a stall, a malformed chunk, a
dropped connection, an error event). The server also keeps the ground truth -- when
each handler started and when it wrote each token chunk, on CLOCK_MONOTONIC like the
client -- so tests compare what the client measured with what actually happened, not only
with the injected sleeps (which overshoot on a loaded machine).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: run as a script
from helpers.loopback import child_port, serve_until_stdin_closes


@dataclass(frozen=True)
class Behaviour:
    ttft_s: float = 0.05
    itl_s: float = 0.02
    # None, "500", "stall", "malformed", "bad_shape", "drop", "error_event", "deep" (an
    # event nested 1500 deep), "long_line" (a 600 KiB data line), "reset" (the connection
    # reset mid-stream, as when the server dies: RST, not FIN), "reset_early" (reset before
    # the response's headers), "close_early" (an orderly close before the headers),
    # "no_done" (the response ends in order without ``data: [DONE]``), "404",
    # "429", or a bad final usage
    # completion_tokens: "usage_huge" (1e30), "usage_negative" (-5), "usage_bool" (true)
    fail: str | None = None
    send_usage: bool = True
    tokens_per_chunk: int = 1
    continuous_usage: bool = False  # running usage on every chunk (vLLM's option)
    # the second chunk's text held back to the third (a detokenizer waiting for the rest of
    # a character): its tokens arrive with no text
    held_text: bool = False
    # a server slowing down: TTFT grows by ttft_step_s every step_every_s since its first
    # request (soak tests)
    ttft_step_s: float = 0.0
    step_every_s: float = 0.0


@dataclass(frozen=True)
class Engine:
    """The toy engine behind the server, published on ``/metrics`` under vLLM's names with
    the real ``prometheus_client``: at most ``batch_limit`` requests run at once (the rest
    wait, in arrival order), each holding its prompt and output tokens of
    ``kv_capacity_tokens`` while it runs; with ``spec_draft`` > 0 every decode step drafts
    that many tokens and accepts ``spec_accept`` of them (one chunk of accepted + 1 tokens).
    ``metrics``: None, "stall" (``/metrics`` never answers), "garbage" (not an exposition),
    "nan" (also a counter exposed as NaN and a gauge as +Inf) or "huge" (also 100,000 series
    of a metric outside the concept table, one per request id: ~3 MB a scrape)."""

    batch_limit: int | None = None
    kv_capacity_tokens: int = 1000
    spec_draft: int = 0
    spec_accept: int = 0
    metrics: str | None = None


PROMPT_TOKENS = 17


class _Gauges:
    """The engine's state, its Prometheus metrics and its own log of every change."""

    def __init__(self, engine: Engine) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.engine = engine
        self.registry = CollectorRegistry()
        self.running_g = Gauge("vllm:num_requests_running", "running", registry=self.registry)
        self.waiting_g = Gauge("vllm:num_requests_waiting", "waiting", registry=self.registry)
        self.kv_g = Gauge("vllm:kv_cache_usage_perc", "kv", registry=self.registry)
        self.drafts = Counter("vllm:spec_decode_num_drafts", "d", registry=self.registry)
        self.draft_tokens = Counter(
            "vllm:spec_decode_num_draft_tokens", "t", registry=self.registry
        )
        self.accepted = Counter("vllm:spec_decode_num_accepted_tokens", "a", registry=self.registry)
        self.queue_time = Histogram("vllm:request_queue_time_seconds", "q", registry=self.registry,
                                    buckets=(0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0))  # fmt: skip
        self.toy_g = Gauge("toy_engine_steps", "not in the concept table", registry=self.registry)
        self.running = self.waiting = self.kv_tokens = 0
        self.totals = {"drafts": 0, "draft_tokens": 0, "accepted": 0, "steps": 0}
        self.log: list[list[float]] = []  # [t_ns, running, waiting, kv usage]
        self.slots = asyncio.Semaphore(engine.batch_limit) if engine.batch_limit else None
        self.held: dict[str, int] = {}  # request -> output tokens it holds in the KV cache

    def change(self, running: int = 0, waiting: int = 0, kv: int = 0) -> None:
        self.running += running
        self.waiting += waiting
        self.kv_tokens += kv
        usage = self.kv_tokens / self.engine.kv_capacity_tokens
        self.running_g.set(self.running)
        self.waiting_g.set(self.waiting)
        self.kv_g.set(usage)
        self.log.append([time.monotonic_ns(), self.running, self.waiting, usage])

    def step(self, drafted: int, accepted: int) -> None:
        self.drafts.inc()
        self.draft_tokens.inc(drafted)
        self.accepted.inc(accepted)
        self.totals["drafts"] += 1
        self.totals["draft_tokens"] += drafted
        self.totals["accepted"] += accepted


@dataclass
class ServerState:
    plan: Sequence[Behaviour]
    engine: _Gauges | None = None
    seen: int = 0
    bodies: list[dict[str, object]] = field(default_factory=list)
    # ground truth per request: when the handler started, when each token chunk was written
    timings: list[dict[str, object]] = field(default_factory=list)
    first_s: float | None = None  # when the first request came (slowing-down servers)


STATE = web.AppKey("state", ServerState)


def _chunk(api: str, rid: str, text: str, usage: int | None = None) -> bytes:
    choice: dict[str, object] = {"index": 0}
    if api == "completions":
        choice["text"] = text
        obj: dict[str, object] = {"id": rid, "object": "text_completion", "choices": [choice]}
    else:
        choice["delta"] = {"content": text}
        obj = {"id": rid, "object": "chat.completion.chunk", "choices": [choice]}
    if usage is not None:
        obj["usage"] = {"prompt_tokens": 17, "completion_tokens": usage}
    return f"data: {json.dumps(obj)}\n\n".encode()


async def _handle(request: web.Request, api: str) -> web.StreamResponse:
    state: ServerState = request.app[STATE]
    recv_ns = time.monotonic_ns()
    b = state.plan[state.seen % len(state.plan)]
    rid = f"cmpl-{state.seen}"
    state.seen += 1
    body = await request.json()
    state.bodies.append(body)
    if b.fail in ("500", "404", "429"):
        return web.Response(status=int(b.fail), text="injected failure")
    if b.fail in ("reset_early", "close_early"):
        _drop(request, reset=b.fail == "reset_early")
        return web.Response()  # never sent: the connection is gone
    n = int(body["max_tokens"])
    eng = state.engine
    if eng is None:
        return await _stream(request, api, state, b, rid, recv_ns, n)
    eng.change(waiting=1)
    t_wait = time.monotonic()
    if eng.slots is not None:
        await eng.slots.acquire()
    eng.queue_time.observe(time.monotonic() - t_wait)
    eng.change(running=1, waiting=-1, kv=PROMPT_TOKENS)
    try:
        return await _stream(request, api, state, b, rid, recv_ns, n)
    finally:
        eng.change(running=-1, kv=-eng.held.pop(rid, 0) - PROMPT_TOKENS)
        if eng.slots is not None:
            eng.slots.release()


async def _stream(
    request: web.Request, api: str, state: ServerState, b: Behaviour, rid: str, recv_ns: int,
    n: int,
) -> web.StreamResponse:  # fmt: skip
    eng = state.engine
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    if api == "chat":  # real servers open a chat stream with a role-only delta
        role = {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}
        await resp.write(f"data: {json.dumps(role)}\n\n".encode())
    if state.first_s is None:
        state.first_s = time.monotonic()
    steps = (time.monotonic() - state.first_s) // b.step_every_s if b.step_every_s else 0
    await asyncio.sleep(b.ttft_s + steps * b.ttft_step_s)
    produced = k_held = 0
    write_ns: list[int] = []
    while produced < n:
        if produced:
            await asyncio.sleep(b.itl_s)
        k = min(b.tokens_per_chunk, n - produced)
        if eng is not None and eng.engine.spec_draft and produced:
            # a verify step: drafts spec_draft tokens, keeps spec_accept (fewer at the end)
            k = min(eng.engine.spec_accept + 1, n - produced)
            eng.step(eng.engine.spec_draft, k - 1)
        if eng is not None:
            eng.held[rid] = eng.held.get(rid, 0) + k
            eng.change(kv=k)
        write_ns.append(time.monotonic_ns())
        running = produced + k if b.continuous_usage else None
        held = b.held_text and len(write_ns) == 2
        text = "" if held else " tok" * (k + (k_held if b.held_text and len(write_ns) == 3 else 0))
        k_held = k if held else 0
        await resp.write(_chunk(api, rid, text, running))
        produced += k
        if produced >= 2 and b.fail == "stall":
            await asyncio.sleep(5.0)  # far past the client's chunk timeout
        if produced >= 2 and b.fail == "malformed":
            await resp.write(b'data: {"choices": [\n\n')
        if produced >= 2 and b.fail == "bad_shape":
            await resp.write(b'data: {"choices": {"text": "x"}}\n\n')
        if produced >= 2 and b.fail == "error_event":
            await resp.write(b'data: {"error": {"message": "injected", "code": 500}}\n\n')
        if produced >= 2 and b.fail == "deep":
            nested = "[" * 1500 + "]" * 1500
            await resp.write(f'data: {{"choices": [{{"text": "x", "n": {nested}}}]}}\n\n'.encode())
        if produced >= 2 and b.fail == "long_line":
            await resp.write(
                f'data: {{"choices": [{{"text": "{"x" * 600 * 1024}"}}]}}\n\n'.encode()
            )
        if produced >= 2 and b.fail in ("drop", "reset"):
            _drop(request, reset=b.fail == "reset")  # connection dropped mid-stream
            return resp
    state.timings.append({"id": rid, "recv_ns": recv_ns, "write_ns": write_ns})
    if b.send_usage:
        bad = {"usage_huge": "1e30", "usage_negative": "-5", "usage_bool": "true"}
        completion = bad.get(b.fail or "", str(n))
        counts = f'"prompt_tokens": 17, "completion_tokens": {completion}'
        usage = f'{{"choices": [], "usage": {{{counts}}}}}'
        await resp.write(f"data: {usage}\n\n".encode())
    if b.fail != "no_done":
        await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


def _drop(request: web.Request, reset: bool) -> None:
    """Close the connection now: with ``reset``, an RST (SO_LINGER 0, as the kernel does
    when the server process dies with data unread), else an orderly FIN."""
    transport = request.transport
    assert transport is not None
    if reset:
        sock = transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


async def _stats(request: web.Request) -> web.Response:
    state = request.app[STATE]
    out: dict[str, object] = {"seen": state.seen, "bodies": state.bodies, "timings": state.timings}
    if state.engine is not None:
        out["engine_log"] = state.engine.log
        out["engine_totals"] = state.engine.totals
    return web.json_response(out)


async def _metrics(request: web.Request) -> web.StreamResponse:
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    eng = request.app[STATE].engine
    assert eng is not None
    eng.toy_g.set(eng.totals["drafts"])
    if eng.engine.metrics == "stall":
        await asyncio.sleep(30.0)  # far past any scrape timeout
    if eng.engine.metrics == "garbage":
        return web.Response(text="<html><body>not metrics</body></html>")
    body = generate_latest(eng.registry) + _EXTRA.get(eng.engine.metrics or "", b"")
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


_EXTRA = {
    "nan": b"# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total NaN\n"
    b"# TYPE toy_pressure gauge\ntoy_pressure +Inf\n",
    "huge": b"# TYPE toy_per_request gauge\n"
    + b"".join(b'toy_per_request{id="%d"} 1\n' % i for i in range(100_000)),
}


def _main() -> None:
    """Serve the plan given as JSON in argv[1]; print the port; stop when stdin closes."""
    plan = [Behaviour(**b) for b in json.loads(sys.argv[1])]
    engine = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
    app = web.Application()
    app[STATE] = ServerState(plan, None if engine is None else _Gauges(Engine(**engine)))
    if engine is not None:
        app.router.add_get("/metrics", _metrics)

    async def completions(r: web.Request) -> web.StreamResponse:
        return await _handle(r, "completions")

    async def chat(r: web.Request) -> web.StreamResponse:
        return await _handle(r, "chat")

    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/_stats", _stats)

    serve_until_stdin_closes(app, handler_cancellation=True)


@dataclass
class Server:
    url: str  # base URL ending in /v1
    _stats_url: str

    def stats(self) -> dict[str, Any]:
        with urllib.request.urlopen(self._stats_url, timeout=5) as f:
            return dict(json.load(f))


@contextmanager
def serve(plan: Sequence[Behaviour], engine: Engine | None = None) -> Iterator[Server]:
    """Run the server in its own process (as a real server is: no shared GIL with the
    client under test) on 127.0.0.1 and a free port; with ``engine``, behind a toy engine
    that publishes ``/metrics``."""
    argv = [sys.executable, __file__, json.dumps([asdict(b) for b in plan])]
    if engine is not None:
        argv.append(json.dumps(asdict(engine)))
    with child_port(argv) as port:
        yield Server(f"http://127.0.0.1:{port}/v1", f"http://127.0.0.1:{port}/_stats")


if __name__ == "__main__":
    _main()
