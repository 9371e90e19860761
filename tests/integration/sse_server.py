"""A real OpenAI-compatible streaming server for the load-generator tests (loopback only).

aiohttp web server on 127.0.0.1 and a free port, in its own thread and event loop. Each
request gets the next behaviour of ``plan`` (cycled, in arrival order): stream
``max_tokens`` tokens with ``ttft_s`` before the first and ``itl_s`` between the others,
or fail in one of the ways a real server does (HTTP 500, a stall, a malformed chunk, a
dropped connection, an error event).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from aiohttp import web


@dataclass(frozen=True)
class Behaviour:
    ttft_s: float = 0.05
    itl_s: float = 0.02
    fail: str | None = None  # None, "500", "stall", "malformed", "drop", "error_event"
    send_usage: bool = True
    tokens_per_chunk: int = 1


@dataclass
class ServerState:
    plan: Sequence[Behaviour]
    seen: int = 0
    bodies: list[dict[str, object]] = field(default_factory=list)


STATE = web.AppKey("state", ServerState)


def _chunk(api: str, text: str) -> bytes:
    if api == "completions":
        obj: dict[str, object] = {
            "object": "text_completion",
            "choices": [{"index": 0, "text": text}],
        }
    else:
        obj = {
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": text}}],
        }
    return f"data: {json.dumps(obj)}\n\n".encode()


async def _handle(request: web.Request, api: str) -> web.StreamResponse:
    state: ServerState = request.app[STATE]
    b = state.plan[state.seen % len(state.plan)]
    state.seen += 1
    body = await request.json()
    state.bodies.append(body)
    if b.fail == "500":
        return web.Response(status=500, text="injected failure")
    n = int(body["max_tokens"])
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    if api == "chat":  # real servers open a chat stream with a role-only delta
        role = {"choices": [{"index": 0, "delta": {"role": "assistant"}}]}
        await resp.write(f"data: {json.dumps(role)}\n\n".encode())
    await asyncio.sleep(b.ttft_s)
    produced = 0
    while produced < n:
        if produced:
            await asyncio.sleep(b.itl_s)
        k = min(b.tokens_per_chunk, n - produced)
        await resp.write(_chunk(api, " tok" * k))
        produced += k
        if produced >= 2 and b.fail == "stall":
            await asyncio.sleep(5.0)  # far past the client's chunk timeout
        if produced >= 2 and b.fail == "malformed":
            await resp.write(b'data: {"choices": [\n\n')
        if produced >= 2 and b.fail == "error_event":
            await resp.write(b'data: {"error": {"message": "injected", "code": 500}}\n\n')
        if produced >= 2 and b.fail == "drop":
            assert request.transport is not None
            request.transport.abort()  # connection dropped mid-stream
            return resp
    if b.send_usage:
        usage = {"choices": [], "usage": {"prompt_tokens": 17, "completion_tokens": n}}
        await resp.write(f"data: {json.dumps(usage)}\n\n".encode())
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp


@contextmanager
def serve(plan: Sequence[Behaviour]) -> Iterator[tuple[str, ServerState]]:
    """Run the server; yields (base URL ending in /v1, state)."""
    state = ServerState(plan)
    loop = asyncio.new_event_loop()
    app = web.Application()
    app[STATE] = state

    async def completions(r: web.Request) -> web.StreamResponse:
        return await _handle(r, "completions")

    async def chat(r: web.Request) -> web.StreamResponse:
        return await _handle(r, "chat")

    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=1.0)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/v1", state
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
        loop.close()
