"""``pytimings serve-toy``: a toy OpenAI-compatible engine to try ``loadgen``, ``compare``
and ``report`` without a GPU or a real engine (real HTTP, aiohttp).

It schedules like a continuous-batching engine, so a concurrency sweep shows what a real
one does: requests wait in arrival order for one of ``--max-batch`` slots; a request
admitted to the batch is prefilled (``--prefill-us-per-token`` per prompt token, the whole
batch waiting meanwhile); then every decode step takes ``--step-ms`` plus ``--per-seq-ms``
per running request and gives each running request one token. TPOT therefore grows with the
batch, and TTFT jumps once the concurrency passes ``--max-batch`` (requests queue): a knee.
Prompt tokens are the prompt's words (``loadgen``'s prompts are ``--input-len`` words).

Endpoints: ``POST /v1/completions`` and ``/v1/chat/completions`` (streamed as server-sent
events, one token per chunk, the final ``usage`` when ``stream_options.include_usage`` is
asked; unstreamed: one JSON answer), ``GET /v1/models``, ``GET /health`` and, with
``prometheus_client`` installed, ``GET /metrics`` under vLLM's names
(``vllm:num_requests_running``, ``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc``)
so ``loadgen`` scrapes it as it would a vLLM server. The text it streams is not a model's.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import importlib.util
import json
import time
from dataclasses import dataclass, field
from typing import Any

from pytimings.console.args import bounded_int, finite_float
from pytimings.console.options import DETAIL
from pytimings.errors import UsageError, install_hint

__all__ = ["ToyEngine", "add_arguments", "run"]


@dataclass
class _Request:
    prompt_tokens: int
    max_tokens: int
    tokens: asyncio.Queue[int | None] = field(default_factory=asyncio.Queue)
    produced: int = 0


@dataclass
class ToyEngine:
    """The scheduler (module docstring); times in seconds."""

    max_batch: int = 8
    step_s: float = 0.010
    per_seq_s: float = 0.001
    prefill_s_per_token: float = 50e-6
    kv_capacity_tokens: int = 65536
    waiting: collections.deque[_Request] = field(default_factory=collections.deque)
    running: list[_Request] = field(default_factory=list)
    steps: int = 0
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    def submit(self, req: _Request) -> None:
        self.waiting.append(req)
        self._wake.set()

    def kv_usage(self) -> float:
        held = sum(r.prompt_tokens + r.produced for r in self.running)
        return min(1.0, held / self.kv_capacity_tokens)

    async def loop(self) -> None:
        """Admit, prefill, decode, forever (cancelled when the server stops)."""
        while True:
            if not self.running and not self.waiting:
                self._wake.clear()
                await self._wake.wait()
            admitted = []
            while self.waiting and len(self.running) < self.max_batch:
                admitted.append(self.waiting.popleft())
                self.running.append(admitted[-1])
            if admitted:
                await asyncio.sleep(
                    self.prefill_s_per_token * sum(r.prompt_tokens for r in admitted)
                )
            await asyncio.sleep(self.step_s + self.per_seq_s * len(self.running))
            self.steps += 1
            for r in self.running:
                r.produced += 1
                r.tokens.put_nowait(r.produced)
            for r in [r for r in self.running if r.produced >= r.max_tokens]:
                r.tokens.put_nowait(None)
                self.running.remove(r)


def _prompt_tokens(body: dict[str, Any], chat: bool) -> int:
    if chat:
        messages = body.get("messages") or []
        text = " ".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))
    else:
        prompt = body.get("prompt", "")
        text = " ".join(map(str, prompt)) if isinstance(prompt, list) else str(prompt)
    return max(1, len(text.split()))


def _chunk(chat: bool, rid: str, model: str, text: str | None, **extra: Any) -> bytes:
    if text is None:
        choices: list[dict[str, Any]] = []
    elif chat:
        choices = [{"index": 0, "delta": {"content": text}, "finish_reason": None}]
    else:
        choices = [{"index": 0, "text": text, "finish_reason": None}]
    obj = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
           "created": int(time.time()), "model": model, "choices": choices, **extra}  # fmt: skip
    return f"data: {json.dumps(obj)}\n\n".encode()


def make_app(engine: ToyEngine, model: str) -> Any:
    """The aiohttp application serving ``engine`` as ``model``."""
    from aiohttp import web

    counter = iter(range(1 << 62))

    async def generate(request: web.Request, chat: bool) -> web.StreamResponse:
        try:
            body = await request.json()
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 16)
        except (ValueError, TypeError):
            return web.json_response({"error": {"message": "bad request body"}}, status=400)
        if body.get("model", model) != model:
            return web.json_response(
                {"error": {"message": f"model {body.get('model')!r} not served; try {model!r}"}},
                status=404,
            )
        if max_tokens < 1:
            return web.json_response({"error": {"message": "max_tokens must be >= 1"}}, status=400)
        req = _Request(_prompt_tokens(body, chat), max_tokens)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-toy-{next(counter)}"
        engine.submit(req)
        if not body.get("stream"):
            while await req.tokens.get() is not None:
                pass
            text = " tok" * max_tokens
            choice: dict[str, Any] = (
                {"index": 0, "message": {"role": "assistant", "content": text}}
                if chat
                else {"index": 0, "text": text}
            )
            choice["finish_reason"] = "length"
            usage = {"prompt_tokens": req.prompt_tokens, "completion_tokens": max_tokens}
            return web.json_response({"id": rid, "model": model, "choices": [choice],
                                      "usage": usage})  # fmt: skip
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if chat:  # real servers open a chat stream with a role-only delta
            role = {"id": rid, "model": model, "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"role": "assistant"}}]}  # fmt: skip
            await resp.write(f"data: {json.dumps(role)}\n\n".encode())
        while await req.tokens.get() is not None:
            await resp.write(_chunk(chat, rid, model, " tok"))
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": req.prompt_tokens, "completion_tokens": max_tokens,
                     "total_tokens": req.prompt_tokens + max_tokens}  # fmt: skip
            await resp.write(_chunk(chat, rid, model, None, usage=usage))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def completions(request: web.Request) -> web.StreamResponse:
        return await generate(request, chat=False)

    async def chat_completions(request: web.Request) -> web.StreamResponse:
        return await generate(request, chat=True)

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": model, "object": "model"}]})

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    if importlib.util.find_spec("prometheus_client") is not None:
        app.router.add_get("/metrics", _metrics_handler(engine))
    return app


def _metrics_handler(engine: ToyEngine) -> Any:
    from aiohttp import web
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest

    registry = CollectorRegistry()
    running = Gauge("vllm:num_requests_running", "requests in the batch", registry=registry)
    waiting = Gauge("vllm:num_requests_waiting", "requests queued", registry=registry)
    kv = Gauge("vllm:kv_cache_usage_perc", "KV cache usage (0-1)", registry=registry)
    # the engine's own batch limit (vLLM publishes none): what a queueing finding may name
    limit = Gauge("pytimings_toy:max_batch", "requests the batch holds at most", registry=registry)

    async def metrics(_: web.Request) -> web.Response:
        limit.set(engine.max_batch)
        running.set(len(engine.running))
        waiting.set(len(engine.waiting))
        kv.set(engine.kv_usage())
        return web.Response(body=generate_latest(registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})  # fmt: skip

    return metrics


# the suggested loadgen's size: short prompts and streams, one round, every connection
# opened by the warm-up: about 30 s on 2 cores at the defaults, the knee at 16 > --max-batch
# (loadgen's own defaults, 1080 prompt and 1020 output tokens in 3 rounds, take an hour here)
TRY_LOADGEN = "--requests 32 --rounds 1 --warmup 16 --input-len 128 --output-len 32"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument(
        "--port", type=bounded_int(0, 65535), default=8000, help="port (0: any free one)"
    )
    p.add_argument("--model", default="toy", help=f"the model name{DETAIL}the one it answers to")
    p.add_argument(
        "--max-batch", type=bounded_int(1, 1 << 16), default=8,
        help="requests decoded together; more wait in arrival order",
    )  # fmt: skip
    p.add_argument(
        "--step-ms", type=finite_float, default=10.0, help="a decode step's fixed time (ms)"
    )
    p.add_argument(
        "--per-seq-ms", type=finite_float, default=1.0,
        help="a decode step's time per running request (ms)",
    )  # fmt: skip
    p.add_argument(
        "--prefill-us-per-token", type=finite_float, default=50.0,
        help="prefill time per prompt token (µs)",
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("aiohttp") is None:
        raise UsageError(f"serve-toy needs aiohttp: {install_hint('serving')}")
    for flag, v in (("--step-ms", args.step_ms), ("--per-seq-ms", args.per_seq_ms),
                    ("--prefill-us-per-token", args.prefill_us_per_token)):  # fmt: skip
        if v < 0:
            raise UsageError(f"{flag} must be >= 0, got {v:g}")
    engine = ToyEngine(args.max_batch, args.step_ms / 1e3, args.per_seq_ms / 1e3,
                       args.prefill_us_per_token / 1e6)  # fmt: skip
    try:
        asyncio.run(_serve(engine, args.model, args.host, args.port))
    except OSError as exc:
        raise UsageError(
            f"--host {args.host} --port {args.port}: cannot listen ({exc.strerror or exc})"
        ) from None
    return 0


async def _serve(engine: ToyEngine, model: str, host: str, port: int) -> None:
    from aiohttp import web

    runner = web.AppRunner(make_app(engine, model), shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound = runner.addresses[0][1]
    url = f"http://{host}:{bound}/v1"
    print(
        f"serving a toy OpenAI-compatible engine (model {model!r}, batch {engine.max_batch}) "
        f"at {url}; Ctrl-C stops it. Try:\n"
        f"  pytimings loadgen --url {url} --model {model} --concurrency 1,4,16 "
        f"{TRY_LOADGEN} --out run.json\n  pytimings report run.json",
        flush=True,
    )
    loop = asyncio.ensure_future(engine.loop())
    try:
        await asyncio.Event().wait()  # until cancelled (Ctrl-C)
    finally:
        loop.cancel()
        await runner.cleanup()
