import numpy as np
import numpy.typing as npt

_I64 = npt.NDArray[np.int64]
_I32 = npt.NDArray[np.int32]

def names_used(names: list[_I32], n_names: int) -> npt.NDArray[np.uint8]: ...
def thread_charges(
    starts: list[_I64],
    ends: list[_I64],
    kinds: list[npt.NDArray[np.int8] | None],
    names: list[_I32],
    threads: list[_I32],
    const_kind: npt.NDArray[np.int8],
    thread: int,
    only_kind: int,
    name_rank: _I32,
    q_s: _I64,
    q_e: _I64,
    q_id: _I64,
    n_names: int,
    untraced_kind: int,
    chunk_rows: int = ...,
    block_rows: int = ...,
    rows: list[_I64 | None] | None = ...,
) -> tuple[_I64, _I64, _I64]: ...
