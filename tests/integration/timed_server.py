"""A fast OpenAI-compatible streaming server with known timing, for the load generator's
accuracy tests and benchmark (loopback only, in its own process).

Raw sockets on an asyncio loop (no web framework), so its own cost per request is a few
tens of microseconds, and what it logs is what happened on the wire: ``recv_ns`` is the
kernel's receive time of a request's last bytes (SO_TIMESTAMPNS, moved onto
CLOCK_MONOTONIC), so a late-running server loop on a loaded machine does not shift it;
``write_ns`` when each token chunk was
handed to the socket, on CLOCK_MONOTONIC like the client. Each request streams
``max_tokens`` chunks of one token, the first due ``ttft_s`` after ``recv_ns``, then one every
``itl_s`` (timers on the event loop, no task per request), then a usage event and
``data: [DONE]``. ``prompt_tokens`` in the usage is the prompt's word count. GET
``/_stats`` returns the log (and when each connection was accepted); any other GET gets an
empty 200 (the client's pool warm-up).
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: run as a script
from helpers.loopback import child_port

_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunked(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _kernel_ns(ancillary: list[tuple[int, int, bytes]]) -> int | None:
    """The kernel's receive time of the data (SO_TIMESTAMPNS, CLOCK_REALTIME) on
    CLOCK_MONOTONIC, or None when the kernel gave none."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
            sec, nsec = struct.unpack("qq", data[:16])
            offset = time.clock_gettime_ns(time.CLOCK_REALTIME) - time.monotonic_ns()
            return int(sec * 1_000_000_000 + nsec - offset)
    return None


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux


class _Connection:
    """One client connection, read when readable; ``recv_ns`` of a request is the kernel's
    receive time of its last bytes (what the server can see, however late its loop runs)."""

    def __init__(self, server: _TimedServer, sock: socket.socket) -> None:
        self.server, self.sock = server, sock
        self.buffer = b""
        self.closed = False
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        asyncio.get_running_loop().add_reader(sock, self.readable)

    def readable(self) -> None:
        try:
            data, ancillary, _, _ = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(16))
        except OSError:
            data, ancillary = b"", []
        if not data:
            asyncio.get_running_loop().remove_reader(self.sock)
            self.closed = True
            self.sock.close()
            return
        recv_ns = _kernel_ns(ancillary) or time.monotonic_ns()
        self.buffer += data
        while True:
            head_end = self.buffer.find(b"\r\n\r\n")
            if head_end < 0:
                return
            head = self.buffer[:head_end].decode("latin-1").split("\r\n")
            fields = dict(line.split(":", 1) for line in head[1:] if ":" in line)
            length = int(next((v for k, v in fields.items() if k.lower() == "content-length"),
                              "0"))  # fmt: skip
            if len(self.buffer) < head_end + 4 + length:
                return
            body = self.buffer[head_end + 4 : head_end + 4 + length]
            self.buffer = self.buffer[head_end + 4 + length :]
            self.server.request(self, head[0].split(" ")[:2], body, recv_ns)

    def write(self, data: bytes) -> None:
        if not self.closed:
            self.sock.sendall(data)  # a blocking socket: loopback buffers take it at once

    def send(self, data: bytes, eof: bool = False) -> None:
        self.write(_chunked(data) + (b"0\r\n\r\n" if eof else b""))


@dataclass
class _Stream:
    conn: _Connection
    rid: str
    n: int
    prompt_tokens: int
    recv_ns: int
    sent: int = 0


class _TimedServer:
    def __init__(self, ttft_s: float, itl_s: float) -> None:
        self.ttft_s, self.itl_s = ttft_s, itl_s
        self.timings: list[dict[str, Any]] = []
        self.accepted_ns: list[int] = []  # when each connection was accepted
        self.seen = 0

    def request(self, conn: _Connection, line: list[str], body: bytes, recv_ns: int) -> None:
        method, path = line
        if method == "GET":
            payload = json.dumps({"seen": self.seen, "timings": self.timings,
                                  "accepted_ns": self.accepted_ns}).encode()  # fmt: skip
            if path != "/_stats":
                payload = b""
            conn.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(payload), payload)
            )
            return
        req = json.loads(body)
        prompt = req.get("prompt") or req["messages"][-1]["content"]
        stream = _Stream(conn, f"cmpl-{self.seen}", int(req["max_tokens"]), len(prompt.split()),
                         recv_ns)  # fmt: skip
        self.seen += 1
        conn.write(_HEAD)
        self.timings.append({"id": stream.rid, "recv_ns": recv_ns, "write_ns": []})
        log = self.timings[-1]["write_ns"]
        loop = asyncio.get_running_loop()
        # each chunk is due at recv + ttft + k * itl (timers, so lateness does not add up)
        t0 = loop.time() - (time.monotonic_ns() - recv_ns) / 1e9 + self.ttft_s

        def tick() -> None:
            stream.sent += 1
            chunk = {"id": stream.rid, "object": "text_completion",
                     "choices": [{"index": 0, "text": " tok"}]}  # fmt: skip
            log.append(time.monotonic_ns())
            conn.send(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            if stream.sent < stream.n:
                loop.call_at(t0 + stream.sent * self.itl_s, tick)
                return
            usage = {"prompt_tokens": stream.prompt_tokens, "completion_tokens": stream.n}
            tail = {"id": stream.rid, "choices": [], "usage": usage}
            conn.send(b"data: " + json.dumps(tail).encode() + b"\n\ndata: [DONE]\n\n", eof=True)

        loop.call_at(t0, tick)


def _main() -> None:
    """Serve with ttft_s, itl_s from argv; print the port; stop when stdin closes."""
    server = _TimedServer(float(sys.argv[1]), float(sys.argv[2]))

    async def amain() -> None:
        loop = asyncio.get_running_loop()
        listener = socket.create_server(("127.0.0.1", 0), backlog=1024)
        listener.setblocking(False)

        def accept() -> None:
            sock, _ = listener.accept()
            server.accepted_ns.append(time.monotonic_ns())
            sock.setblocking(True)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _Connection(server, sock)

        loop.add_reader(listener, accept)
        print(listener.getsockname()[1], flush=True)
        await loop.run_in_executor(None, sys.stdin.read)
        listener.close()

    asyncio.run(amain())


@dataclass
class TimedServer:
    url: str  # base URL ending in /v1
    port: int

    def stats(self) -> dict[str, Any]:
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/_stats", timeout=10) as f:
            return dict(json.load(f))


@contextmanager
def serve_timed(ttft_s: float, itl_s: float) -> Iterator[TimedServer]:
    """The server in its own process on 127.0.0.1 and a free port."""
    with child_port([sys.executable, __file__, str(ttft_s), str(itl_s)]) as port:
        yield TimedServer(f"http://127.0.0.1:{port}/v1", port)


if __name__ == "__main__":
    _main()
