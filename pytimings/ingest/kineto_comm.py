"""What a Kineto NCCL kernel says about its collective (PyTorch 2.1+ writes the
record_param_comms args on the kernel too): ``Collective name``, ``In msg nelems``,
``Out msg nelems``, ``dtype`` and ``Group size``. The size is nccl-tests' (the larger buffer,
:func:`pytimings.model.comm.message_bytes`), the collective the one ``Collective name`` names
(``_allgather_base``: all_gather); a kernel without them keeps bytes 0, collective and group
size -1 (unknown). Older traces carry only ``Input Dims`` on record_param_comms
(no group size, no collective): their sizes stay unknown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from pytimings.model.comm import collective_index, message_bytes

# the columns comm_columns adds to a GPU row block, with their dtypes
COMM_COLUMNS: dict[str, npt.DTypeLike] = {
    "comm_bytes": np.int64,
    "collective": np.int8,
    "group_size": np.int16,
}
_GROUP_MAX = np.iinfo(np.int16).max  # ranks are int16 in the model
COMM_KEY = b'"Collective name"'  # in a piece of events' JSON: some may have comm args


def _value(raw: msgspec.Raw) -> Any:
    """The JSON value of a raw field, None when absent or not valid JSON."""
    if not raw:
        return None
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return None


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def comm_columns(evs: Sequence[Any], n: int, scan: bool = True) -> dict[str, npt.NDArray[Any]]:
    """Per complete ('X') event of ``evs`` (the ``n`` rows event_rows kept, in order): the
    message bytes (0 unknown), the collective (index into COLLECTIVES, -1 unknown) and the
    group size (-1 unknown). ``scan=False``: their JSON holds no ``COMM_KEY``, all unknown."""
    nbytes = np.zeros(n, dtype=np.int64)
    collective = np.full(n, -1, dtype=np.int8)
    group = np.full(n, -1, dtype=np.int16)
    if not scan:
        return {"comm_bytes": nbytes, "collective": collective, "group_size": group}
    k = 0
    for ev in evs:
        if ev.ph != "X":
            continue
        a = ev.args
        if a is not None and a.collective:
            name = _value(a.collective)
            if isinstance(name, str):
                collective[k] = collective_index(name)
            dtype = _value(a.dtype)
            nbytes[k] = message_bytes(
                _count(_value(a.in_nelems)),
                _count(_value(a.out_nelems)),
                dtype if isinstance(dtype, str) else None,
            )
            g = _count(_value(a.group_size))
            if g is not None and 0 < g <= _GROUP_MAX:
                group[k] = g
        k += 1
    if k != n:
        raise ValueError(f"{k} complete events but {n} rows")
    return {"comm_bytes": nbytes, "collective": collective, "group_size": group}
