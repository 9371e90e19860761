"""NCCL's typed NVTX payloads in an Nsight Systems export: each NCCL call range's message
size and communicator, and from them the GPU op the call launched.

NCCL attaches to the NVTX range of each API call (``ncclAllReduce``, ``ncclSend``,
``ncclCommInitRank``, ...) a binary payload that a schema describes (tables
``NVTX_PAYLOAD_SCHEMAS``: payload size; ``NVTX_PAYLOAD_SCHEMA_ENTRIES``: each field's name,
type and byte offset: ``Message size [bytes]``, ``NCCL communicator ID``, ``No. of ranks``).
Where the export keeps the values, ``NVTX_EVENTS.binaryData`` holds a 32-byte header (four
little-endian uint64: domain id, schema id, payload size, total size) and then the payload.
A blob is read only when its header agrees with the event's domain and the schema's payload
size; a blob that does not is counted (``nvtx_binary_payloads_not_decoded``), never guessed.
The exports in ../shared (Nsight 2025.3, 2026.2) keep the schemas but no values.

A range with a size gives it to the one GPU op launched from inside it on its thread (the
NCCL kernel of an ``ncclAllReduce`` call), with the collective its name says and the group
size its communicator was created with; a range that launched several ops (or none) gives
none (a grouped ``ncclSend``/``ncclRecv`` launches at ``ncclGroupEnd``, outside it).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.model.comm import collective_index
from pytimings.model.trace import OpKind

I64 = npt.NDArray[np.int64]
MESSAGE_SIZE = "Message size [bytes]"
COMMUNICATOR = "NCCL communicator ID"
RANKS = "No. of ranks"
FIELDS = (MESSAGE_SIZE, COMMUNICATOR, RANKS)
HEADER = struct.Struct("<QQQQ")
NOT_DECODED = "nvtx_binary_payloads_not_decoded"
# NVTX_PAYLOAD_ENTRY_TYPE_* integer types -> (bytes, signed)
_INT_TYPES = {
    5: (4, True), 6: (4, False), 7: (8, True), 8: (8, False), 9: (8, True), 10: (8, False),
    11: (1, True), 12: (1, False), 13: (2, True), 14: (2, False), 15: (4, True),
    16: (4, False), 17: (8, True), 18: (8, False), 22: (8, False),
}  # fmt: skip

# (domain id, schema id) -> (payload size, {field: (offset, bytes, signed)})
Schemas = dict[tuple[int, int], tuple[int, dict[str, tuple[int, int, bool]]]]


def read_schemas(
    small: Callable[[str], list[tuple[Any, ...]]], has: Callable[[str], bool]
) -> Schemas:
    """The payload schemas that hold any of ``FIELDS`` as an integer (``small`` runs a
    query on the export; text may come back as bytes)."""
    if not (has("NVTX_PAYLOAD_SCHEMAS") and has("NVTX_PAYLOAD_SCHEMA_ENTRIES")):
        return {}
    sizes = {
        (int(d), int(s)): int(p)
        for d, s, p in small('SELECT domainId, schemaId, payloadSize FROM "NVTX_PAYLOAD_SCHEMAS"')
        if d is not None and s is not None and isinstance(p, int)
    }
    out: Schemas = {}
    rows = small(
        'SELECT domainId, schemaId, name, type, "offset" FROM "NVTX_PAYLOAD_SCHEMA_ENTRIES"'
    )
    for d, s, raw, typ, offset in rows:
        key = (int(d or 0), int(s or 0))
        name = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
        if name in FIELDS and typ in _INT_TYPES and key in sizes:
            width, signed = _INT_TYPES[typ]
            out.setdefault(key, (sizes[key], {}))[1][name] = (int(offset or 0), width, signed)
    return out


def decode(
    offsets: I64, data: bytes, rows: I64, domains: I64, schemas: Schemas
) -> tuple[dict[str, I64], int]:
    """Per row of ``rows`` (into the blob column ``offsets``/``data``): each of ``FIELDS``
    (-1 absent), and how many non-empty blobs could not be decoded."""
    out = {f: np.full(rows.size, -1, dtype=np.int64) for f in FIELDS}
    lengths = offsets[rows + 1] - offsets[rows]
    bad = 0
    for k in np.flatnonzero(lengths > 0).tolist():
        at, n = int(offsets[rows[k]]), int(lengths[k])
        if n < HEADER.size:
            bad += 1
            continue
        domain, schema, size, total = HEADER.unpack_from(data, at)
        found = schemas.get((domain, schema))
        if (
            found is None
            or domain != int(domains[k])
            or size != found[0]
            or total != HEADER.size + size
            or n < total
        ):
            bad += 1
            continue
        for name, (offset, width, signed) in found[1].items():
            if offset + width <= size:
                start = at + HEADER.size + offset
                value = int.from_bytes(data[start : start + width], "little", signed=signed)
                out[name][k] = value if 0 <= value < 2**63 else -1
    return out, bad


def group_sizes(fields: dict[str, I64]) -> I64:
    """Per range: the rank count its communicator was created with (the init call's
    ``No. of ranks``), -1 unknown."""
    comm, ranks = fields[COMMUNICATOR], fields[RANKS]
    known = np.flatnonzero((comm >= 0) & (ranks > 0))
    out = np.full(comm.size, -1, dtype=np.int64)
    if known.size == 0:  # the usual case: no init call's payload (one lookup per range)
        return out
    # per communicator, its last init call's count (a lookup table, not a dict per range)
    last = known[::-1]
    ids, at = np.unique(comm[last], return_index=True)
    pos = np.minimum(np.searchsorted(ids, comm), ids.size - 1)
    hit = ids[pos] == comm
    out[hit] = ranks[last[at[pos[hit]]]]
    return out


def give_to_ops(
    ops: dict[str, npt.NDArray[Any]],
    api: dict[str, npt.NDArray[Any]],
    ranges: dict[str, npt.NDArray[Any]],
    group: I64,
    names: list[str],
) -> int:
    """Each range with a size (``ranges["bytes"]``) that launched exactly one GPU op from
    inside it on its thread, a kernel without bytes, gives that kernel its bytes,
    collective and group size (in place); returns how many kernels got a size."""
    sized = np.flatnonzero(ranges["bytes"] >= 0)
    if sized.size == 0 or len(api["start"]) == 0 or len(ops["start"]) == 0:
        return 0
    # per API call (by thread, then start): how many GPU ops it launched, and the first
    order = np.lexsort((api["start"], api["thread"]))
    a_thread, a_start = api["thread"][order], api["start"][order]
    a_key = (api["pid"][order].astype(np.int64) << 40) ^ api["correlation"][order]
    o_key = (ops["pid"].astype(np.int64) << 40) ^ ops["correlation"]
    by_key = np.argsort(o_key, kind="stable")
    left = np.searchsorted(o_key[by_key], a_key, "left")
    right = np.searchsorted(o_key[by_key], a_key, "right")
    n_ops = np.where(api["correlation"][order] >= 0, right - left, 0)
    cum = np.concatenate([[0], np.cumsum(n_ops)])
    # per sized range: the calls that start inside it on its thread
    r_thread, r_start, r_end = (ranges[c][sized] for c in ("thread", "start", "end"))
    j0 = np.empty(sized.size, dtype=np.int64)
    j1 = np.empty(sized.size, dtype=np.int64)
    for t in np.unique(r_thread).tolist():
        m = r_thread == t
        lo, hi = np.searchsorted(a_thread, t, "left"), np.searchsorted(a_thread, t, "right")
        j0[m] = lo + np.searchsorted(a_start[lo:hi], r_start[m], "left")
        j1[m] = lo + np.searchsorted(a_start[lo:hi], r_end[m], "left")
    one = (cum[j1] - cum[j0]) == 1
    call = np.searchsorted(cum, cum[j0[one]] + 1, "left") - 1  # the call launching it
    op = by_key[left[call]]
    ok = (ops["kind"][op] == OpKind.KERNEL) & (ops["bytes"][op] <= 0)
    op, rng = op[ok], sized[one][ok]
    ops["bytes"][op] = ranges["bytes"][rng]
    coll = np.array([collective_index(names[int(n)]) for n in ranges["name"][rng]], np.int8)
    keep = ops["collective"][op] >= 0
    ops["collective"][op] = np.where(keep, ops["collective"][op], coll)
    g = group[rng]
    fits = (ops["group_size"][op] < 0) & (g > 0) & (g <= np.iinfo(np.int16).max)
    ops["group_size"][op] = np.where(fits, g, ops["group_size"][op])
    return int(op.size)
