"""The load generator's accuracy and cost against a server of known timing.

The server is ``tests/integration/timed_server.py`` in its own process: raw sockets, each
request's time is the kernel's receive time of its bytes (SO_TIMESTAMPNS), each chunk's the
moment it was handed to the socket, on the client's CLOCK_MONOTONIC. Per concurrency level
(closed-loop rounds) the client's figures are set against the server's log, request by
request:

* TTFT error: client TTFT (first chunk read - request sent) - server TTFT (first chunk
  written - request received);
* ITL error: each client chunk gap - the server's gap between the same two chunks;
* E2E error: client (last chunk - sent) - server (last chunk written - received);
* send lag: request due -> its bytes left (the client's own lateness, not in TTFT);
* client CPU seconds per 1,000 requests (the loadgen's process time over its run,
  metrics and run file included).

Then Poisson rates, doubling, at a cap of ``--rate-cap`` in flight: the highest rate the
client sustained (send lag p99 under ``--lag-ms`` and completed / sent = 1).

Prints a Markdown table; asserts nothing about time (exits 1 only if a request failed or
a figure could not be paired with the server's log).

    python benches/bench_loadgen.py [--levels 1,16,64,256] [--requests 512] [--tokens 16]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from timed_server import serve_timed

from pytimings.cli import main as cli
from pytimings.serving.runfile import load_run


def _run(url: str, out: Path, *extra: str) -> float:
    """Run loadgen in this process; its CPU seconds."""
    cpu = time.process_time()
    rc = cli(["loadgen", "--url", url, "--model", "m", "--input-len", "16", "--out", str(out),
              "-q", "--no-table", "--no-metrics", *extra])  # fmt: skip
    cpu = time.process_time() - cpu
    if rc != 0:
        raise SystemExit(f"loadgen exited {rc}")
    return cpu


def _errors(out: Path, truth: dict[str, dict[str, Any]]) -> dict[str, np.ndarray]:
    recs = [r for lv in load_run(out).levels for rd in lv.rounds for r in rd.records]
    if any(r.status != "ok" for r in recs):
        raise SystemExit(f"{sum(r.status != 'ok' for r in recs)} requests failed")
    ttft: list[int] = []
    itl: list[int] = []
    e2e: list[int] = []
    lag: list[int] = []
    for r in recs:
        assert r.server_id is not None
        t = truth[r.server_id]
        w = np.asarray(t["write_ns"], dtype=np.int64)
        c = np.asarray(r.chunk_ns, dtype=np.int64)
        if len(w) != len(c):
            raise SystemExit(f"{r.req_id}: {len(c)} chunks read, {len(w)} written")
        ttft.append((c[0] - r.start_ns) - (w[0] - t["recv_ns"]))
        e2e.append((c[-1] - r.start_ns) - (w[-1] - t["recv_ns"]))
        itl.extend(np.diff(c) - np.diff(w))
        assert r.scheduled_ns is not None
        lag.append(r.start_ns - r.scheduled_ns)
    return {k: np.asarray(v) / 1e6 for k, v in
            {"ttft": ttft, "itl": itl, "e2e": e2e, "lag": lag}.items()}  # fmt: skip


def _pct(values: np.ndarray) -> str:
    p50, p99 = np.percentile(values, [50, 99])
    return f"{p50:+.2f} / {p99:+.2f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--levels", default="1,16,64,256")
    p.add_argument("--requests", type=int, default=512, help="per level (at least 2 rounds)")
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--ttft-ms", type=float, default=50.0)
    p.add_argument("--itl-ms", type=float, default=10.0)
    p.add_argument("--rates", default="100,200,400,800,1600")
    p.add_argument("--rate-requests", type=int, default=1000)
    p.add_argument("--rate-cap", type=int, default=256)
    p.add_argument("--lag-ms", type=float, default=10.0)
    args = p.parse_args(argv)
    levels = [int(x) for x in args.levels.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="bench_loadgen-"))
    print(f"server: TTFT {args.ttft_ms:g} ms, {args.itl_ms:g} ms between tokens, "
          f"{args.tokens} tokens; errors are client - server log, ms, p50 / p99\n")  # fmt: skip
    print("| level | requests | TTFT error | ITL error | E2E error | send lag | "
          "CPU s / 1k req |\n|---|---:|---|---|---|---|---:|")  # fmt: skip
    with serve_timed(args.ttft_ms / 1e3, args.itl_ms / 1e3) as server:
        # imports and first-use costs, not counted
        _run(server.url, tmp / "first.json", "--requests", "2", "--rounds", "1", "--warmup", "0")
        for conc in levels:
            rounds = max(2, args.requests // conc)
            per_round = max(1, args.requests // rounds)
            out = tmp / f"c{conc}.json"
            cpu = _run(server.url, out, "--concurrency", str(conc), "--requests",
                       str(per_round), "--rounds", str(rounds), "--warmup", str(conc),
                       "--output-len", str(args.tokens))  # fmt: skip
            truth = {t["id"]: t for t in server.stats()["timings"]}
            err = _errors(out, truth)
            n = len(err["ttft"])
            print(f"| C={conc} | {n} | {_pct(err['ttft'])} | {_pct(err['itl'])} | "
                  f"{_pct(err['e2e'])} | {_pct(err['lag'])} | "
                  f"{cpu / (n + conc) * 1e3:.2f} |", flush=True)  # fmt: skip
        print("\n| Poisson rate | sent | TTFT error | send lag | sustained |\n"
              "|---:|---:|---|---|---|")  # fmt: skip
        for rate in (float(x) for x in args.rates.split(",")):
            out = tmp / f"r{rate:g}.json"
            _run(server.url, out, "--rate", f"{rate:g}", "--concurrency", str(args.rate_cap),
                 "--requests", str(args.rate_requests), "--rounds", "1", "--warmup", "0",
                 "--output-len", str(args.tokens))  # fmt: skip
            truth = {t["id"]: t for t in server.stats()["timings"]}
            err = _errors(out, truth)
            lag99 = float(np.percentile(err["lag"], 99))
            ok = lag99 < args.lag_ms and len(err["lag"]) == args.rate_requests
            print(f"| {rate:g}/s | {len(err['lag'])} | {_pct(err['ttft'])} | "
                  f"{_pct(err['lag'])} | {'yes' if ok else 'no'} |", flush=True)  # fmt: skip
            if not ok:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
