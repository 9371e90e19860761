"""Engine metrics during a load run: scrape the server's Prometheus ``/metrics``, keep every
sample on the load generator's clock, and turn them into each level's ``engine`` entry.

Scraping (:class:`Scraper`). One task of its own, with its own HTTP session (no slot of the
request connection pool), reads the endpoint every ``period_s`` and keeps only the raw body
(zlib-compressed) and its time: the midpoint of the scrape's send and receipt on
``pytimings.now_ns``. Parsing, with ``prometheus_client``'s text parser, happens between
levels, never while requests are timed (it is pure Python: ~40 ms for a 73 KB exposition
of ~900 samples, the size of a vLLM server's, here; done in the request loop each second it
would delay every chunk stamp behind it). A scrape that fails (connect error, HTTP status,
no answer within one period, a body the parser rejects) is counted in ``failed_scrapes``,
never fatal. Each level also gets a scrape at its first measured request and one after its
last, so counter deltas cover exactly the measured rounds.

Names. :data:`CONCEPTS` maps the published names of vLLM (V1; the V0 names it kept too),
SGLang and TGI to concepts; a metric in no row is kept under its own name (with its labels
when it has any, e.g. ``foo{gpu="0"}``). A concept's label sets are summed, except for
fractions (``kv_cache_usage``, ``prefix_cache_hit_rate``), which are averaged. Types come
from the exposition's ``# TYPE``; an untyped sample whose name ends in ``_total`` is a
counter, any other a gauge. ``*_created`` samples (creation timestamps) are not metrics.

Series (``engine.series``, each ``[[t_ns, value], ...]``):

* gauges: the value read at each scrape;
* counters: the rate per second between consecutive scrapes, at the later one (a counter
  that went down was reset: its new value is the increase; one absent from the scrape
  before, as a labelled child before its first use, counted 0 then);
* histograms: per interval between consecutive scrapes, from the bucket increases, the
  ``_p50`` and ``_p99`` (linear within a bucket, as Prometheus' ``histogram_quantile``) and
  the ``_mean`` (sum increase over count increase), in the metric's unit (seconds for
  times); an interval with no observation has no point;
* ``prefix_cache_hit_rate`` from vLLM V1's counters: hits over queries per interval.

``engine.histograms``: each histogram over the whole level, ``{"count", "sum", "mean"}``
from the increases between its scrapes (``mean`` = sum / count, null with no observation),
the engine's own figure to hold a client's against (vLLM's TTFT and queue time).

``engine.counters``: each counter's increase over the level. ``engine.spec_decode``, when
the engine counted draft tokens during the level: ``draft_tokens``, ``accepted_tokens``,
``drafts`` (verify steps; null where the engine does not count them), ``acceptance_rate``
= accepted / draft tokens, ``mean_acceptance_length`` = 1 + accepted / drafts (tokens per
verify step, the bonus token included).
"""

from __future__ import annotations

import asyncio
import math
import re
import threading
import urllib.parse
import zlib
from collections.abc import Coroutine, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pytimings._core import now_ns
from pytimings.serving.scrape import ScrapeFailed, read_body

T = TypeVar("T")

# concept -> the names engines publish it under (counters without their _total suffix);
# an entry "name|label=value" takes only the samples with that label value
CONCEPTS: dict[str, tuple[str, ...]] = {
    "running": (
        "vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size",
    ),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"),
    # the engine's own batch limit (the toy engine's; the others publish none known here)
    "batch_limit": ("pytimings_toy:max_batch",),
    "kv_cache_usage": (
        "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
    ),
    "preemptions": ("vllm:num_preemptions", "sglang:num_retracted_requests"),
    "prefix_cache_hit_rate": ("vllm:gpu_prefix_cache_hit_rate", "sglang:cache_hit_rate"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits",),
    "prefix_cache_queries": ("vllm:prefix_cache_queries",),
    "spec_drafts": ("vllm:spec_decode_num_drafts",),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens",),
    "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens",),
    "prompt_tokens": ("vllm:prompt_tokens", "sglang:prompt_tokens"),
    "generation_tokens": ("vllm:generation_tokens", "sglang:generation_tokens"),
    "ttft": ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "queue_time": (
        "vllm:request_queue_time_seconds", "sglang:queue_time_seconds",
        "tgi_request_queue_duration",
    ),
    "prefill_time": (
        "vllm:request_prefill_time_seconds", "tgi_batch_inference_duration|method=prefill",
    ),
    "decode_time": (
        "vllm:request_decode_time_seconds", "tgi_batch_inference_duration|method=decode",
    ),
}  # fmt: skip
FRACTIONS = frozenset({"kv_cache_usage", "prefix_cache_hit_rate"})
QUANTILES = (("p50", 0.5), ("p99", 0.99))


def _by_name() -> dict[str, list[tuple[str, tuple[str, str] | None]]]:
    out: dict[str, list[tuple[str, tuple[str, str] | None]]] = {}
    for concept, names in CONCEPTS.items():
        for entry in names:
            name, _, cond = entry.partition("|")
            k, _, v = cond.partition("=")
            out.setdefault(name, []).append((concept, (k, v) if cond else None))
    return out


_NAMES = _by_name()


LabelSets = dict[str, float]  # a counter's value per label set ("name{labels}")
Histogram = tuple[dict[float, float], float, float]  # {upper bound: cumulative count}, sum, count


@dataclass
class Snapshot:
    """One parsed scrape: gauge values (label sets combined), counters and histograms per
    label set (so that one engine's reset is found on its own series, as Prometheus'
    ``increase()`` does); the samples left out: ``non_finite`` (NaN or infinite values) and
    ``over_cap`` (series of metrics outside CONCEPTS past MAX_OTHER_SERIES)."""

    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, LabelSets] = field(default_factory=dict)
    histograms: dict[str, dict[str, Histogram]] = field(default_factory=dict)
    non_finite: int = 0
    over_cap: int = 0


def _raw_key(name: str, labels: dict[str, str]) -> str:
    if not labels:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _targets(name: str, labels: dict[str, str]) -> list[str]:
    """The keys a sample lands under: its concepts, or its own name (and labels)."""
    hits = [c for c, cond in _NAMES.get(name, []) if cond is None or labels.get(cond[0]) == cond[1]]
    if name in _NAMES:
        return hits  # a known metric whose label selects no concept is dropped on purpose
    return [_raw_key(name, labels)]


# series (sample lines) of metrics outside CONCEPTS a scrape may add: past it, all of them
# are left out of that scrape (the concepts kept), counted in ``over_cap``. A vLLM server
# exposes ~900; a label per request or per adapter can make 100,000, which parsed and kept
# at every scrape made a 15 MB run file and 30 s of parsing per second of load
MAX_OTHER_SERIES = 5_000
# series of the concept table's metrics a scrape may hold (kept per label set): past it the
# scrape is a failed one (a label per request on a concept is no engine's exposition)
MAX_CONCEPT_SERIES = 20_000
_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")
_KNOWN_LINE = re.compile(
    r"^(?:# (?:TYPE|HELP) )?(?:"
    + "|".join(re.escape(n) for n in sorted(_NAMES, key=len, reverse=True))
    + r")(?:"
    + "|".join(_SUFFIXES)
    + r")?[ \t{].*$",
    re.MULTILINE,
)
_SAMPLE_LINE = re.compile(r"^[^#\s]", re.MULTILINE)


def _capped(text: str) -> tuple[str, int]:
    """``text``, or only its CONCEPTS lines when its other series pass MAX_OTHER_SERIES;
    and how many series were left out. Regular expressions over the whole text: the
    cap must cost far less than the parse it spares."""
    known = _KNOWN_LINE.findall(text)
    concept_series = sum(not line.startswith("#") for line in known)
    if concept_series > MAX_CONCEPT_SERIES:
        raise ValueError(f"{concept_series:,} series of the concept table's metrics")
    others = len(_SAMPLE_LINE.findall(text)) - concept_series
    if others <= MAX_OTHER_SERIES:
        return text, 0
    return "\n".join(known) + "\n", others


def parse_exposition(text: str) -> Snapshot:
    """A Prometheus text exposition as a :class:`Snapshot`; ValueError if it is not one."""
    from prometheus_client.parser import text_string_to_metric_families

    text, over_cap = _capped(text)
    snap = Snapshot(over_cap=over_cap)
    sums: dict[str, list[float]] = {}  # gauge key -> values over label sets
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_created"):
                continue
            value = float(s.value)
            if not math.isfinite(value):
                snap.non_finite += 1
                continue
            if fam.type == "histogram":
                labels = {k: v for k, v in s.labels.items() if k != "le"}
                for key in _targets(fam.name, labels):
                    per_set = snap.histograms.setdefault(key, {})
                    buckets, total, count = per_set.get(_raw_key(fam.name, labels), ({}, 0.0, 0.0))
                    if s.name.endswith("_bucket"):
                        buckets[float(s.labels["le"])] = value
                    elif s.name.endswith("_sum"):
                        total = value
                    elif s.name.endswith("_count"):
                        count = value
                    per_set[_raw_key(fam.name, labels)] = (buckets, total, count)
                continue
            counter = fam.type == "counter" or (fam.type == "unknown" and s.name.endswith("_total"))
            base = s.name[: -len("_total")] if counter and s.name.endswith("_total") else s.name
            if fam.type not in ("counter", "gauge", "unknown"):
                base = s.name  # summaries, info, ...: kept as values under their own names
            for key in _targets(base, dict(s.labels)):
                if counter:
                    snap.counters.setdefault(key, {})[_raw_key(base, dict(s.labels))] = value
                else:
                    sums.setdefault(key, []).append(value)
    for key, values in sums.items():
        snap.gauges[key] = sum(values) / len(values) if key in FRACTIONS else sum(values)
    return snap


def default_url(base_url: str) -> str:
    """The ``/metrics`` beside an OpenAI base URL: ``http://h:p/v1`` -> ``http://h:p/metrics``."""
    u = urllib.parse.urlsplit(base_url)
    return urllib.parse.urlunsplit((u.scheme, u.netloc, "/metrics", "", ""))


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """Quantile ``q`` of cumulative ``buckets`` (upper bound -> count), linear within a bucket
    and the lowest bucket starting at 0 (Prometheus' rule); NaN without observations; the
    highest finite bound when it falls in the +Inf bucket."""
    bounds = sorted(buckets)
    total = buckets[bounds[-1]] if bounds else 0.0
    if total <= 0:
        return math.nan
    rank = q * total
    lo_b, lo_c = 0.0, 0.0
    for b in bounds:
        c = buckets[b]
        if c >= rank:
            if math.isinf(b):
                return lo_b
            return lo_b + (b - lo_b) * ((rank - lo_c) / (c - lo_c) if c > lo_c else 1.0)
        lo_b, lo_c = b, c
    return lo_b


def _increase(prev: float, cur: float) -> float:
    return cur - prev if cur >= prev else cur  # a counter that went down was reset


def _counter_increase(prev: LabelSets, cur: LabelSets) -> float:
    """A counter's increase between two scrapes: summed over its label sets, each with its
    own reset detection (one engine of two restarting is not a negative increase of the
    sum); a label set new since the scrape before counted 0 then."""
    return sum(_increase(prev.get(labels, 0.0), v) for labels, v in cur.items())


def _histogram_increase(
    prev: dict[str, Histogram], cur: dict[str, Histogram]
) -> tuple[dict[float, float], float, float]:
    """A histogram's bucket, sum and count increases between two scrapes, summed over its
    label sets; a label set whose count went down was reset (its values are the increase)."""
    delta: dict[float, float] = {}
    dsum = dcount = 0.0
    for labels, (buckets, total, count) in cur.items():
        pb, ptotal, pcount = prev.get(labels, ({}, 0.0, 0.0))
        if count < pcount:
            pb, ptotal, pcount = {}, 0.0, 0.0
        dsum += total - ptotal
        dcount += count - pcount
        for b, c in buckets.items():
            delta[b] = delta.get(b, 0.0) + max(0.0, c - pb.get(b, 0.0))
    return delta, dsum, dcount


@dataclass
class _Sample:
    t_ns: int
    body: bytes | None  # zlib-compressed exposition; None: the scrape failed
    snap: Snapshot | None = None


class Scraper:
    """Reads a ``/metrics`` endpoint periodically (see the module doc). The reads run on an
    event loop in a thread of the scraper's own, with its own HTTP session: a body (up to
    :data:`~pytimings.serving.scrape.MAX_BODY_BYTES`) is read and compressed there, never on
    the loop that timestamps the requests' chunks (a 10 MB body read and compressed there
    held it ~30 ms per scrape)."""

    def __init__(self, url: str, period_s: float) -> None:
        self.url = url
        self.period_s = period_s
        self.samples: list[_Sample] = []
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None  # the thread's (from __aenter__)
        self._thread: threading.Thread | None = None
        self._session: Any = None

    async def __aenter__(self) -> Scraper:
        import aiohttp

        async def open_session() -> Any:
            return aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=max(self.period_s, 0.05)),
                connector=aiohttp.TCPConnector(limit=1),
            )

        loop = self._loop = asyncio.new_event_loop()
        thread = self._thread = threading.Thread(
            target=loop.run_forever, name="pytimings-engine-metrics", daemon=True
        )
        thread.start()
        self._session = await self._on_thread(open_session())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._loop is not None and self._thread is not None
        await self._on_thread(self._session.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        await asyncio.get_running_loop().run_in_executor(None, self._thread.join)
        self._loop.close()

    async def _on_thread(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the scraper's thread; await it from the caller's loop."""
        assert self._loop is not None, "a Scraper scrapes inside its async with"
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def scrape(self) -> _Sample:
        """One scrape, appended to ``samples`` (failed ones too, with no body) and returned."""
        return await self._on_thread(self._read())

    async def _read(self) -> _Sample:
        t0 = now_ns()
        body: bytes | None
        try:
            body = await read_body(self._session, self.url, compressed=True)
        except ScrapeFailed:
            body = None
        sample = _Sample((t0 + now_ns()) // 2, body)
        with self._lock:
            self.samples.append(sample)
        return sample

    async def run(self) -> None:
        """Scrape every period until cancelled (the period counted from the first scrape, so
        a slow one does not shift the rest)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        k = 0
        while True:
            k += 1
            await asyncio.sleep(max(0.0, start + k * self.period_s - loop.time()))
            await self.scrape()

    def _taken(self) -> list[_Sample]:
        with self._lock:
            return list(self.samples)

    def parse_pending(self) -> None:
        """Parse every scrape not parsed yet (between levels: never while requests run)."""
        for s in self._taken():
            if s.body is None or s.snap is not None:
                continue
            try:
                s.snap = parse_exposition(zlib.decompress(s.body).decode("utf-8", "replace"))
            except (ValueError, KeyError, IndexError):
                s.body = None  # not an exposition: a failed scrape
            else:
                s.body = b""  # parsed: drop the text

    def level_engine(self, start_ns: int, end_ns: int) -> dict[str, Any]:
        """The ``engine`` entry of a level measured in [start_ns, end_ns]."""
        self.parse_pending()
        inside = [s for s in self._taken() if start_ns <= s.t_ns <= end_ns]
        ok = [(s.t_ns, s.snap) for s in inside if s.snap is not None]
        return {
            "url": self.url,
            "scrapes": len(inside),
            "failed_scrapes": sum(s.snap is None for s in inside),
            **engine_series(ok),
        }


def engine_series(samples: Iterable[tuple[int, Snapshot]]) -> dict[str, Any]:
    """``series``, ``counters``, ``spec_decode`` and ``left_out`` of successful scrapes in
    time order (``left_out``: the samples they held that were not kept, by why). A counter's
    or histogram's label set is compared with its last scrape that had it (one whose value
    was left out, NaN, is skipped, not taken for a reset)."""
    pts = list(samples)
    series: dict[str, list[list[float]]] = {}

    def add(key: str, t: int, v: float) -> None:
        if math.isfinite(v):
            series.setdefault(key, []).append([t, v])

    counters: dict[str, float] = {}
    histograms: dict[str, dict[str, float]] = {}
    last_counters: dict[str, LabelSets] = {}
    last_histograms: dict[str, dict[str, Histogram]] = {}
    for i, (t, snap) in enumerate(pts):
        for key, v in snap.gauges.items():
            add(key, t, v)
        dt = (t - pts[i - 1][0]) / 1e9 if i else 0.0
        increases: dict[str, float] = {}
        for key, sets in snap.counters.items():
            # a label set in no scrape before was not created yet (a labelled child appears
            # at its first use): it counted 0 then
            known = last_counters.setdefault(key, {})
            if i and dt > 0:
                increases[key] = _counter_increase(known, sets)
                counters[key] = counters.get(key, 0.0) + increases[key]
                add(key, t, increases[key] / dt)
            known.update(sets)
        for key, per_set in snap.histograms.items():
            known_h = last_histograms.setdefault(key, {})
            delta, dsum, dcount = _histogram_increase(known_h, per_set)
            known_h.update(per_set)
            if not i or dcount <= 0:
                continue
            total = histograms.setdefault(key, {"count": 0.0, "sum": 0.0})
            total["count"] += dcount
            total["sum"] += dsum
            for qname, qv in QUANTILES:
                add(f"{key}_{qname}", t, histogram_quantile(qv, delta))
            add(f"{key}_mean", t, dsum / dcount)
        dq = increases.get("prefix_cache_queries", 0.0)
        if "prefix_cache_hits" in increases and dq > 0:
            add("prefix_cache_hit_rate", t, increases["prefix_cache_hits"] / dq)
    overflowed = [key for key, v in counters.items() if not math.isfinite(v)]  # past 1.8e308
    for key in overflowed:
        del counters[key]
    left_out = {
        "non_finite": sum(snap.non_finite for _, snap in pts) + len(overflowed),
        "over_cap": sum(snap.over_cap for _, snap in pts),
    }
    return {
        "series": series,
        "counters": counters,
        "histograms": _with_means(histograms),
        "spec_decode": spec_decode(counters),
        "left_out": left_out,
    }


def _with_means(histograms: dict[str, dict[str, float]]) -> dict[str, dict[str, Any]]:
    return {
        key: {**h, "mean": h["sum"] / h["count"] if h["count"] > 0 else None}
        for key, h in histograms.items()
    }


def spec_decode(counters: dict[str, float]) -> dict[str, Any] | None:
    """Speculative decoding over a level from its counter increases (None: no drafts)."""
    drafted = counters.get("spec_draft_tokens")
    accepted = counters.get("spec_accepted_tokens")
    if not drafted or accepted is None:
        return None
    drafts = counters.get("spec_drafts")
    return {
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        "drafts": drafts,
        "acceptance_rate": accepted / drafted,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
    }


async def probe(session_url: str, period_s: float) -> bool:
    """Whether ``session_url`` answers with a Prometheus exposition holding a metric."""
    async with Scraper(session_url, max(period_s, 2.0)) as s:
        await s.scrape()
        s.parse_pending()
        snap = s.samples[0].snap
    return snap is not None and bool(snap.gauges or snap.counters or snap.histograms)


def merge_engines(parts: Iterable[dict[str, Any] | None]) -> dict[str, Any] | None:
    """One ``engine`` entry for a level pooled from several runs (None unless every part
    has one): scrapes and counter increases summed, series joined in time order,
    ``spec_decode`` from the summed counters."""
    ps = list(parts)
    if not ps or any(p is None for p in ps):
        return None
    engines = [p for p in ps if p is not None]
    series: dict[str, list[list[float]]] = {}
    counters: dict[str, float] = {}
    histograms: dict[str, dict[str, float]] = {}
    left_out: dict[str, int] = {}
    for e in engines:
        for k, pts in e["series"].items():
            series.setdefault(k, []).extend(pts)
        for k, v in e.get("counters", {}).items():
            counters[k] = counters.get(k, 0.0) + v
        for k, h in e.get("histograms", {}).items():  # files before 2026-12 have none
            total = histograms.setdefault(k, {"count": 0.0, "sum": 0.0})
            total["count"] += h["count"]
            total["sum"] += h["sum"]
        for why, n in e.get("left_out", {}).items():  # files before 2026-12 have none
            left_out[why] = left_out.get(why, 0) + n
    return {
        "url": ",".join(dict.fromkeys(e["url"] for e in engines)),
        "scrapes": sum(e["scrapes"] for e in engines),
        "failed_scrapes": sum(e["failed_scrapes"] for e in engines),
        "series": {k: sorted(v) for k, v in series.items()},
        "counters": counters,
        "histograms": _with_means(histograms),
        "spec_decode": spec_decode(counters),
        "left_out": left_out,
    }
