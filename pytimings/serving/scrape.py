"""One read of a Prometheus text endpoint during a load run (an engine's ``/metrics``, a DCGM
exporter's): the body under a *total* deadline and a size cap, every failure one
:class:`ScrapeFailed` naming why.

The deadline covers connect, headers and body together (aiohttp's ``ClientTimeout(total)``):
a server that trickles a byte every half second is cut at the deadline, where a timeout per
read (``urlopen(timeout=)``) would wait as long as the bytes keep coming. The body is read
in chunks and abandoned past :data:`MAX_BODY_BYTES` (an endless or runaway exposition is a
failed scrape, not gigabytes held each period); a vLLM server's exposition is ~73 KB, a
DCGM exporter's for 8 GPUs ~100 KB.
"""

from __future__ import annotations

import asyncio
import zlib
from typing import Any

__all__ = ["MAX_BODY_BYTES", "ScrapeFailed", "read_body", "read_body_once"]

MAX_BODY_BYTES = 16 << 20
_CHUNK = 1 << 16


class ScrapeFailed(Exception):
    """A scrape that gave no body: connect error, HTTP status, deadline, size cap, bad HTTP."""


async def read_body(
    session: Any, url: str, max_bytes: int = MAX_BODY_BYTES, compressed: bool = False
) -> bytes:
    """The body of ``GET url`` with ``session`` (an ``aiohttp.ClientSession`` whose
    ``timeout.total`` is the deadline); ScrapeFailed unless it answered 200 within
    ``max_bytes``. ``compressed``: zlib-compressed (level 1) chunk by chunk as it arrives
    (zlib lets other threads run; the whole body is never held nor joined)."""
    import aiohttp
    from aiohttp.http_exceptions import HttpProcessingError

    try:
        async with session.get(url) as resp:
            if resp.status != 200:
                raise ScrapeFailed(f"HTTP {resp.status}")
            if resp.content_length is not None and resp.content_length > max_bytes:
                raise ScrapeFailed(f"body of {resp.content_length:,} bytes, over {max_bytes:,}")
            packer = zlib.compressobj(1) if compressed else None
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.content.iter_chunked(_CHUNK):
                size += len(chunk)
                if size > max_bytes:
                    raise ScrapeFailed(f"body over {max_bytes:,} bytes")
                chunks.append(chunk if packer is None else packer.compress(chunk))
            if packer is not None:
                chunks.append(packer.flush())
            return b"".join(chunks)
    except asyncio.TimeoutError:
        raise ScrapeFailed(f"no whole answer within {session.timeout.total:g} s") from None
    except (aiohttp.ClientError, HttpProcessingError, ValueError, OSError) as exc:
        one_line = " ".join(f"{type(exc).__name__}: {exc}".split())  # aiohttp's span lines
        raise ScrapeFailed(one_line[:200]) from None


def read_body_once(url: str, deadline_s: float, max_bytes: int = MAX_BODY_BYTES) -> bytes:
    """:func:`read_body` from a thread without an event loop (a sampler's): a loop and a
    session of its own for this one read."""
    import aiohttp

    async def read() -> bytes:
        timeout = aiohttp.ClientTimeout(total=deadline_s)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            return await read_body(session, url, max_bytes)

    return asyncio.run(read())
