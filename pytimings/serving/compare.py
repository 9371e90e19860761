"""``pytimings compare``: A/B comparison of load-generator runs, with bootstrap intervals.

The first file is the baseline; every other file is compared with it at each concurrency
level both ran. Metrics: output token throughput, TTFT mean and p99, TPOT mean, ITL p99
and E2E mean (under the ``--definition`` of :mod:`pytimings.serving.metrics`). For each,
the relative change ``(B - A) / A`` with a 95% bootstrap confidence interval and a
verdict: "better" or "worse" when the interval excludes zero (direction-aware: lower
latency is better, higher throughput is better), "within noise" when it does not.

Resampling unit: a two-stage (hierarchical) bootstrap that follows how the data were
produced. Each replicate draws the run's rounds with replacement, then, within each drawn
round, that round's requests with replacement. A request is the unit, never a single
token gap: all of a request's ITL gaps move together (they share a sequence and a batch),
so pooled-gap percentiles are computed with per-request weights. Resampling rounds carries
between-round drift (warm caches, clocks, neighbours) into the interval; resampling
requests carries within-round spread. Throughput of a replicate is the resampled requests'
tokens over the drawn rounds' durations, so with a single round its interval reflects only
the token counts: throughput gets no verdict then ("n/a (too few rounds)"). A and B are
resampled independently; the interval is the 2.5-97.5 percentile of the replicate changes
(percentile bootstrap, ``--resamples`` replicates, seeded by ``--seed``). Intervals of a
p99 need data: with fewer than ~100 requests (or gaps) per run, the p99 is one of the
largest few values and its interval is rough; run more requests before trusting its
verdict.

Pooling. A label may name several run files (repeated or alternated runs, A B A B: the
honest way on a shared machine): ``compare a1.json,a2.json b1.json,b2.json --labels a,b``
or ``--run a=a1.json --run b=b1.json --run a=a2.json ...``. Their rounds are pooled per
concurrency level, each file's rounds staying rounds, so the bootstrap's first stage
draws across files and between-run noise lands in the interval. Files pooled under one
label must agree on model, api, input/output length, rate and ignore_eos.

Concurrency sweep: per run, throughput and latency per token (TPOT mean) at each level,
scaling efficiency ``thr(c) / (thr(c0) * c / c0)`` against the lowest level c0, and the
knee: the lowest level whose TPOT mean exceeds the lowest level's by more than
``--knee-pct`` percent (default 10) -- where adding concurrency starts to cost every user
latency per token. With ``--gpu-price USD_PER_GPU_HOUR [--gpus N]``, each level and the
whole run also get ``cost_per_mtok_usd`` (:mod:`pytimings.serving.cost`).

Soak runs (``loadgen --duration``): each file's levels get a drift verdict per figure over
their intervals (:mod:`pytimings.serving.trend`), in ``drift`` and the text; each
``--memory ENGINE.pyt`` recording's memory samples get one in ``memory_drift``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from pytimings.console import options
from pytimings.console.text import duration_ms
from pytimings.errors import UsageError, install_hint
from pytimings.fileout import figure_format, save_figure
from pytimings.ingest.recording_file import load_memory
from pytimings.model.samples import MemorySamples
from pytimings.serving import cost, energy
from pytimings.serving._format import fmt_num, format_table
from pytimings.serving.cost import cost_per_mtok_usd
from pytimings.serving.engine import merge_engines
from pytimings.serving.findings import (
    Finding,
    missing_evidence,
    run_findings,
    saturation,
    speculative_ab,
)
from pytimings.serving.findings import render as render_findings
from pytimings.serving.foreign import load_any
from pytimings.serving.metrics import DEFINITIONS, measured, serving_metrics
from pytimings.serving.runfile import Level, Run, write_json
from pytimings.serving.saturation import RULE as SATURATION_RULE
from pytimings.serving.saturation import past_saturation
from pytimings.serving.trend import MEMORY_HEAD, drift_table, memory_drift, run_drift
from pytimings.stats import too_few, two_stage_weights
from pytimings.stats import verdict as change_verdict

F64 = npt.NDArray[np.float64]

# metric -> (higher is better?, unit)
METRICS: dict[str, tuple[bool, str]] = {
    "throughput": (True, "tok/s"),
    "ttft_mean": (False, "ms"),
    "ttft_p99": (False, "ms"),
    "tpot_mean": (False, "ms"),
    "itl_p99": (False, "ms"),
    "e2el_mean": (False, "ms"),
}


def weighted_percentile(
    values: F64, weights: npt.NDArray[np.int64], q: float, order: npt.NDArray[np.intp] | None = None
) -> float:
    """``np.percentile(np.repeat(values, weights), q)`` (linear) without the repeat.

    ``order``: ``np.argsort(values)`` when the caller already has it.
    """
    if order is None:
        order = np.argsort(values, kind="stable")
    v, cum = values[order], np.cumsum(weights[order])
    total = int(cum[-1]) if cum.size else 0
    if total == 0:
        return float("nan")
    pos = q / 100.0 * (total - 1)
    lo = math.floor(pos)
    frac = pos - lo
    i_lo = int(np.searchsorted(cum, lo, side="right"))
    i_hi = int(np.searchsorted(cum, min(lo + 1, total - 1), side="right"))
    return float(v[i_lo] + frac * (v[i_hi] - v[i_lo]))


@dataclass
class _LevelData:
    """One run's level, flattened per request for weighted resampling."""

    round_of: npt.NDArray[np.int64]  # request -> round index
    durations_s: F64  # per round, under the definition
    tokens: F64  # output tokens per request
    ttft: F64  # ms per request
    tpot: F64  # ms per request (NaN: one-token output)
    e2el: F64
    itl: F64  # ms: per gap (vllm) or per request (genai-perf, llmperf)
    itl_owner: npt.NDArray[np.int64]  # request that each itl value belongs to
    n_rounds: int

    def __post_init__(self) -> None:
        self._ttft_order = np.argsort(self.ttft, kind="stable")
        self._itl_order = np.argsort(self.itl, kind="stable")
        self._members = [np.flatnonzero(self.round_of == r) for r in range(self.n_rounds)]

    def stats(self, w: npt.NDArray[np.int64], round_w: npt.NDArray[np.int64]) -> dict[str, float]:
        """Every compared metric with request weights ``w`` and round weights ``round_w``."""
        has_tpot = ~np.isnan(self.tpot)
        wt = w[has_tpot]
        dur = float(np.dot(round_w, self.durations_s))
        return {
            "throughput": float(np.dot(w, self.tokens)) / dur if dur > 0 else float("nan"),
            "ttft_mean": float(np.dot(w, self.ttft) / w.sum()),
            "ttft_p99": weighted_percentile(self.ttft, w, 99, self._ttft_order),
            "tpot_mean": float(np.dot(wt, self.tpot[has_tpot]) / wt.sum())
            if wt.sum()
            else math.nan,
            "itl_p99": weighted_percentile(self.itl, w[self.itl_owner], 99, self._itl_order),
            "e2el_mean": float(np.dot(w, self.e2el) / w.sum()),
        }

    def point(self) -> dict[str, float]:
        return self.stats(np.ones(len(self.ttft), np.int64), np.ones(self.n_rounds, np.int64))

    def replicate(self, rng: np.random.Generator) -> dict[str, float]:
        return self.stats(*two_stage_weights(self._members, len(self.ttft), rng))


def level_data(level: Level, definition: str, where: str = "") -> _LevelData:
    round_of: list[int] = []
    durations: list[float] = []
    per_req = []
    itl: list[F64] = []
    owner: list[npt.NDArray[np.int64]] = []
    n = 0
    for ri, rd in enumerate(level.rounds):
        m = serving_metrics(rd.records, definition, windows=[(rd.start_ns, rd.end_ns)])
        durations.append(m.duration_s)
        t = m.per_request
        round_of += [ri] * len(t)
        per_req.append(t)
        if definition == "vllm":
            for j, r in enumerate(measured(rd.records)):  # the rows of per_request, in order
                gaps = np.diff(np.asarray(r.chunk_ns, np.int64)).astype(np.float64) / 1e6
                itl.append(gaps)
                owner.append(np.full(gaps.size, n + j, np.int64))
        else:
            vals = np.asarray(t["itl_ns"], np.float64) / 1e6
            keep = ~np.isnan(vals)
            itl.append(vals[keep])
            owner.append(n + np.flatnonzero(keep))
        n += len(t)
    if n == 0:
        raise UsageError(
            f"{where}: concurrency {level.concurrency} has no successful request to compare"
        )

    def col(name: str, scale: float = 1e6) -> F64:
        return np.concatenate([np.asarray(t[name], np.float64) / scale for t in per_req])

    return _LevelData(
        round_of=np.asarray(round_of, np.int64),
        durations_s=np.asarray(durations, np.float64),
        tokens=col("output_tokens", 1.0),
        ttft=col("ttft_ns"),
        tpot=col("tpot_ns"),
        e2el=col("e2el_ns"),
        itl=np.concatenate(itl) if itl else np.empty(0),
        itl_owner=np.concatenate(owner) if owner else np.empty(0, np.int64),
        n_rounds=len(level.rounds),
    )


class Resampled(Protocol):
    """What compare_levels resamples: _LevelData, or energy.EnergyData (per round)."""

    @property
    def n_rounds(self) -> int: ...

    def point(self) -> dict[str, float]: ...

    def replicate(self, rng: np.random.Generator) -> dict[str, float]: ...


def compare_levels(
    a: Resampled,
    b: Resampled,
    resamples: int,
    rng: np.random.Generator,
    metrics: dict[str, tuple[bool, str]] = METRICS,
    per_round: Sequence[str] = ("throughput",),  # figures of whole rounds: one round, no verdict
) -> list[dict[str, Any]]:
    pa_, pb_ = a.point(), b.point()
    reps = np.empty((resamples, len(metrics)))
    for i in range(resamples):
        ra, rb = a.replicate(rng), b.replicate(rng)
        reps[i] = [(rb[k] - ra[k]) / ra[k] if ra[k] else math.nan for k in metrics]
    out = []
    for j, (name, (higher_better, unit)) in enumerate(metrics.items()):
        change = (pb_[name] - pa_[name]) / pa_[name] if pa_[name] else math.nan
        col = reps[:, j][~np.isnan(reps[:, j])]
        lo, hi = np.percentile(col, [2.5, 97.5]) if col.size else (math.nan, math.nan)
        if name in per_round and min(a.n_rounds, b.n_rounds) < 2:
            verdict = too_few("rounds")
        else:
            verdict = change_verdict(lo, hi, higher_better)
        out.append({
            "metric": name, "unit": unit, "higher_is_better": higher_better,
            "a": pa_[name], "b": pb_[name], "rel_change": change,
            "ci95": [float(lo), float(hi)], "verdict": verdict,
        })  # fmt: skip
    return out


# what runs pooled under one label must share
POOL_KEYS = ("model", "api", "input_len", "output_len", "rate", "ignore_eos")  # and workload()


def workload(config: dict[str, Any]) -> dict[str, Any]:
    """What a run sent, and when, from its config: lengths, rate and loadgen's ``workload``
    (a trace's or dataset's counts, not their paths; not the percentiles it saved). Runs
    written before ``workload`` existed sent synthetic prompts at the rate given."""
    work = dict(config.get("workload") or {"source": "synthetic"})
    for key in ("trace", "dataset"):
        if isinstance(work.get(key), dict):
            work[key] = {k: v for k, v in work[key].items() if k != "path"}
    work.pop("percentiles", None)
    return {"input_len": config.get("input_len"), "output_len": config.get("output_len"),
            "rate": config.get("rate"), **work}  # fmt: skip


def workload_differences(a: Run, b: Run) -> list[str]:
    """The workload fields in which two runs differ (see :func:`workload`)."""
    wa, wb = workload(a.config), workload(b.config)
    return [k for k in dict.fromkeys([*wa, *wb]) if wa.get(k) != wb.get(k)]


def pool_runs(runs: Sequence[Run]) -> Run:
    """One run holding every round of ``runs`` per concurrency level (see Pooling)."""
    first = runs[0]
    if len(runs) == 1:
        return first
    for r in runs[1:]:
        diff = [k for k in POOL_KEYS if r.config.get(k) != first.config.get(k)]
        diff += [f"workload {k}" for k in workload_differences(r, first) if k not in POOL_KEYS]
        if diff:
            raise UsageError(f"{r.path}: cannot pool with {first.path}: {', '.join(diff)} differ")
    concs = list(dict.fromkeys(lv.concurrency for r in runs for lv in r.levels))
    levels = []
    for c in concs:
        parts = [lv for r in runs if (lv := r.level(c)) is not None]
        warm = sum(int(lv.warmup.get("requests", 0)) for lv in parts)
        rounds = [rd for lv in parts for rd in lv.rounds]
        engine = merge_engines(lv.engine for lv in parts)
        levels.append(
            Level(c, parts[0].rate, rounds, summary={}, warmup={"requests": warm}, engine=engine)
        )
    return Run("+".join(r.path for r in runs), first.config, levels, first.host)


def sweep(
    run: Run, definition: str, knee_pct: float, price: tuple[float, int] | None = None
) -> dict[str, Any]:
    """Throughput-latency curve over the run's concurrency levels, with the knee; with
    ``price`` (USD per GPU hour, GPUs), the cost per million output tokens of each level
    and of the whole run (all levels' tokens over all their benchmark time)."""
    rows = []
    tokens = seconds = 0.0
    for lv in sorted(run.levels, key=lambda x: x.concurrency):
        if not any(measured(rd.records) for rd in lv.rounds):
            continue  # nothing succeeded at this level: shown in the errors table instead
        d = level_data(lv, definition, run.path)
        pt = d.point()
        tokens += float(d.tokens.sum())
        seconds += float(d.durations_s.sum())
        rows.append({"concurrency": lv.concurrency, **pt, "ttft_p50": float(np.median(d.ttft))})
        if price is not None:
            rows[-1]["cost_per_mtok_usd"] = cost_per_mtok_usd(pt["throughput"], *price)
        if (figures := energy.level_energy(lv)) is not None:  # loadgen --telemetry
            rows[-1].update(figures)
    knee = None
    for prev, cur in zip([None, *rows], rows, strict=False):
        cur["past_saturation"] = prev is not None and past_saturation(prev, cur)
    if rows:
        c0, thr0, tpot0 = rows[0]["concurrency"], rows[0]["throughput"], rows[0]["tpot_mean"]
        for r in rows:
            r["efficiency"] = r["throughput"] / (thr0 * r["concurrency"] / c0) if thr0 else math.nan
        for r in rows[1:]:
            if r["tpot_mean"] > tpot0 * (1 + knee_pct / 100):
                knee = r["concurrency"]
                break
    rule = f"TPOT mean > lowest level's +{knee_pct:g}%"
    out: dict[str, Any] = {"levels": rows, "knee": knee, "knee_rule": rule,
                           "saturation_rule": SATURATION_RULE}  # fmt: skip
    if price is not None:
        out["gpu_price"] = {"usd_per_gpu_hour": price[0], "gpus": price[1]}
        out["cost_per_mtok_usd"] = cost_per_mtok_usd(
            tokens / seconds if seconds > 0 else math.nan, *price
        )
    return out


# --- command line -------------------------------------------------------------------------


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "files",
        nargs="*",
        help="loadgen run files, one group per label (a1.json,a2.json pools files); "
        "the first is the baseline",
    )
    options.add_labels(p)
    p.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="LABEL=FILE",
        help="a run file under a label (repeat; files of one label are pooled; the first "
        "label is the baseline); instead of positional files",
    )
    p.add_argument(
        "--definition", default="vllm", help=f"metric definitions: {', '.join(DEFINITIONS)}"
    )
    p.add_argument("--resamples", type=int, default=1000, help="bootstrap replicates")
    options.add_seed(p, "the bootstrap's")
    options.add_knee_pct(p)
    options.add_json(p, "the comparison")
    options.add_plot(p, "the curves and CDFs")
    p.add_argument(
        "--memory",
        action="append",
        default=[],
        metavar="ENGINE.pyt",
        help="an engine recording whose pytimings.sample_memory() samples get the drift "
        "verdict (repeat for several)",
    )
    cost.add_arguments(p)


def _groups(args: argparse.Namespace) -> dict[str, list[str]]:
    """label -> its run files, the baseline first, from positional groups or --run."""
    if args.run and args.files:
        raise UsageError("give run files either as positional groups or with --run, not both")
    groups: dict[str, list[str]] = {}
    if args.run:
        if args.labels is not None:
            raise UsageError("--labels is for positional files; --run names its own labels")
        for item in args.run:
            label, sep, path = item.partition("=")
            if not sep or not label.strip() or not path:
                raise UsageError(f"--run {item!r}: expected LABEL=FILE")
            groups.setdefault(label.strip(), []).append(path)
    else:
        files = [[f for f in g.split(",") if f] for g in args.files]
        if any(not g for g in files):
            raise UsageError(f"empty file group in {args.files}")
        if args.labels is None:
            labels = _distinct([",".join(g) for g in files])
        else:
            labels = [x.strip() for x in args.labels.split(",")]
            if len(labels) != len(files) or not all(labels):
                raise UsageError(f"--labels {args.labels!r}: need {len(files)} non-empty names")
        if len(set(labels)) != len(labels):
            raise UsageError(f"labels must be distinct, got {labels}")
        groups = dict(zip(labels, files, strict=True))
    if len(groups) < 2:
        raise UsageError("compare needs at least two labelled runs (the first is the baseline)")
    return groups


def _distinct(labels: list[str]) -> list[str]:
    """Default labels (the file groups) made distinct: a group given again is ``NAME#2``,
    ``NAME#3``, ... (``compare run.json run.json``, an A/A check); stderr says so."""
    seen: dict[str, int] = {}
    out = []
    for x in labels:
        seen[x] = seen.get(x, 0) + 1
        out.append(x if seen[x] == 1 else f"{x}#{seen[x]}")
    if out != labels:
        print(
            f"pytimings compare: the same files given more than once; labelled "
            f"{', '.join(out)} (--labels names them)",
            file=sys.stderr,
        )
    return out


def run(args: argparse.Namespace) -> int:
    if args.definition not in DEFINITIONS:
        raise UsageError(
            f"--definition {args.definition!r}: expected one of {', '.join(DEFINITIONS)}"
        )
    if args.resamples < 100:
        raise UsageError(f"--resamples must be >= 100, got {args.resamples}")
    groups = _groups(args)
    labels = list(groups)
    price = cost.price_from_args(args)
    plot = _plotter() if args.plot else None  # fail before the work if matplotlib is missing
    if args.plot:
        figure_format(args.plot, "--plot")
    loaded = {label: [load_any(f) for f in files] for label, files in groups.items()}
    memory = [(f, _memory_samples(f)) for f in args.memory]
    runs = [pool_runs(rs) for rs in loaded.values()]
    rng = np.random.default_rng(args.seed)
    comparisons = []
    base = runs[0]
    differs = {}
    for label, other in zip(labels[1:], runs[1:], strict=True):
        if diff := workload_differences(base, other):
            differs[label] = diff
            print(f"pytimings compare: {label} sent another workload than {labels[0]} "
                  f"({', '.join(diff)} differ): its changes are not the server's alone",
                  file=sys.stderr)  # fmt: skip
        common = sorted(
            {lv.concurrency for lv in base.levels} & {lv.concurrency for lv in other.levels}
        )
        if not common:
            raise UsageError(f"{other.path}: no concurrency level in common with {base.path}")
        for c in common:
            la, lb = base.level(c), other.level(c)
            assert la is not None and lb is not None
            for row in compare_levels(
                level_data(la, args.definition, base.path),
                level_data(lb, args.definition, other.path),
                args.resamples,
                rng,
            ):
                comparisons.append({"label": label, "baseline": labels[0], "concurrency": c, **row})
            ea, eb = energy.energy_data(la), energy.energy_data(lb)  # loadgen --telemetry runs
            if ea is not None and eb is not None:
                em = energy.ENERGY_METRICS
                for row in compare_levels(ea, eb, args.resamples, rng, em, tuple(em)):
                    comparisons.append(
                        {"label": label, "baseline": labels[0], "concurrency": c, **row}
                    )
    sweeps = {
        label: sweep(r, args.definition, args.knee_pct, price)
        for label, r in zip(labels, runs, strict=True)
    }
    errors = {
        label: {
            str(lv.concurrency): serving_metrics([q for rd in lv.rounds for q in rd.records]).errors
            for lv in r.levels
        }
        for label, r in zip(labels, runs, strict=True)
    }
    findings = serving_findings(labels, runs, sweeps, args.definition)
    doc = {
        "definition": args.definition,
        "resamples": args.resamples,
        "seed": args.seed,
        "resampling_unit": "rounds, then requests within each drawn round (two-stage bootstrap)",
        "inputs": groups,  # label -> the run files pooled under it
        # soak runs: a trend test per figure, per file (pooling would mix their timelines)
        "drift": [d for label, rs in loaded.items() for r in rs for d in run_drift(label, r)],
        # --memory: each engine recording's RSS and CUDA memory over its samples
        "memory_drift": [d for f, m in memory for d in memory_drift(Path(f).name, f, m)],
        # label -> the workload fields in which it differs from the baseline (workload())
        "workload_differs": differs,
        "comparisons": comparisons,
        "sweeps": sweeps,
        "errors": errors,  # label -> concurrency -> failed requests by kind (not in figures)
        # label -> concurrency -> the level's engine metrics (None: not scraped)
        "engine": {
            label: {str(lv.concurrency): lv.engine for lv in r.levels}
            for label, r in zip(labels, runs, strict=True)
        },
        "formats": {label: sorted({r.fmt for r in rs}) for label, rs in loaded.items()},
        "findings": [f.to_json() for f in findings],
    }
    # hardware findings of runs with telemetry (pytimings.serving.energy)
    doc.setdefault("findings", []).extend(
        [f for label, rs in loaded.items() for r in rs for f in energy.run_findings(label, r)]
        + energy.regression_findings(comparisons)
    )
    if not doc["findings"]:  # which evidence was missing, and how to get it
        doc["findings_note"] = missing_evidence(runs)
    print(_render(doc))
    if args.json:
        write_json(doc, args.json)
    if plot is not None:
        plot(runs, labels, sweeps, args.plot, args.definition)
    return 0


def serving_findings(
    labels: Sequence[str], runs: Sequence[Run], sweeps: dict[str, Any], definition: str
) -> list[Finding]:
    """Every run's findings (:mod:`pytimings.serving.findings`), each sweep's saturation,
    and the speculative A/B of each run against the baseline."""
    out: list[Finding] = []
    for label, r in zip(labels, runs, strict=True):
        out += run_findings(label, r, definition)
        out += saturation(label, sweeps[label]["levels"])
    for label, r in zip(labels[1:], runs[1:], strict=True):
        out += speculative_ab(labels[0], runs[0], label, r, definition)
    return out


def _render(doc: dict[str, Any]) -> str:
    rows = []
    for c in doc["comparisons"]:
        lo, hi = c["ci95"]
        rows.append([
            f"c={c['concurrency']} {c['metric']} ({c['unit']})",
            fmt_num(c["a"]), fmt_num(c["b"]),
            f"{c['rel_change'] * 100:+.1f}%",
            "-" if math.isnan(lo) or math.isnan(hi) else f"[{lo * 100:+.1f}%, {hi * 100:+.1f}%]",
            f"{c['verdict']}  ({c['label']} vs {c['baseline']})",
        ])  # fmt: skip
    out = [format_table(["metric", "baseline", "other", "change", "95% CI", "verdict"], rows)]
    erows = [
        [label, conc, ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "none"]
        for label, levels in doc["errors"].items()
        for conc, counts in levels.items()
    ]
    out.append("\nfailed requests (counted here, never in the figures above)")
    out.append(format_table(["run", "conc", "errors"], erows))
    for label, sw in doc["sweeps"].items():
        priced = "cost_per_mtok_usd" in sw
        srows = [
            [str(r["concurrency"]) + (" (saturated)" if r["past_saturation"] else ""),
             fmt_num(r["throughput"], 1), duration_ms(r["tpot_mean"]),
             duration_ms(r["ttft_p50"]), duration_ms(r["ttft_p99"]), fmt_num(r["efficiency"]),
             *([fmt_num(r["cost_per_mtok_usd"], 3)] if priced else [])]
            for r in sw["levels"]
        ]  # fmt: skip
        knee = sw["knee"] if sw["knee"] is not None else "none"
        out.append(f"\nsweep {label}: knee at concurrency {knee} ({sw['knee_rule']}); "
                   f"saturated: {sw['saturation_rule']}")  # fmt: skip
        if priced:
            gp = sw["gpu_price"]
            out.append(
                f"cost: {fmt_num(sw['cost_per_mtok_usd'], 3)} USD per million output tokens "
                f"over the run, at {gp['usd_per_gpu_hour']:g} USD per GPU hour x {gp['gpus']}"
            )
        headers = ["conc", "tok/s", "TPOT mean", "TTFT p50", "TTFT p99", "efficiency"]
        out.append(format_table(headers + (["USD/Mtok"] if priced else []), srows))
    out.append("\ninputs: " + "; ".join(f"{label}: {', '.join(f)}"
                                          for label, f in doc["formats"].items()))  # fmt: skip
    out.append("")
    out += render_findings([Finding(**f) for f in doc["findings"]], doc.get("findings_note"))
    if doc["drift"]:
        out.append("\n" + drift_table(doc["drift"]))
    if doc["memory_drift"]:
        out.append("\n" + drift_table(doc["memory_drift"], MEMORY_HEAD))
    return "\n".join(out)


def _memory_samples(path: str) -> MemorySamples:
    samples = load_memory(path)
    if samples is None:
        raise UsageError(f"--memory {path}: the recording has no memory samples "
                         "(pytimings.sample_memory() was never called)")  # fmt: skip
    return samples


def _plotter() -> Callable[[Sequence[Run], Sequence[str], dict[str, Any], str, str], None]:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(f"--plot needs matplotlib: {install_hint('plot')}") from None
    return _plot


def _plot(runs: Sequence[Run], labels: Sequence[str], sweeps: dict[str, Any], path: str,
          definition: str) -> None:  # fmt: skip
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 4.5), layout="constrained")
    ax_curve, ax_ttft, ax_tpot = fig.subplots(1, 3)
    for label, run_ in zip(labels, runs, strict=True):
        levels = sweeps[label]["levels"]
        x = [r["throughput"] for r in levels]
        y = [r["tpot_mean"] for r in levels]
        (line,) = ax_curve.plot(x, y, marker="o", label=label)
        for r in levels:
            ax_curve.annotate(f"c={r['concurrency']}", (r["throughput"], r["tpot_mean"]),
                              textcoords="offset points", xytext=(4, 4), fontsize=8)  # fmt: skip
        top = max(run_.levels, key=lambda lv: lv.concurrency)
        d = level_data(top, definition)
        for ax, values in ((ax_ttft, d.ttft), (ax_tpot, d.tpot[~np.isnan(d.tpot)])):
            v = np.sort(values)
            ax.step(v, np.arange(1, v.size + 1) / v.size, where="post", color=line.get_color(),
                    label=f"{label} (c={top.concurrency})")  # fmt: skip
    ax_curve.set(xlabel="output throughput (tok/s)", ylabel="TPOT mean (ms)",
                 title="throughput vs latency per token")  # fmt: skip
    ax_ttft.set(xlabel="TTFT (ms)", ylabel="fraction of requests", title="TTFT CDF")
    ax_tpot.set(xlabel="TPOT (ms)", ylabel="fraction of requests", title="TPOT CDF")
    for ax in (ax_curve, ax_ttft, ax_tpot):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    save_figure(fig, path, "--plot", dpi=100)
