"""The capture finding for communication no rule names: kernels counted as compute that
run on a side stream beside compute and look like communication (a name with a hint such
as ``dispatch`` or ``a2a``, or a stream shared with comm kernels). Their time under compute
would be comm_overlapped, the rest comm_exposed; the finding says how to classify them
(``--comm-kernel GLOB``) with the time that moves."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from pytimings._native import _intervals as iv
from pytimings.analysis.classes import COMM, COMPUTE
from pytimings.analysis.finding import Finding, agree, plural
from pytimings.analysis.selection import reported
from pytimings.console.text import duration
from pytimings.ingest.names import short_kernel_name
from pytimings.model.trace import OpKind

if TYPE_CHECKING:
    from pytimings.analysis.result import Attribution

I64 = npt.NDArray[np.int64]
# words of a kernel's short name (split at non-letters and camelCase) that hint at
# communication: expert-parallel dispatch/combine, point-to-point, all-to-all, reductions
HINTS = ("dispatch", "combine", "send", "recv", "ep", "a2a", "reduce")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z0-9]+|[A-Z0-9]+")
MAX_NAMED = 3  # kernel names shown in the title


def name_hints(name: str) -> list[str]:
    """The hint words in a kernel's qualified name, template and call arguments left out
    (``void dpsk::ep::internode::combine<...>(...)`` -> ep, combine)."""
    head = re.split(r"[<(]", name, maxsplit=1)[0]
    words: set[str] = set()
    for part in re.split(r"[^A-Za-z0-9]+", head):
        words.add(part.lower())
        words.update(w.lower() for w in _CAMEL.findall(part))
    return [h for h in HINTS if h in words]


def _union(s: I64, e: I64) -> tuple[I64, I64]:
    keep = e > s
    s, e = s[keep], e[keep]
    o = np.argsort(s, kind="stable")
    return iv.union(np.ascontiguousarray(s[o]), np.ascontiguousarray(e[o]))


def _length(a: Attribution, r: int, d: int, ivs: tuple[I64, I64]) -> int:
    """Time of the interval set inside the window entries of (rank, device)."""
    w = a.windows
    wi = np.flatnonzero((w["rank"] == r) & (w["device"] == d))
    ws, we = np.ascontiguousarray(w["start_ns"][wi]), np.ascontiguousarray(w["end_ns"][wi])
    return int(iv.overlap_lengths(ws, we, *ivs).sum())


def unclassified_comm(a: Attribution) -> list[Finding]:
    """Compute-class kernels on a side stream (not the stream with the most other compute
    time on their device) that overlap the device's other compute and whose name hints at
    communication or whose stream runs comm kernels."""
    tr, cls = a.trace, a.classes
    ops = tr.gpu_ops
    rows = reported(a, np.flatnonzero(ops["end"] > ops["start"]))
    kern = rows[(ops["kind"][rows] == OpKind.KERNEL) & (cls[rows] == COMPUTE)]
    if kern.size == 0:
        return []
    hinted_name = {int(n): name_hints(tr.strings[int(n)]) for n in np.unique(ops["name"][kern])}
    hinted = np.zeros(len(tr.strings), dtype=bool)  # per string id: a hinting kernel name
    hinted[[n for n, h in hinted_name.items() if h]] = True
    per_name: dict[int, dict[str, int]] = {}
    moved_o = moved_e = 0
    streams: set[tuple[int, int, int]] = set()
    for r, d in sorted({(int(x), int(y)) for x, y in zip(a.windows["rank"], a.windows["device"],
                                                          strict=True)}):  # fmt: skip
        on = (ops["rank"] == r) & (ops["device"] == d)
        mine = kern[on[kern]]
        comm_rows = rows[on[rows] & (cls[rows] == COMM)]
        comm_streams = set(ops["stream"][comm_rows].tolist())
        hint = hinted[ops["name"][mine]]
        suspect = hint | np.isin(ops["stream"][mine], list(comm_streams))
        other = mine[~suspect]
        if other.size == 0 or not suspect.any():
            continue
        dur = ops["end"][other] - ops["start"][other]
        st, inv = np.unique(ops["stream"][other], return_inverse=True)
        main = int(st[np.argmax(np.bincount(inv.reshape(-1), weights=dur))])
        cand = mine[suspect & (ops["stream"][mine] != main)]
        if cand.size == 0:
            continue
        c_ivs = _union(ops["start"][other], ops["end"][other])
        cand = cand[iv.overlap_lengths(ops["start"][cand], ops["end"][cand], *c_ivs) > 0]
        if cand.size == 0:
            continue
        k_ivs = _union(ops["start"][cand], ops["end"][cand])
        m_ivs = _union(ops["start"][comm_rows], ops["end"][comm_rows])
        kc = iv.intersect(*k_ivs, *c_ivs)
        over = _length(a, r, d, kc) - _length(a, r, d, iv.intersect(*kc, *m_ivs))
        moved_o += over
        moved_e += _length(a, r, d, k_ivs) - _length(a, r, d, iv.intersect(*k_ivs, *m_ivs)) - over
        for n in np.unique(ops["name"][cand]).tolist():
            sel = cand[ops["name"][cand] == n]
            x = per_name.setdefault(
                n, {"kernels": 0, "ns": 0, "under_compute_ns": 0, "on_comm_stream": 0}
            )
            x["kernels"] += int(sel.size)
            x["on_comm_stream"] += int(np.isin(ops["stream"][sel], list(comm_streams)).sum())
            x["ns"] += int((ops["end"][sel] - ops["start"][sel]).sum())
            x["under_compute_ns"] += int(
                iv.overlap_lengths(ops["start"][sel], ops["end"][sel], *c_ivs).sum()
            )
            streams.update((r, d, int(s)) for s in ops["stream"][sel].tolist())
    moved = moved_o + moved_e
    if not per_name or moved <= 0:
        return []
    names = sorted(per_name, key=lambda n: (-per_name[n]["ns"], n))
    kernels: list[dict[str, Any]] = [
        {
            "name": tr.strings[n],
            "short_name": short_kernel_name(tr.strings[n]),
            "hints": hinted_name[n],
            **per_name[n],
        }
        for n in names
    ]
    count = sum(per_name[n]["kernels"] for n in names)
    under = sum(per_name[n]["under_compute_ns"] for n in names)
    hints = sorted({h for n in names for h in hinted_name[n]}, key=HINTS.index)
    top = kernels[0]
    glob = _suggested_glob(str(top["short_name"]))
    why = " and ".join(
        x
        for x in (
            f"names with {', '.join(repr(h) for h in hints)}" if hints else "",
            "streams with comm kernels" if any(not k["hints"] for k in kernels) else "",
        )
        if x
    )
    shown = ", ".join(f"'{k['short_name']}'" for k in kernels[:MAX_NAMED])
    more = f" and {len(kernels) - MAX_NAMED} more" if len(kernels) > MAX_NAMED else ""
    title = (
        f"capture: {plural(count, 'kernel')} on {plural(len(streams), 'side stream')} "
        f"({shown}{more}) {agree(count, 'overlaps', 'overlap')} compute for {duration(under)} and "
        f"{agree(count, 'looks', 'look')} like communication ({why}) but "
        f"{agree(count, 'matches', 'match')} no comm rule, so "
        f"{agree(count, 'it counts', 'they count')} "
        f"as compute; if {agree(count, 'it communicates', 'they communicate')}, classifying "
        f"{agree(count, 'it', 'them')} (--comm-kernel GLOB "
        f"per name, e.g. '{glob}') moves {duration(moved_o)} to comm_overlapped and "
        f"{duration(moved_e)} "
        "to comm_exposed"
    )
    return [
        Finding(
            "capture",
            title,
            moved,
            {
                "unclassified_kernels": count,
                "under_compute_ns": under,
                "kernels": kernels,
                "streams": [list(s) for s in sorted(streams)],
                "suggested_glob": glob,
                "if_comm_ns": {"comm_overlapped": moved_o, "comm_exposed": moved_e},
                "distorts": {
                    "compute_ns": moved,
                    "comm_overlapped_ns": moved_o,
                    "comm_exposed_ns": moved_e,
                },
            },
        )
    ]


def _suggested_glob(short: str) -> str:
    """A glob for a kernel's short name: its stem (template and call arguments dropped)."""
    return re.sub(r"[<(].*", "", short).strip() + "*"
