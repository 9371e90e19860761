"""What a Kineto NCCL kernel says about its collective (PyTorch 2.1+ writes the
record_param_comms args on the kernel too): ``Collective name``, ``In msg nelems``,
``Out msg nelems``, ``dtype`` and ``Group size``. The size is nccl-tests' (the larger buffer,
:func:`pytimings.model.comm.message_bytes`), the collective the one ``Collective name`` names
(``_allgather_base``: all_gather); a kernel without them keeps bytes 0, collective and group
size -1 (unknown). Older traces carry only ``Input Dims`` on record_param_comms
(no group size, no collective): their sizes stay unknown.

The native scanner keeps the five values of each such kernel as one JSON text
("[name, in, out, dtype, group]", interned: a trace has few distinct ones); each distinct
text is decoded here once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from pytimings.arrays import unique
from pytimings.model.comm import collective_index, message_bytes

_GROUP_MAX = np.iinfo(np.int16).max  # ranks are int16 in the model


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _values(text: str) -> tuple[int, int, int]:
    """(bytes, collective, group size) of one kernel's args text."""
    try:
        name, n_in, n_out, dtype, group = json.loads(text)
    except ValueError:  # the scanner validated the JSON: not five values
        return 0, -1, -1
    if name is None:
        return 0, -1, -1
    nbytes = message_bytes(_count(n_in), _count(n_out), dtype if isinstance(dtype, str) else None)
    g = _count(group)
    return (
        nbytes,
        collective_index(name) if isinstance(name, str) else -1,
        g if g is not None and 0 < g <= _GROUP_MAX else -1,
    )


def comm_columns(args: npt.NDArray[np.int32], texts: Sequence[str]) -> dict[str, npt.NDArray[Any]]:
    """Per GPU row, from its args text id + 1 (0: none; ``texts`` by id): the message bytes
    (0 unknown), the collective (index into COLLECTIVES, -1 unknown) and the group size (-1
    unknown)."""
    ids = unique(args[args > 0])
    table = np.zeros((3, int(ids[-1]) + 1 if ids.size else 1), dtype=np.int64)
    table[1:, :] = -1
    for i in ids.tolist():
        table[:, i] = _values(texts[i - 1])
    return {
        "comm_bytes": table[0][args],
        "collective": table[1][args].astype(np.int8),
        "group_size": table[2][args].astype(np.int16),
    }
