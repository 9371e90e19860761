"""What ``pytimings loadgen`` sends, and when: request traces, prompt datasets, arrivals.

Traces (``--trace FILE``): one request per row, its arrival time and its input and output
lengths in tokens, replayed in order (each request sent at its arrival time after the
first one's, divided by ``--trace-speed``; input as ``input_len`` prompt words, output as
``max_tokens``). Formats read, told apart by the file's first row:

* plain JSONL: ``{"timestamp": seconds, "input_len": int, "output_len": int}`` per line
  (any origin: only the differences are replayed);
* Mooncake (kvcache-ai/Mooncake ``traces/*.jsonl``): ``{"timestamp": milliseconds,
  "input_length": int, "output_length": int, "hash_ids": [...]}`` per line;
* Azure LLM inference trace (Azure/AzurePublicDataset ``AzureLLMInferenceTrace_*.csv``):
  CSV with the header ``TIMESTAMP,ContextTokens,GeneratedTokens``, timestamps as
  ``2023-11-16 18:15:46.6805900`` (read to the 100 ns they carry).

Rows must be in time order; a bad row stops the run with its file and line named.

Datasets (``--dataset FILE``): prompts, a JSON list or JSONL of conversations. Each entry's
first user turn is its prompt: ShareGPT's ``{"conversations": [{"from": "human", "value":
...}, ...]}``, OpenAI-style ``{"messages": [{"role": "user", "content": ...}]}``, or a plain
``{"prompt": ...}``. Entries without one (ShareGPT has conversations that start with the
model's turn, or are empty) are skipped and counted in the run file. Prompts are sent in a
seeded shuffled order, cycled when more requests are sent than the file has.

Arrivals (``--rate R``; with ``--rates a,b,c`` one level per rate): ``poisson``
(exponential gaps of mean 1/R), ``constant`` (every 1/R s) or ``gamma`` (gamma gaps of mean
1/R and shape ``--burstiness`` B: B < 1 burstier than Poisson, B = 1 Poisson, B > 1 more
regular, as ``vllm bench serve --burstiness``). ``--ramp T`` raises the rate linearly from
0 to R over the first T seconds of each round (a soak's: of its level): the process runs on
a warped clock whose arrival count by time t is R t^2 / (2T) until T, then R per second.
"""

from __future__ import annotations

import calendar
import csv
import json
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pytimings.errors import UsageError

ARRIVALS = ("poisson", "constant", "gamma")
TRACE_FORMATS = ("jsonl", "mooncake", "azure_csv")


@dataclass(frozen=True)
class Trace:
    path: str
    format: str  # one of TRACE_FORMATS
    arrival_s: tuple[float, ...]  # from the first request's arrival, in trace seconds
    input_len: tuple[int, ...]
    output_len: tuple[int, ...]

    def to_json(self, speed: float) -> dict[str, Any]:
        return {
            "path": os.path.abspath(self.path), "format": self.format,
            "requests": len(self.arrival_s), "span_s": self.arrival_s[-1], "speed": speed,
            "input_tokens": sum(self.input_len), "output_tokens": sum(self.output_len),
        }  # fmt: skip


def _length(value: Any, where: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise UsageError(f"{where}: {name} is not a token count: {value!r:.40}")
    if not 1 <= int(value) < 2**31:
        raise UsageError(f"{where}: {name} {int(value)} is out of range (1 .. 2**31-1)")
    return int(value)


def _azure_time(text: str, where: str) -> float:
    """``2023-11-16 18:15:46.6805900`` as seconds (UTC; only differences matter)."""
    whole, _, frac = text.strip().partition(".")
    try:
        stamp = calendar.timegm(time.strptime(whole, "%Y-%m-%d %H:%M:%S"))
        return stamp + (float("0." + frac) if frac else 0.0)
    except ValueError:
        raise UsageError(
            f"{where}: TIMESTAMP {text!r:.40} is not YYYY-MM-DD HH:MM:SS[.f]"
        ) from None


def _rows(path: str) -> Iterator[tuple[str, float, int, int]]:
    """(format, time in seconds, input, output) of each row."""
    with open(path, encoding="utf-8", newline="") as f:
        first = f.readline()
        f.seek(0)
        if not first:
            return  # an empty file
        if first.lstrip().startswith("{"):
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"--trace {path}:{n}"
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{where}: not JSON ({exc.msg})") from None
                if not isinstance(row, dict):
                    raise UsageError(f"{where}: not a JSON object")
                fmt, scale = ("mooncake", 1e-3) if "input_length" in row else ("jsonl", 1.0)
                keys = ("input_length", "output_length") if fmt == "mooncake" else (
                    "input_len", "output_len")  # fmt: skip
                missing = [k for k in ("timestamp", *keys) if k not in row]
                if missing:
                    raise UsageError(f"{where}: no {', '.join(missing)} (see loadgen --help)")
                stamp = row["timestamp"]
                if isinstance(stamp, bool) or not isinstance(stamp, int | float):
                    raise UsageError(f"{where}: timestamp is not a number: {stamp!r:.40}")
                yield (fmt, float(stamp) * scale, _length(row[keys[0]], where, keys[0]),
                       _length(row[keys[1]], where, keys[1]))  # fmt: skip
            return
        reader = csv.reader(f)
        header = [h.strip() for h in next(reader, [])]
        want = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
        if header[:3] != want:
            raise UsageError(
                f"--trace {path}: neither JSONL nor the Azure CSV layout (header "
                f"{','.join(want)}); got {','.join(header)[:80]!r}"
            )
        for n, row in enumerate(reader, 2):
            if not row:
                continue
            where = f"--trace {path}:{n}"
            if len(row) < 3:
                raise UsageError(f"{where}: expected 3 columns, got {len(row)}")
            try:
                lengths = int(row[1]), int(row[2])
            except ValueError:
                raise UsageError(f"{where}: token counts {row[1]!r}, {row[2]!r}") from None
            yield ("azure_csv", _azure_time(row[0], where),
                   _length(lengths[0], where, "ContextTokens"),
                   _length(lengths[1], where, "GeneratedTokens"))  # fmt: skip


def read_trace(path: str) -> Trace:
    """The trace in ``path`` (formats in the module docstring)."""
    try:
        rows = list(_rows(path))
    except OSError as exc:
        raise UsageError(f"--trace {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--trace {path}: not UTF-8 text") from None
    if not rows:
        raise UsageError(f"--trace {path}: no requests")
    formats = {r[0] for r in rows}
    if len(formats) > 1:
        raise UsageError(f"--trace {path}: rows of several layouts ({', '.join(sorted(formats))})")
    times = np.array([r[1] for r in rows])
    if not np.isfinite(times).all():
        raise UsageError(f"--trace {path}: a timestamp is not finite")
    back = np.flatnonzero(np.diff(times) < 0)
    if back.size:
        raise UsageError(f"--trace {path}: row {back[0] + 2} goes back in time (rows must be in "
                         "time order)")  # fmt: skip
    return Trace(
        path, rows[0][0], tuple(float(t) for t in times - times[0]),
        tuple(r[2] for r in rows), tuple(r[3] for r in rows),
    )  # fmt: skip


def _first_user_turn(entry: Any) -> str | None:
    if not isinstance(entry, dict):
        return None
    if isinstance(entry.get("prompt"), str):
        return str(entry["prompt"])
    for key, who, what in (("conversations", "from", "value"), ("messages", "role", "content")):
        turns = entry.get(key)
        if isinstance(turns, list) and turns and isinstance(turns[0], dict):
            if turns[0].get(who) in ("human", "user") and isinstance(turns[0].get(what), str):
                return str(turns[0][what])
            return None
    return None


@dataclass(frozen=True)
class Dataset:
    path: str
    prompts: tuple[str, ...]
    skipped: int  # entries without a first user turn

    def to_json(self) -> dict[str, Any]:
        return {"path": os.path.abspath(self.path), "prompts": len(self.prompts),
                "skipped": self.skipped}  # fmt: skip


def read_dataset(path: str) -> Dataset:
    """The prompts of ``path`` (formats in the module docstring)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise UsageError(f"--dataset {path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--dataset {path}: not UTF-8 text") from None
    entries: list[Any]
    if text.lstrip().startswith("["):
        try:
            entries = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--dataset {path}: not JSON ({exc.msg}, line {exc.lineno})") from None
    else:
        entries = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise UsageError(f"--dataset {path}:{n}: not JSON ({exc.msg})") from None
    prompts = [p for p in map(_first_user_turn, entries) if p]
    if not prompts:
        raise UsageError(
            f"--dataset {path}: none of its {len(entries)} entries has a first user turn "
            "(ShareGPT conversations, messages or prompt)"
        )
    return Dataset(path, tuple(prompts), len(entries) - len(prompts))


def arrivals(
    process: str, rate: float, burstiness: float, ramp_s: float, rng: np.random.Generator
) -> Iterator[float]:
    """Due times in seconds from the level's start, the first at 0 (module docstring)."""
    due = 0.0
    while True:
        yield due if ramp_s <= 0 else _ramped(due, ramp_s)
        if process == "constant":
            due += 1.0 / rate
        elif process == "gamma":
            due += float(rng.gamma(burstiness, 1.0 / (rate * burstiness)))
        else:
            due += float(rng.exponential(1.0 / rate))


def _ramped(steady_s: float, ramp_s: float) -> float:
    """The time by which a ramp reaches the arrival count R * steady_s: R t^2 / (2T) = R u
    gives t = sqrt(2 T u) while u < T/2, then t = u + T/2 (R cancels)."""
    if steady_s < ramp_s / 2:
        return math.sqrt(2.0 * ramp_s * steady_s)
    return steady_s + ramp_s / 2
