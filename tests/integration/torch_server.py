"""A tiny torch decoder behind a real aiohttp OpenAI-compatible streaming server that
records its requests with ``pytimings.request`` (loopback only, in its own process).

Engine: one scheduler task serves requests one at a time, first come first served. A
request waits in phase "queue" (behind the others, plus a planted delay set with
``POST /_config {"queue_delay_ms": x}``), then "prefill" (one forward pass over the prompt
gives the first token), then "decode" (one pass per further token, greedy). ``token()`` is
called as each token is produced, before the handler writes it. The completion id
``cmpl-<n>`` is both the stream's ``id`` and the engine's ``req_id``, so ``pytimings join``
can pair the two sides. ``POST /_save {"path": ...}`` saves the recording (regions and the
request log) and clears the log.
"""

from __future__ import annotations

import asyncio
import json
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from aiohttp import web

import pytimings
from pytimings.record.requests import ActiveRequest, default_log

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: run as a script
from helpers.loopback import child_port, serve_until_stdin_closes

VOCAB, DIM, LAYERS = 64, 32, 2


class TinyDecoder(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DIM)
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(DIM, 2, 2 * DIM, dropout=0.0, batch_first=True)
            for _ in range(LAYERS)
        )
        self.head = torch.nn.Linear(DIM, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Greedy next token after ``ids`` (1, T)."""
        mask = torch.nn.Transformer.generate_square_subsequent_mask(ids.shape[1])
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        return self.head(x[:, -1]).argmax(-1, keepdim=True)


@dataclass
class Job:
    r: ActiveRequest
    ids: torch.Tensor
    n: int
    out: asyncio.Queue[int | None] = field(default_factory=asyncio.Queue)


@dataclass
class State:
    model: TinyDecoder
    queue: asyncio.Queue[Job] = field(default_factory=asyncio.Queue)
    queue_delay_s: float = 0.0
    seen: int = 0


STATE = web.AppKey("state", State)


async def _engine(state: State) -> None:
    while True:
        job = await state.queue.get()
        if state.queue_delay_s:
            await asyncio.sleep(state.queue_delay_s)
        job.r.phase("prefill")
        with pytimings.region("prefill"), torch.inference_mode():
            ids = job.ids
            tok = state.model(ids)
        job.r.token()
        job.out.put_nowait(int(tok))
        job.r.phase("decode")
        for _ in range(job.n - 1):
            await asyncio.sleep(0)  # the handlers write what is ready
            with pytimings.region("decode_step"), torch.inference_mode():
                ids = torch.cat([ids, tok], dim=1)
                tok = state.model(ids)
            job.r.token()
            job.out.put_nowait(int(tok))
        job.out.put_nowait(None)


def _event(obj: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(obj)}\n\n".encode()


async def _completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    body = await request.json()
    rid = f"cmpl-{state.seen}"
    state.seen += 1
    words = str(body["prompt"]).split() or ["x"]
    ids = torch.tensor([[hash(w) % VOCAB for w in words]])
    n = int(body["max_tokens"])
    with pytimings.request(rid, input_tokens=ids.shape[1]) as r:
        r.phase("queue")
        job = Job(r, ids, n)
        state.queue.put_nowait(job)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        while (tok := await job.out.get()) is not None:
            choice = {"index": 0, "text": f" t{tok}"}
            await resp.write(_event({"id": rid, "object": "text_completion", "choices": [choice]}))
        usage = {"prompt_tokens": ids.shape[1], "completion_tokens": n}
        await resp.write(_event({"id": rid, "choices": [], "usage": usage}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    return resp


async def _config(request: web.Request) -> web.Response:
    request.app[STATE].queue_delay_s = float((await request.json())["queue_delay_ms"]) / 1e3
    return web.json_response({})


async def _save(request: web.Request) -> web.Response:
    pytimings.save((await request.json())["path"])  # the default recorder's regions too
    default_log().clear()
    pytimings.default_recorder().clear()
    return web.json_response({})


def _main() -> None:
    """Serve; print the port; stop when stdin closes."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    app = web.Application()
    model = TinyDecoder().eval()
    with torch.inference_mode():  # first calls of each shape are slow: not in any request
        for n in range(1, 40):
            model(torch.zeros((1, n), dtype=torch.long))
    app[STATE] = State(model)
    app.router.add_post("/v1/completions", _completions)
    app.router.add_post("/_config", _config)
    app.router.add_post("/_save", _save)

    serve_until_stdin_closes(app, lambda: _engine(app[STATE]))


@dataclass
class Server:
    url: str  # base URL ending in /v1
    _base: str

    def _post(self, path: str, obj: dict[str, Any]) -> None:
        req = urllib.request.Request(
            self._base + path, json.dumps(obj).encode(), {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=30):
            pass

    def set_queue_delay(self, ms: float) -> None:
        self._post("/_config", {"queue_delay_ms": ms})

    def save(self, path: str) -> None:
        self._post("/_save", {"path": path})


@contextmanager
def serve_torch() -> Iterator[Server]:
    with child_port([sys.executable, __file__]) as port:
        base = f"http://127.0.0.1:{port}"
        yield Server(base + "/v1", base)


if __name__ == "__main__":
    _main()
