from typing import Any

import numpy as np
import numpy.typing as npt

_I64 = npt.NDArray[np.int64]
_I32 = npt.NDArray[np.int32]

def innermost_charges(
    start: _I64,
    end: _I64,
    kind: npt.NDArray[np.int8],
    name: _I32,
    name_rank: _I32,
    q_s: _I64,
    q_e: _I64,
    q_id: _I64,
    n_names: int,
    untraced_kind: int,
) -> tuple[_I64, _I64, _I64]: ...
def touching(
    start: _I64, end: _I64, thread: _I32, u_off: _I64, u_s: _I64, u_e: _I64
) -> npt.NDArray[np.uint8]: ...
def sorted_rows(
    starts: list[_I64],
    ends: list[_I64],
    kinds: list[npt.NDArray[np.int8] | None],
    names: list[_I32],
    keeps: list[npt.NDArray[Any] | None],
    const_kind: npt.NDArray[np.int8],
) -> tuple[_I64, _I64, npt.NDArray[np.int8], _I32]: ...
