"""Real HTTP servers for the serving tests, each in its own process on 127.0.0.1 and a free
port (as a real server is: no GIL shared with the client under test): the child serves an
aiohttp app and prints its port; the parent stops it by closing the child's stdin."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from aiohttp import web


def serve_until_stdin_closes(
    app: web.Application,
    on_start: Callable[[], Awaitable[Any]] | None = None,
    **runner_kwargs: Any,
) -> None:
    """In the child: serve ``app``, print the port, return when the parent closes stdin.
    ``on_start``: a coroutine started with the server (an engine loop), cancelled at exit."""

    async def amain() -> None:
        task = asyncio.ensure_future(on_start()) if on_start is not None else None
        runner = web.AppRunner(app, shutdown_timeout=1.0, **runner_kwargs)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(runner.addresses[0][1], flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        if task is not None:
            task.cancel()
        await runner.cleanup()

    asyncio.run(amain())


@contextmanager
def child_port(argv: Sequence[str]) -> Iterator[int]:
    """In the parent: run ``argv`` (a server script), yield the port it printed."""
    proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


RawHandler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


@contextmanager
def raw_server(handle: RawHandler) -> Iterator[str]:
    """A TCP server on 127.0.0.1 that answers each connection with ``handle(reader, writer,
    n)`` (n: the connection's number from 0), as bytes it writes itself: the HTTP a real
    server would not send (a trickle, a bad status line, a cut body). Yields
    ``http://127.0.0.1:PORT``; every connection is closed when the block ends."""
    import threading

    loop = asyncio.new_event_loop()
    ready = threading.Event()
    state: dict[str, Any] = {"n": 0}

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = state["n"]
        state["n"] += 1
        try:
            await reader.readuntil(b"\r\n\r\n")
            await handle(reader, writer, n)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client gone, or the server stopping: a trickle ends here
        finally:
            writer.close()

    async def start() -> None:
        state["server"] = await asyncio.start_server(on_connect, "127.0.0.1", 0)
        state["port"] = state["server"].sockets[0].getsockname()[1]
        ready.set()

    thread = threading.Thread(target=lambda: (loop.run_until_complete(start()), loop.run_forever()))
    thread.start()
    ready.wait(10)
    try:
        yield f"http://127.0.0.1:{state['port']}"
    finally:

        async def stop() -> None:
            state["server"].close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
