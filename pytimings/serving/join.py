"""``pytimings join``: what the client saw next to what the engine did, request by request.

Inputs: a load-generator run file (``pytimings.serving/2``) and an engine recording with a
"requests" table (``pytimings.request`` timelines, :mod:`pytimings.record.requests`).

Matching. A client request is joined with the engine request whose ``req_id`` is the
client's ``server_id`` (the id the server put in its stream; the engine uses the same id).
Client requests left over (no server id, or one the engine never logged) are matched by
start time: the engine request, not yet taken, whose start (on the client's clock) is
closest to the client's send, at most ``tolerance_ns`` after it (or the clock's
uncertainty before it); ties between simultaneous sends can swap two requests. Every
request of either side ends up matched or counted unmatched (the engine's warm-up
requests are unmatched: the run file saves warm-up counts, not the requests).

One timeline. Same host: both sides stamp CLOCK_MONOTONIC, offset 0. Different hosts: the
offset ``theta`` (engine clock minus client clock) is estimated NTP-style from the
id-matched pairs, each a request/response exchange: the engine received the request after
the client sent it (``theta <= s_start - c_start``) and made the first token before the
client read it (``theta >= s_first - c_first``). The intersection of these bounds over all
pairs (NTP's minimum-delay filter) brackets ``theta``; its midpoint is the offset and its
half-width the uncertainty. Bounds that do not intersect mean drifting clocks or wrong
matches: an error, never a guess.

Decomposition of client TTFT (``c_first - c_start``), per request, on the client's clock:
``send`` (client send -> engine start), the engine's time to its first token split by the
phase it was in (a phase lasts until the next starts; ``unphased``: engine time before the
first phase), and ``first_token_delivery`` (engine's first token -> client's first chunk).
The parts sum to client TTFT exactly. Per request also: client TTFT and E2E (vLLM's: to
the last chunk), engine TTFT and E2E (start to first token, to the end of the request),
and the whole time in each phase. Per concurrency level: p50 and p99 of each part (linear)
and its share of the level's client TTFT (sum of the part over sum of TTFT; shares add up
to 1). Only pairs where both sides completed with tokens enter the figures; the others
keep their statuses and null times.

Output schema ``pytimings.join/1``::

    {"schema": "pytimings.join/1",
     "matched": int, "unmatched_client": int, "unmatched_server": int,
     "clock": {"offset_ns": int, "uncertainty_ns": int},
     "requests": [{"id", "server_id", "concurrency", "round", "matched_by": "id" | "time",
                   "client_status", "server_status", "client_ttft_ns", "client_e2e_ns",
                   "server_ttft_ns", "server_e2e_ns", "send_ns", "phases_ns": {phase: ns},
                   "first_token_delivery_ns", "ttft_parts_ns": {part: ns}}, ...],
     "levels": [{"concurrency": int,
                 "parts": {part: {"p50_ns", "p99_ns", "share"}}}, ...]}
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from pytimings.console.text import duration
from pytimings.errors import TraceFormatError, UsageError
from pytimings.model.requests import RequestRecord
from pytimings.serving._format import format_table
from pytimings.serving.metrics import measured, phase_durations
from pytimings.serving.runfile import Level, Round, Run

SCHEMA = "pytimings.join/1"
SEND, UNPHASED, DELIVERY = "send", "unphased", "first_token_delivery"
AFTER_FIRST = "to_last_chunk"  # a timeline's part after the client's first chunk
ClockMode = Literal["same", "estimate"]


@dataclass(frozen=True)
class Clock:
    offset_ns: int  # engine clock minus client clock
    uncertainty_ns: int
    how: str  # said in the text output

    def to_json(self) -> dict[str, int]:
        return {"offset_ns": self.offset_ns, "uncertainty_ns": self.uncertainty_ns}


@dataclass(frozen=True)
class _Pair:
    client: RequestRecord
    server: RequestRecord
    concurrency: int
    round: int
    matched_by: str


def _complete(r: RequestRecord) -> bool:
    return bool(measured([r]))


def estimate_clock(pairs: Sequence[tuple[RequestRecord, RequestRecord]]) -> Clock:
    """The engine-minus-client offset bracketed by request/response pairs (module doc)."""
    usable = [(c, s) for c, s in pairs if _complete(c) and _complete(s)]
    if not usable:
        raise UsageError(
            "cannot estimate the clock offset: no request completed on both sides with a "
            "matching server id (same host? use --clock same)"
        )
    hi = min(s.start_ns - c.start_ns for c, s in usable)
    lo = max(s.chunk_ns[0] - c.chunk_ns[0] for c, s in usable)
    if lo > hi:
        raise UsageError(
            f"no single clock offset fits the {len(usable)} matched requests (bounds cross by "
            f"{duration(lo - hi)}): drifting clocks, or ids matched to other requests"
        )
    return Clock(
        (lo + hi) // 2, (hi - lo + 1) // 2, f"estimated from {len(usable)} request/response pairs"
    )


def _client_requests(run: Run) -> list[tuple[RequestRecord, int, int]]:
    return [
        (r, lv.concurrency, rd.index) for lv in run.levels for rd in lv.rounds for r in rd.records
    ]


def closest_pairs(
    clients: Sequence[int], starts: Sequence[int], before_ns: int, after_ns: int
) -> list[tuple[int, int]]:
    """Greedy closest-first matching of client send times to sorted engine ``starts``: of
    all pairs with ``client - before_ns <= start <= client + after_ns``, the closest is
    taken first (ties: lower client index, then lower start index), then the closest among
    those left, and so on; returns (client index, start index) pairs.

    A sorted sweep: each unmatched client keeps one candidate, its nearest engine start not
    yet tried, in a heap, and steps outwards only when that start was taken. Memory is
    proportional to the input, not to the pairs within the tolerance (20k requests at 10k
    req/s with a 1 s tolerance used to build 200 M candidate pairs)."""
    # below a client, equal starts are tried lowest index first (the rule's tie order):
    # the left cursor walks each run of equal starts upwards, the runs downwards
    run_start = [0] * len(starts)
    for i in range(1, len(starts)):
        run_start[i] = run_start[i - 1] if starts[i] == starts[i - 1] else i
    heap: list[tuple[int, int, int]] = []
    left_end: list[int] = []  # per client: the run of starts below it being tried ...
    left: list[int] = []  # ... the index in it to try next, and the next index above
    right: list[int] = []
    lo_of: list[int] = []
    hi_of: list[int] = []
    for c in clients:
        lo = bisect.bisect_left(starts, c - before_ns)
        hi = bisect.bisect_right(starts, c + after_ns)
        mid = min(max(bisect.bisect_left(starts, c), lo), hi)
        lo_of.append(lo)
        hi_of.append(hi)
        left_end.append(mid - 1)
        left.append(max(run_start[mid - 1], lo) if mid > lo else mid - 1)
        right.append(mid)

    def push_next(ci: int) -> None:
        c, li, ri = clients[ci], left[ci], right[ci]
        best: tuple[int, int] | None = None
        if left_end[ci] >= lo_of[ci]:
            best = (c - starts[li], li)
        if ri < hi_of[ci] and (best is None or (starts[ri] - c, ri) < best):
            best = (starts[ri] - c, ri)
        if best is not None:
            heapq.heappush(heap, (best[0], ci, best[1]))

    for ci in range(len(clients)):
        push_next(ci)
    taken: set[int] = set()
    out: list[tuple[int, int]] = []
    while heap:
        _, ci, si = heapq.heappop(heap)
        if si not in taken:
            taken.add(si)
            out.append((ci, si))
            continue
        if si == right[ci]:  # that start went to another client: step past it
            right[ci] += 1
        elif si < left_end[ci]:
            left[ci] += 1
        else:  # the run is used up: the next run down
            end = run_start[si] - 1
            left_end[ci] = end
            left[ci] = max(run_start[end], lo_of[ci]) if end >= lo_of[ci] else end
        push_next(ci)
    return out


def _match(
    run: Run, engine: Sequence[RequestRecord], where: str, mode: ClockMode, tolerance_ns: int
) -> tuple[list[_Pair], Clock, int, int]:
    by_id: dict[str, RequestRecord] = {}
    for s in engine:
        if s.req_id in by_id:
            raise TraceFormatError(where, f"request id {s.req_id!r} appears twice")
        by_id[s.req_id] = s
    clash = sorted(
        {n for s in engine for n, _ in s.phases} & {SEND, UNPHASED, DELIVERY, AFTER_FIRST}
    )
    if clash:
        raise TraceFormatError(where, f"engine phase {clash[0]!r} has the name of a join part")
    clients = _client_requests(run)
    seen: set[str] = set()
    pairs: list[_Pair] = []
    rest: list[tuple[RequestRecord, int, int]] = []
    for c, conc, ri in clients:
        found = by_id.get(c.server_id) if c.server_id is not None else None
        if found is None:
            rest.append((c, conc, ri))
            continue
        if found.req_id in seen:
            raise TraceFormatError(run.path, f"server id {c.server_id!r} appears twice")
        seen.add(found.req_id)
        pairs.append(_Pair(c, found, conc, ri, "id"))
    if mode == "same":
        clock = Clock(0, 0, "same host: one CLOCK_MONOTONIC")
    else:
        clock = estimate_clock([(p.client, p.server) for p in pairs])
    free = sorted((s for s in engine if s.req_id not in seen), key=lambda s: s.start_ns)
    starts = [s.start_ns - clock.offset_ns for s in free]  # on the client's clock
    matched = closest_pairs(
        [c.start_ns for c, _, _ in rest],
        starts,
        clock.uncertainty_ns,
        tolerance_ns + clock.uncertainty_ns,
    )
    for ci, si in matched:
        c, conc, ri = rest[ci]
        pairs.append(_Pair(c, free[si], conc, ri, "time"))
    order = {id(c): k for k, (c, _, _) in enumerate(clients)}
    pairs.sort(key=lambda p: order[id(p.client)])  # the run file's order
    return pairs, clock, len(clients) - len(pairs), len(engine) - len(pairs)


def ttft_parts(client: RequestRecord, server: RequestRecord, offset_ns: int) -> dict[str, int]:
    """Client TTFT split into send, engine phases before the first token, and delivery."""
    s0, s1 = server.start_ns, server.chunk_ns[0]
    parts = {SEND: s0 - offset_ns - client.start_ns}
    phases = sorted(server.phases, key=lambda p: p[1])
    first_phase = phases[0][1] if phases else s1
    if min(first_phase, s1) > s0:
        parts[UNPHASED] = min(first_phase, s1) - s0
    ends = [t for _, t in phases[1:]] + [server.end_ns if server.end_ns is not None else s1]
    for (name, t0), t1 in zip(phases, ends, strict=True):
        parts[name] = parts.get(name, 0) + max(0, min(t1, s1) - max(t0, s0))
    parts[DELIVERY] = client.chunk_ns[0] - (s1 - offset_ns)
    return parts


def _request_json(p: _Pair, offset_ns: int) -> dict[str, Any]:
    c, s = p.client, p.server
    c_ok, s_ok = _complete(c), _complete(s)
    both = c_ok and s_ok
    parts = ttft_parts(c, s, offset_ns) if both else None
    return {
        "id": c.req_id, "server_id": s.req_id, "concurrency": p.concurrency, "round": p.round,
        "matched_by": p.matched_by,
        "client_status": c.status if c_ok or c.status != "ok" else "no_tokens",
        "server_status": s.status if s_ok or s.status != "ok" else "no_tokens",
        "client_ttft_ns": c.chunk_ns[0] - c.start_ns if c_ok else None,
        "client_e2e_ns": c.chunk_ns[-1] - c.start_ns if c_ok else None,
        "server_ttft_ns": s.chunk_ns[0] - s.start_ns if s_ok else None,
        "server_e2e_ns": s.end_ns - s.start_ns if s.end_ns is not None else None,
        "send_ns": parts[SEND] if parts else None,
        "phases_ns": phase_durations(s),
        "first_token_delivery_ns": parts[DELIVERY] if parts else None,
        "ttft_parts_ns": parts,
    }  # fmt: skip


def _levels(requests: list[dict[str, Any]], order: list[int]) -> list[dict[str, Any]]:
    out = []
    for conc in order:
        rows = [q for q in requests if q["concurrency"] == conc and q["ttft_parts_ns"]]
        if not rows:
            out.append({"concurrency": conc, "parts": {}})
            continue
        names = [SEND, UNPHASED]
        for q in rows:
            names += [n for n in q["ttft_parts_ns"] if n not in names and n != DELIVERY]
        names.append(DELIVERY)
        total = float(sum(q["client_ttft_ns"] for q in rows))
        parts = {}
        for name in names:
            v = np.array([q["ttft_parts_ns"].get(name, 0) for q in rows], np.float64)
            if name == UNPHASED and not v.any():
                continue
            p50, p99 = np.percentile(v, [50, 99])
            share = float(v.sum()) / total if total > 0 else math.nan
            parts[name] = {"p50_ns": float(p50), "p99_ns": float(p99), "share": share}
        out.append({"concurrency": conc, "parts": parts})
    return out


def join(
    run: Run,
    engine: Sequence[RequestRecord],
    engine_path: str,
    mode: ClockMode,
    tolerance_ns: int,
) -> tuple[dict[str, Any], Clock]:
    """The ``pytimings.join/1`` document, and the clock with how it was found."""
    pairs, clock, unmatched_c, unmatched_s = _match(run, engine, engine_path, mode, tolerance_ns)
    requests = [_request_json(p, clock.offset_ns) for p in pairs]
    check_causality(requests, clock, mode)
    doc = {
        "schema": SCHEMA,
        "matched": len(pairs),
        "unmatched_client": unmatched_c,
        "unmatched_server": unmatched_s,
        "clock": clock.to_json(),
        "requests": requests,
        "levels": _levels(requests, [lv.concurrency for lv in run.levels]),
    }
    return doc, clock


def why_unmatched(
    run: Run, engine: Sequence[RequestRecord], clock: Clock, tolerance_ns: int
) -> str:
    """Why :func:`join` matched no request: by id (which side carries none, or that none is
    shared) and by start time (each side's span on the client's clock)."""
    clients = [c for c, _, _ in _client_requests(run)]
    if not clients:
        return "the run file holds no measured requests"
    if not engine:
        return "the recording holds no request timelines (pytimings.request)"
    with_ids = [c.server_id for c in clients if c.server_id is not None]
    if not with_ids:
        by_id = "no client request carries a server id"
    else:
        by_id = (
            f"none of the {len(with_ids)} server ids of the client's requests (e.g. "
            f"{with_ids[0]!r}) is an engine request id (e.g. {engine[0].req_id!r})"
        )
    client_span = (min(c.start_ns for c in clients), max(c.start_ns for c in clients))
    engine_span = (
        min(s.start_ns for s in engine) - clock.offset_ns,
        max(s.start_ns for s in engine) - clock.offset_ns,
    )
    after_ns, before_ns = engine_span[0] - client_span[1], client_span[0] - engine_span[1]
    where = "after the client's last" if after_ns > before_ns else "before the client's first"
    by_time = (
        f"the engine's requests start {duration(max(after_ns, before_ns))} {where} send "
        f"({clock.how})"
        if max(after_ns, before_ns) > tolerance_ns
        else f"no engine request started within --tolerance-ms {tolerance_ns / 1e6:g} of a "
        f"client's send ({clock.how})"
    )
    return f"{by_id}; by start time, {by_time}: are they of the same run?"


def auto_clock(run: Run, engine_path: str) -> ClockMode:
    """``--clock auto``: "same" when the run file and the recording were stamped by one
    kernel (the same boot id; a host name alone is not enough: a container or a reboot
    keeps the name but not the clock); by host name only for files that carry no boot id."""
    from pytimings.ingest.recording_file import load_recording

    meta = load_recording(engine_path).meta
    boot = meta.get("boot_id")
    if run.boot_id is not None and isinstance(boot, str) and boot:
        return "same" if boot == run.boot_id else "estimate"
    host = meta.get("hostname")
    return "same" if run.host is not None and run.host == host else "estimate"


def check_causality(requests: Sequence[dict[str, Any]], clock: Clock, mode: ClockMode) -> None:
    """Refuse a join in which an engine starts a request before its client sent it, or
    makes a first token after the client read it (beyond the clock's uncertainty): the
    clocks are not what ``mode`` took them for, and every part would be wrong."""
    tol = clock.uncertainty_ns
    bad = [
        (q[key], q["id"], what)
        for q in requests
        for key, what in (("send_ns", "send"), ("first_token_delivery_ns", "delivery"))
        if q[key] is not None and q[key] < -tol
    ]
    if bad:
        worst, rid, what = min(bad)
        hint = "; try --clock estimate" if mode == "same" else ""
        raise UsageError(
            f"{len(bad)} {what if len({b[2] for b in bad}) == 1 else 'send/delivery'} "
            f"time(s) come out negative (request {rid!r}: {what} {duration(worst)}): the "
            f"two clocks are not one ({clock.how}){hint}"
        )


def shares_ids(run: Run, engine: Sequence[RequestRecord]) -> bool:
    """Whether any client request carries the id of an engine request."""
    ids = {s.req_id for s in engine}
    return any(c.server_id in ids for c, _, _ in _client_requests(run))


@dataclass(frozen=True)
class EngineSplit:
    """An engine's requests laid out as the run's levels and rounds (engine clock)."""

    levels: list[Level]  # each level's ``warmup["requests"]``: its engine warm-up requests
    outside: int  # engine requests matched to no client and sent in no level's warm-up


def split_engine(
    run: Run, engine: Sequence[RequestRecord], doc: dict[str, Any], clock: Clock
) -> EngineSplit:
    """The engine's requests by the level and round of the client request each was joined
    with (``doc``: :func:`join`'s), each round's window the client's moved onto the engine
    clock. An unmatched engine request that started (client clock) before a level's first
    round and after the previous level's last is that level's warm-up; others are counted
    as ``outside``."""
    at = {q["server_id"]: (q["concurrency"], q["round"]) for q in doc["requests"]}
    by_round: dict[tuple[int, int], list[RequestRecord]] = {}
    rest = []
    for s in engine:
        key = at.get(s.req_id)
        if key is None:
            rest.append(s.start_ns - clock.offset_ns)
        else:
            by_round.setdefault(key, []).append(s)
    levels, prev_end = [], -math.inf
    warm_total = 0
    for lv in run.levels:
        first = min((rd.start_ns for rd in lv.rounds), default=None)
        warm = sum(prev_end <= t < first for t in rest) if first is not None else 0
        warm_total += warm
        rounds = [
            Round(rd.index, rd.start_ns + clock.offset_ns, rd.end_ns + clock.offset_ns,
                  by_round.get((lv.concurrency, rd.index), []), errors={}, summary={})
            for rd in lv.rounds
        ]  # fmt: skip
        levels.append(Level(lv.concurrency, lv.rate, rounds, {}, {"requests": warm}))
        prev_end = max((rd.end_ns for rd in lv.rounds), default=prev_end)
    return EngineSplit(levels, len(rest) - warm_total)


def slowest(doc: dict[str, Any], k: int) -> list[tuple[int, list[dict[str, Any]]]]:
    """Per level of ``doc``: its ``k`` joined requests with the longest client E2E."""
    out = []
    for lv in doc["levels"]:
        rows = [q for q in doc["requests"]
                if q["concurrency"] == lv["concurrency"] and q["ttft_parts_ns"]]  # fmt: skip
        rows.sort(key=lambda q: -q["client_e2e_ns"])
        out.append((lv["concurrency"], rows[:k]))
    return out


def timeline(q: dict[str, Any]) -> list[tuple[str, int, int]]:
    """A joined request as ``(part, start, duration)`` ns from the client's send: the parts
    of client TTFT in order (send, engine phases, first-token delivery), then the rest of
    the stream to the client's last chunk; they end at client E2E."""
    out, t = [], 0
    parts = dict(q["ttft_parts_ns"])
    parts[AFTER_FIRST] = q["client_e2e_ns"] - q["client_ttft_ns"]
    for name, d in parts.items():
        out.append((name, t, d))
        t += d
    return out


def render_slowest(doc: dict[str, Any], k: int) -> str:
    """The ``k`` slowest requests of each level, each part of their timeline."""
    out = []
    for conc, rows in slowest(doc, k):
        if not rows:
            continue
        names: list[str] = []
        for q in rows:
            names += [n for n, _, _ in timeline(q) if n not in names]
        cells = []
        for q in rows:
            d = {n: v for n, _, v in timeline(q)}
            cells.append([q["id"], duration(q["client_e2e_ns"])]
                         + [duration(d.get(n)) for n in names])  # fmt: skip
        out.append(f"\nc={conc}: the {len(rows)} slowest requests by client E2E, by part")
        out.append(format_table(["request", "E2E", *names], cells))
    return "\n".join(out)


def render(doc: dict[str, Any], clock: Clock) -> str:
    """The decomposition table of each level, after the match counts and the clock."""
    by_time = sum(q["matched_by"] == "time" for q in doc["requests"])
    out = [
        f"matched {doc['matched']} requests ({by_time} by start time); unmatched: "
        f"{doc['unmatched_client']} client, {doc['unmatched_server']} engine "
        "(engine warm-up requests are never in the run file)",
        f"clock: {clock.how}, engine - client = {duration(clock.offset_ns)} "
        f"+- {duration(clock.uncertainty_ns)}",
    ]
    for lv in doc["levels"]:
        rows_ = [q for q in doc["requests"] if q["concurrency"] == lv["concurrency"]]
        ttft = [q["client_ttft_ns"] for q in rows_ if q["ttft_parts_ns"]]
        out.append(f"\nc={lv['concurrency']}: client TTFT of {len(ttft)} requests, by part")
        if not ttft:
            out.append("no request completed on both sides")
            continue
        rows = [
            [name, duration(p["p50_ns"]), duration(p["p99_ns"]),
             f"{p['share'] * 100:.1f}%"]
            for name, p in lv["parts"].items()
        ]  # fmt: skip
        p50, p99 = np.percentile(np.asarray(ttft, np.float64), [50, 99])
        rows.append(["client TTFT", duration(float(p50)), duration(float(p99)), "100.0%"])
        out.append(format_table(["part", "p50", "p99", "share"], rows))
    return "\n".join(out)
