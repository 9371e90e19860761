"""A/B of two sets of captures (``pytimings diff``): per label, kernel or memory op, and
collective, the base and new mean per window, the delta, a bootstrap 95% interval of the
delta and a verdict. Statistics and matching only; report/diff.py formats the document.

**Windows.** Each side is a list of attributions, one per file (every file of a side
attributed with the same ``by``); the side's windows are pooled. The sample unit is the
window, never a row of the ``windows`` table: the rows of one ``--by`` window (one range
instance) on each device of its rank are one sample, their mean its value; without
``--by``, one capture is one sample (its ranks' and devices' whole-trace windows together:
they ran at the same time, so they are not independent). A statistic of a side is a mean
per window.

**Bootstrap.** Each replicate resamples each side independently with
:func:`pytimings.stats.two_stage_weights`: the files with replacement, then the windows of
each drawn file (one file: the plain bootstrap of its windows); each side's replicates are
widened for few units (:func:`replicate_weights`). The interval is on the ratio scale: the
2.5th and 97.5th percentiles of the replicated ratio new mean / base mean (percentiles are
unchanged by the log, so this is the log-ratio interval too), given as percent change in
``ci_low_pct``/``ci_high_pct``; times are never negative, so it never goes below -100%
(an interval of the difference divided by the base mean could). The verdict is ``worse``
when the whole interval is above 0% (more time), ``better`` when below, else ``within
noise``; a quantity the base never had (mean 0) is judged by the difference's interval,
with no percent. A side with fewer than :data:`MIN_WINDOWS` windows (samples) has no
interval: the CI fields are ``None`` and the verdict is ``n/a (too few windows)`` (never
significant).

**Kernels and memory ops** are matched by name across formats: kernels by
:func:`pytimings.ingest.names.normalize_kernel_name`, memcpys and memsets by the operation
name ``summary`` gives them (``[CUDA memcpy Host-to-Device]``). A ``--by`` window holds the
ops on its device launched from inside its range, on the range's thread (the contract's GPU
projection: an op launched in one step counts there even when it runs during the next); a
whole-trace window holds every op of its rank and device. Ops of a name only one side ran
get the verdict ``added`` or ``removed``.

**Ops** (docs/ops.md): the GPU time per launching op, matched by op name and input dims
(so captures on different GPUs or vendors, whose kernel names differ, compare op by op),
and per op category; a window holds the GPU ops on its rank and device that start in it
(the op table's windows). GPU ops no op launched are left out of ``ops`` and counted in
their kernel name's category. Graph-replayed GPU ops are charged through each side's
graph captures (those its op tables were made with: ``--capture`` files given to both sides,
matched by content to each side's replays, and ``--base-capture``/``--new-capture`` to one);
``op_attribution`` says per side what was charged and, by reason, what was not. A capture
given to both sides is refused only when it matches the replays of neither.

**Collectives** (several ranks in a file): per collective name, its duration, arrival skew
and wait per instance and rank (:class:`pytimings.analysis.collectives.Collectives`), the
instances resampled the same way, grouped by file.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.analysis.graph_capture import merge_replay_docs
from pytimings.analysis.host import charge_lists
from pytimings.analysis.memory import compare_memory
from pytimings.analysis.op_table import OpTable, merge_attribution, op_table
from pytimings.analysis.ops import CATEGORIES
from pytimings.analysis.partition import LABELS
from pytimings.analysis.result import Attribution
from pytimings.analysis.selection import per_window
from pytimings.analysis.summary import MEMSET_CODE, memory_label
from pytimings.errors import UsageError
from pytimings.ingest.names import normalize_ids, short_kernel_name, trace_vendor
from pytimings.model.trace import OpKind
from pytimings.stats import too_few, two_stage_weights, verdict

SCHEMA = "pytimings.diff/1"
TOO_FEW_WINDOWS = too_few("windows")
MIN_WINDOWS = 2  # per side, for an interval and a verdict (one window has no spread)
SIGNIFICANT = ("better", "worse")
F64 = npt.NDArray[np.float64]
LABEL_NAMES = ("window", *LABELS)


@dataclass
class Sample:
    """Values of one side, one row per member (window, collective instance), one column per
    compared quantity; ``groups``: the member rows of each file."""

    values: F64
    groups: list[npt.NDArray[np.intp]]

    @property
    def n(self) -> int:
        return int(self.values.shape[0])


def groups_of(sizes: Sequence[int]) -> list[npt.NDArray[np.intp]]:
    """Consecutive member rows per file, from each file's member count (empty files left
    out: a file without members has nothing to resample)."""
    bounds = np.cumsum([0, *sizes])
    return [np.arange(a, b, dtype=np.intp) for a, b in pairwise(bounds) if b > a]


def replicate_weights(
    groups: Sequence[npt.NDArray[np.intp]], n: int, resamples: int, rng: np.random.Generator
) -> F64 | None:
    """``resamples`` x ``n`` bootstrap weights of a mean (rows sum to 1), or None when fewer
    than :data:`MIN_WINDOWS` members leave nothing to resample. :func:`compare` widens what
    they replicate (:func:`widening`)."""
    if n < MIN_WINDOWS:
        return None
    w = np.stack([two_stage_weights(groups, n, rng)[0] for _ in range(resamples)])
    weights: F64 = w / w.sum(axis=1, keepdims=True)
    return weights


def widening(sample: Sample) -> float:
    """sqrt(k / (k - 1)), k the units of the first stage (files when there are several,
    else members): the plain bootstrap's variance of a mean is (k - 1) / k of the unbiased
    one, which made intervals too narrow for a few windows (7.8% false positives at 8
    windows per side instead of 5%). Each replicate's deviation from the point mean is
    stretched by it: linearly for the difference, in the log for the ratio (so a widened
    mean stays positive)."""
    k = len(sample.groups) if len(sample.groups) > 1 else sample.n
    return math.sqrt(k / (k - 1))


# what the bootstrap may hold at once: the replicate weights of both sides plus a copy
BOOTSTRAP_BYTES_LIMIT = 2 << 30


def check_bootstrap_memory(resamples: int, members: int) -> None:
    """Refuse, before any is drawn, a bootstrap whose replicate weights (``resamples`` x
    ``members`` per side, float64, each side held with one working copy) would exceed
    :data:`BOOTSTRAP_BYTES_LIMIT`: ``--resamples 1e7`` used to run two minutes into a
    MemoryError."""
    need = 4 * 8 * resamples * members
    if members >= 2 and need > BOOTSTRAP_BYTES_LIMIT:  # fewer: nothing is resampled
        most = BOOTSTRAP_BYTES_LIMIT // (4 * 8 * max(members, 1))
        raise UsageError(
            f"--resamples {resamples}: the bootstrap of {members} windows would hold "
            f"{need / 1e9:.1f} GB of replicate weights; at most {most} replicates here"
        )


def compare(
    names: Sequence[str],
    base: Sample,
    new: Sample,
    base_w: F64 | None,
    new_w: F64 | None,
) -> list[dict[str, Any]]:
    """One row per column of the samples: means, delta, 95% interval and verdict."""
    mb, mn = base.values.mean(axis=0), new.values.mean(axis=0)
    nan = np.full(len(names), np.nan)
    lo = hi = r_lo = r_hi = nan
    if base_w is not None and new_w is not None:
        rb, rn = base_w @ base.values, new_w @ new.values  # replicated means
        cb, cn = widening(base), widening(new)
        delta = (mn + cn * (rn - mn)) - (mb + cb * (rb - mb))
        lo, hi = np.percentile(delta, [2.5, 97.5], axis=0)
        with np.errstate(divide="ignore", invalid="ignore"):
            # log ratio, each side's log mean widened: times are >= 0, so the ratio is >= 0
            # and its percent >= -100%; a replicate (or point) with a zero mean has none,
            # and then that column gets no ratio interval
            log_r = (
                cn * np.log(rn) + (1 - cn) * np.log(mn) - cb * np.log(rb) - (1 - cb) * np.log(mb)
            )
            log_r[np.abs(log_r) < 1e-12] = 0.0  # rounding of equal means is no change
            r_lo, r_hi = np.exp(np.percentile(log_r, [2.5, 97.5], axis=0))
    rows = []
    for j, name in enumerate(names):
        b, n, d = float(mb[j]), float(mn[j]), float(mn[j] - mb[j])
        no_ci = bool(np.isnan(lo[j]))
        ratio_ci = b > 0 and not no_ci and bool(np.isfinite(r_lo[j]) and np.isfinite(r_hi[j]))
        if no_ci:
            says = TOO_FEW_WINDOWS
        elif ratio_ci:  # the ratio's interval against 1 (the same as the log ratio's vs 0)
            says = verdict(float(r_lo[j]) - 1, float(r_hi[j]) - 1, False)
        else:  # nothing in the base (or a replicate without it): the difference's interval
            says = verdict(float(lo[j]), float(hi[j]), False)
        rows.append({
            "name": name, "base_ns": b, "new_ns": n, "delta_ns": d,
            "delta_pct": 100 * d / b if b else None,
            "ci_low_pct": 100 * (float(r_lo[j]) - 1) if ratio_ci else None,
            "ci_high_pct": 100 * (float(r_hi[j]) - 1) if ratio_ci else None,
            # the difference's interval: the verdict's when the ratio has none
            "ci_low_ns": None if no_ci else float(lo[j]),
            "ci_high_ns": None if no_ci else float(hi[j]),
            "verdict": says,
        })  # fmt: skip
    return rows


def matrix(per_member: Sequence[Mapping[str, float]], names: Sequence[str]) -> F64:
    """Members x names, from one {name: value} dict per member (absent names: 0)."""
    col = {nm: j for j, nm in enumerate(names)}
    out = np.zeros((len(per_member), len(names)))
    for i, d in enumerate(per_member):
        for nm, v in d.items():
            out[i, col[nm]] = v
    return out


def compare_named(
    base: Sequence[Mapping[str, float]],
    base_w: F64 | None,
    base_members: Members,
    new: Sequence[Mapping[str, float]],
    new_w: F64 | None,
    new_members: Members,
) -> list[dict[str, Any]]:
    """Per-window-row {name: ns} dicts of each side (any source: kernels, host activities)
    -> one row per name either side has, as :func:`compare` over the sides' samples; names
    sorted."""
    names = sorted({nm for d in (*base, *new) for nm in d})
    return compare(
        names,
        base_members.sample(matrix(base, names)),
        new_members.sample(matrix(new, names)),
        base_w,
        new_w,
    )


def op_windows(a: Attribution) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Per row of ``a.windows``: {op name: total ns} and {op name: count} of its GPU ops
    (names and membership as the module docstring says)."""
    ops = a.trace.gpu_ops
    names, code = normalize_ids(a.trace.strings, ops["name"])
    is_kernel = ops["kind"] == OpKind.KERNEL
    mem_code = np.where(ops["kind"] == OpKind.MEMSET, MEMSET_CODE, ops["copy_kind"])
    key = code.astype(np.int64)
    all_names = list(names)
    vendor = trace_vendor(a.trace)
    for c in np.unique(mem_code[~is_kernel]):
        key[~is_kernel & (mem_code == c)] = len(all_names)
        all_names.append(memory_label(int(c), vendor))
    dur = (ops["end"] - ops["start"]).astype(np.float64)
    w, rg, la = a.windows, a.trace.ranges, a.launches
    # launched ops per (rank, launching thread), in launch-start order
    linked = np.flatnonzero(la.api_row >= 0)
    linked = linked[np.lexsort((la.start[linked], la.thread[linked], ops["rank"][linked]))]
    by_thread: dict[tuple[int, int], npt.NDArray[np.intp]] = {}
    for (r, t), rows in _runs(ops["rank"][linked], la.thread[linked], linked):
        by_thread[(r, t)] = rows
    totals: list[dict[str, float]] = []
    counts: list[dict[str, float]] = []
    for row in range(len(w)):
        rank, device = int(w["rank"][row]), int(w["device"][row])
        rr = int(a.window_range_rows[row])
        if rr < 0:  # a whole-trace window: every op of its rank and device
            sel = np.flatnonzero((ops["rank"] == rank) & (ops["device"] == device))
        else:  # ops launched from inside the range, on its thread
            cand = by_thread.get((rank, int(rg["thread"][rr])), np.empty(0, np.intp))
            r_s = int(rg["start"][rr])
            i0, i1 = np.searchsorted(la.start[cand], [r_s, max(r_s, int(rg["end"][rr]))])
            sel = cand[i0:i1]
            sel = sel[ops["device"][sel] == device]
        tot = np.bincount(key[sel], weights=dur[sel], minlength=len(all_names))
        cnt = np.bincount(key[sel], minlength=len(all_names))
        nz = np.flatnonzero(cnt)
        totals.append({all_names[j]: float(tot[j]) for j in nz})
        counts.append({all_names[j]: float(cnt[j]) for j in nz})
    return totals, counts


def _runs(
    a: npt.NDArray[Any], b: npt.NDArray[Any], rows: npt.NDArray[np.intp]
) -> list[tuple[tuple[int, int], npt.NDArray[np.intp]]]:
    """``rows`` (sorted by ``a`` then ``b``) split into runs of equal (a, b)."""
    if rows.size == 0:
        return []
    cut = np.flatnonzero((a[1:] != a[:-1]) | (b[1:] != b[:-1])) + 1
    starts = np.concatenate([[0], cut])
    return [
        ((int(a[i]), int(b[i])), part) for i, part in zip(starts, np.split(rows, cut), strict=True)
    ]


def _side_ops(side: Sequence[Attribution]) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    totals: list[dict[str, float]] = []
    counts: list[dict[str, float]] = []
    for a in side:
        t, c = op_windows(a)
        totals += t
        counts += c
    return totals, counts


def _kernel_rows(
    base: Sequence[Attribution],
    new: Sequence[Attribution],
    weights: tuple[F64 | None, F64 | None],
    members: tuple[Members, Members],
) -> list[dict[str, Any]]:
    (bt, bc), (nt, nc) = _side_ops(base), _side_ops(new)
    rows = compare_named(bt, weights[0], members[0], nt, weights[1], members[1])
    for row in rows:
        nm = row["name"]
        b_count = int(sum(c.get(nm, 0) for c in bc))
        n_count = int(sum(c.get(nm, 0) for c in nc))
        b_total = sum(t.get(nm, 0.0) for t in bt)
        n_total = sum(t.get(nm, 0.0) for t in nt)
        row["base_count"], row["new_count"] = b_count, n_count
        row["base_per_instance_ns"] = b_total / b_count if b_count else None
        row["new_per_instance_ns"] = n_total / n_count if n_count else None
        if b_count == 0:
            row["verdict"] = "added"
        elif n_count == 0:
            row["verdict"] = "removed"
    return rows


def _op_key(name: str, dims: Any) -> str:
    return f"{name} {json.dumps(dims)}"


def _side_op_table(
    side: Sequence[Attribution], tables: Sequence[OpTable]
) -> tuple[list[dict[str, float]], list[dict[str, float]], dict[str, tuple[str, Any]]]:
    """Per window entry of the side's files: {op key: GPU ns} of the ops that launched its
    GPU ops, {category: GPU ns}; and each op key's (name, input dims)."""
    ops_t: list[dict[str, float]] = []
    cats_t: list[dict[str, float]] = []
    named: dict[str, tuple[str, Any]] = {}
    for a, table in zip(side, tables, strict=True):
        keys = [_op_key(r["name"], r["input_dims"]) for r in table.ops]
        for k, r in zip(keys, table.ops, strict=True):
            named.setdefault(k, (r["name"], r["input_dims"]))
        ops = a.trace.gpu_ops
        dur = (ops["end"] - ops["start"]).astype(np.float64)
        for rows in per_window(a, np.arange(len(ops), dtype=np.int64)):
            per_op: dict[str, float] = {}
            for i, ns in zip(table.op_row[rows].tolist(), dur[rows].tolist(), strict=True):
                if i >= 0:
                    per_op[keys[i]] = per_op.get(keys[i], 0.0) + ns
            ops_t.append(per_op)
            tot = np.bincount(table.category[rows], weights=dur[rows], minlength=len(CATEGORIES))
            cats_t.append({CATEGORIES[j]: float(tot[j]) for j in np.flatnonzero(tot)})
    return ops_t, cats_t, named


def _op_rows(
    sides: tuple[Sequence[Attribution], Sequence[Attribution]],
    tables: tuple[Sequence[OpTable], Sequence[OpTable]],
    weights: tuple[F64 | None, F64 | None],
    members: tuple[Members, Members],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The ``ops`` rows (name, input_dims, as :func:`compare`; ``added``/``removed`` for an
    op and shape only one side ran) and the ``op_categories`` rows."""
    (bo, bc, bn) = _side_op_table(sides[0], tables[0])
    (no, nc, nn) = _side_op_table(sides[1], tables[1])
    rows = compare_named(bo, weights[0], members[0], no, weights[1], members[1])
    out = []
    for row in rows:
        key = row.pop("name")
        name, dims = bn.get(key) or nn[key]
        if key not in bn:
            row["verdict"] = "added"
        elif key not in nn:
            row["verdict"] = "removed"
        out.append({"name": name, "input_dims": dims, **row})
    return out, compare_named(bc, weights[0], members[0], nc, weights[1], members[1])


def _op_attribution(
    sides: tuple[Sequence[Attribution], Sequence[Attribution]],
    tables: tuple[Sequence[OpTable], Sequence[OpTable]],
    shared: Collection[str],
) -> dict[str, dict[str, Any]]:
    """Per side, its files' op attribution summed (``op_attribution`` of ``analyze``); with
    captures, ``graph_replays`` over its files: a capture given to both sides is refused
    only when it matched on neither (module docstring)."""
    docs = {
        k: [t.attribution for t in side] for k, side in zip(("base", "new"), tables, strict=True)
    }
    matched = {
        c["source"]
        for side in docs.values()
        for d in side
        for c in d.get("graph_replays", {}).get("captures", [])
        if c["source"] in shared and c["matched_launches"]
    }
    out = {}
    for k, side in zip(("base", "new"), sides, strict=True):
        doc = merge_attribution(docs[k])
        replays = [
            (str(a.trace.meta.get("path", f"file {i + 1}")), d["graph_replays"])
            for i, (a, d) in enumerate(zip(side, docs[k], strict=True))
            if "graph_replays" in d
        ]
        if replays:
            doc["graph_replays"] = merge_replay_docs(replays, matched)
        out[k] = doc
    return out


_COLLECTIVE_METRICS = (("time", None), ("skew", "skew_ns"), ("wait", "wait_ns"))


def _collective_samples(side: Sequence[Attribution]) -> dict[str, tuple[F64, list[int]]]:
    """Per normalised collective name: instances x (time, skew, wait), members per file."""
    parts: dict[str, list[F64]] = {}
    sizes: dict[str, list[int]] = {}
    for fi, a in enumerate(side):
        if a.collectives is None:
            continue
        t = a.collectives.table
        keys, code = normalize_ids(list(t["name"]), np.arange(len(t)))
        vals = np.stack(
            [
                (t["end_ns"] - t["start_ns"]) if col is None else t[col]
                for _, col in _COLLECTIVE_METRICS
            ],
            axis=1,
        ).astype(np.float64)
        for j, nm in enumerate(keys):
            m = code == j
            parts.setdefault(nm, []).append(vals[m])
            sizes.setdefault(nm, [0] * len(side))[fi] = int(m.sum())
    return {nm: (np.concatenate(p), sizes[nm]) for nm, p in parts.items()}


def _collective_rows(
    base: Sequence[Attribution],
    new: Sequence[Attribution],
    resamples: int,
    rng: np.random.Generator,
) -> list[dict[str, Any]]:
    bs, ns = _collective_samples(base), _collective_samples(new)
    rows = []
    for nm in sorted(bs.keys() & ns.keys()):
        samples = []
        weights = []
        for values, sizes in (bs[nm], ns[nm]):
            groups = groups_of(sizes)
            samples.append(Sample(values, groups))
            weights.append(replicate_weights(groups, len(values), resamples, rng))
        metric_names = [f"{nm} {m}" for m, _ in _COLLECTIVE_METRICS]
        rows += compare(metric_names, samples[0], samples[1], weights[0], weights[1])
    for nm, side in [(n, "removed") for n in sorted(bs.keys() - ns.keys())] + [
        (n, "added") for n in sorted(ns.keys() - bs.keys())
    ]:
        src = bs if side == "removed" else ns
        mean = src[nm][0].mean(axis=0)
        for (m, _), v in zip(_COLLECTIVE_METRICS, mean, strict=True):
            b, n = (float(v), 0.0) if side == "removed" else (0.0, float(v))
            rows.append({
                "name": f"{nm} {m}", "base_ns": b, "new_ns": n, "delta_ns": n - b,
                "delta_pct": -100.0 if side == "removed" else None,
                "ci_low_pct": None, "ci_high_pct": None, "verdict": side,
            })  # fmt: skip
    return rows


def window_members(a: Attribution) -> tuple[npt.NDArray[np.intp], int]:
    """Per row of ``a.windows``, the sample (window) it belongs to, and how many: one per
    ``--by`` range instance (its rows on each device of its rank together), one for the
    whole capture without ``--by`` (module docstring)."""
    if a.by is None or len(a.windows) == 0:
        return np.zeros(len(a.windows), np.intp), min(1, len(a.windows))
    _, member = np.unique(a.window_range_rows, return_inverse=True)
    member = member.reshape(-1).astype(np.intp)
    return member, int(member.max()) + 1


@dataclass
class Members:
    """A side's window rows pooled over its files, grouped into its samples (windows)."""

    of_row: npt.NDArray[np.intp]  # per pooled row: its sample
    n: int  # samples
    groups: list[npt.NDArray[np.intp]]  # the samples of each file

    @classmethod
    def of(cls, side: Sequence[Attribution]) -> Members:
        parts, sizes, k = [], [], 0
        for a in side:
            m, n = window_members(a)
            parts.append(m + k)
            sizes.append(n)
            k += n
        of_row = np.concatenate(parts) if parts else np.empty(0, np.intp)
        return cls(of_row, k, groups_of(sizes))

    def mean(self, rows: F64) -> F64:
        """Rows x columns -> samples x columns: each sample the mean of its rows."""
        out = np.zeros((self.n, rows.shape[1]))
        np.add.at(out, self.of_row, rows)
        count = np.bincount(self.of_row, minlength=self.n).astype(np.float64)
        means: F64 = out / np.maximum(count, 1.0)[:, None]
        return means

    def sample(self, rows: F64) -> Sample:
        return Sample(self.mean(rows), self.groups)


def diff(
    base: Sequence[Attribution],
    new: Sequence[Attribution],
    resamples: int = 1000,
    seed: int = 0,
    shared_captures: Collection[str] = (),
    tables: tuple[Sequence[OpTable], Sequence[OpTable]] | None = None,
) -> dict[str, Any]:
    """The ``pytimings.diff/1`` document of two sides (each: one attribution per file;
    ``tables``: each one's op table, over the graph captures each side's replays are
    matched to, the labels of those given to both sides in ``shared_captures``; None:
    each attribution's own, without captures)."""
    if tables is None:
        tables = ([op_table(a) for a in base], [op_table(a) for a in new])
    rng = np.random.default_rng(seed)
    bm, nm = Members.of(base), Members.of(new)
    for side, atts, k in (("base", base, bm.n), ("new", new, nm.n)):
        if k == 0:
            by = f"--by {atts[0].by!r}" if atts[0].by else "the whole trace"
            raise UsageError(f"the {side} side has no window to compare ({by}: none on a GPU)")
    check_bootstrap_memory(resamples, max(bm.n, nm.n))
    b_w = replicate_weights(bm.groups, bm.n, resamples, rng)
    n_w = replicate_weights(nm.groups, nm.n, resamples, rng)
    labels = compare(
        LABEL_NAMES, bm.sample(_label_values(base)), nm.sample(_label_values(new)), b_w, n_w
    )
    ops, op_categories = _op_rows((base, new), tables, (b_w, n_w), (bm, nm))
    return {
        "schema": SCHEMA,
        "by": base[0].by,
        "resamples": resamples,
        "seed": seed,
        "interval": "ratio",  # percentiles of the replicated new/base ratio (module doc)
        "min_windows": MIN_WINDOWS,
        "windows": {"base": bm.n, "new": nm.n},  # samples (module docstring)
        "window_entries": {"base": bm.of_row.size, "new": nm.of_row.size},
        "files": {"base": len(base), "new": len(new)},
        "labels": labels,
        "kernels": _kernel_rows(base, new, (b_w, n_w), (bm, nm)),
        "ops": ops,
        "op_categories": op_categories,
        "op_attribution": _op_attribution((base, new), tables, shared_captures),
        "host_activities": compare_named(_side_host(base), b_w, bm, _side_host(new), n_w, nm),
        "collectives": _collective_rows(base, new, resamples, rng),
        "memory": compare_memory([a.memory for a in base], [a.memory for a in new]),
    }


def _side_host(side: Sequence[Attribution]) -> list[dict[str, float]]:
    """Per window entry of the side's files: its host_bound time by the innermost host
    activity it was charged to (contract v2's host_bound_by_activity), named
    ``"<kind> <name>"`` (``untraced`` alone)."""
    out: list[dict[str, float]] = []
    for a in side:
        for charges in charge_lists(a.host.bound_by_activity, len(a.windows), a.trace.strings):
            per: dict[str, float] = {}
            for c in charges:
                key = f"{c['kind']} {c['name']}" if c["name"] else c["kind"]
                per[key] = per.get(key, 0.0) + float(c["ns"])
            out.append(per)
    return out


def _label_values(side: Sequence[Attribution]) -> F64:
    """Windows x (window_ns, each label's ns), pooled over the side's files."""
    cols = [np.stack([a.windows[f"{c}_ns"] for c in LABEL_NAMES], axis=1) for a in side]
    return np.concatenate(cols).astype(np.float64)


# --- thresholds (--fail-on) ----------------------------------------------------------------
_UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6}
_THRESHOLD = re.compile(
    r"^(?P<name>.*\S)\s*(?P<op>[<>])\s*(?P<value>[+-]?\d+(?:\.\d*)?)\s*(?P<unit>%|ns|us|ms)$"
)
_SPLIT = re.compile(r"(?:(?<=%)|(?<=ns)|(?<=us)|(?<=ms))\s*,\s*")


@dataclass(frozen=True)
class Threshold:
    """``name > value`` or ``name < value``: percent of the base (``pct``) or ns."""

    text: str
    name: str
    above: bool  # '>'
    value: float
    pct: bool


def parse_thresholds(spec: str) -> list[Threshold]:
    """``'window>+5%,compute>200us'``: name, ``>`` or ``<``, a number and ``%``, ``ns``,
    ``us`` or ``ms``; several comma-separated."""
    out = []
    for part in _SPLIT.split(spec.strip()):
        m = _THRESHOLD.match(part.strip())
        if m is None:
            raise UsageError(
                f"--fail-on {part!r}: expected NAME>VALUE or NAME<VALUE with a unit "
                "(%, ns, us, ms), e.g. 'window>+5%'"
            )
        unit = m["unit"]
        value = float(m["value"]) * (1.0 if unit == "%" else _UNIT_NS[unit])
        out.append(Threshold(part.strip(), m["name"].strip(), m["op"] == ">", value, unit == "%"))
    return out


def crossed(
    doc: Mapping[str, Any], thresholds: Sequence[Threshold]
) -> list[tuple[Threshold, dict[str, Any]]]:
    """The (threshold, row) pairs where a significant change (better/worse, or an op only
    on one side) crosses a threshold. A name matches a row's name, or a kernel's short
    name; a threshold naming nothing in the document is a UsageError."""
    out = []
    for th in thresholds:
        rows = [
            r for sec in ("labels", "kernels", "host_activities", "collectives")
            for r in doc[sec]
            if th.name in (r["name"], short_kernel_name(r["name"]) if sec == "kernels" else "")
        ]  # fmt: skip
        if not rows:
            raise UsageError(
                f"--fail-on {th.text!r}: no label, kernel or collective named {th.name!r} "
                f"(labels: {', '.join(LABEL_NAMES)})"
            )
        for r in rows:
            if r["verdict"] not in (*SIGNIFICANT, "added", "removed"):
                continue
            v = r["delta_pct"] if th.pct else r["delta_ns"]
            if v is not None and (v > th.value if th.above else v < th.value):
                out.append((th, r))
    return out
