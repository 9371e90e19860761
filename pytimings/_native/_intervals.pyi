from typing import Literal, overload

import numpy as np
import numpy.typing as npt

_I64 = npt.NDArray[np.int64]

NO_LAUNCH_NS: int
LAUNCH_PICKUP_NS: int
__test__: dict[str, str]  # added by Cython

def union(starts: _I64, ends: _I64) -> tuple[_I64, _I64]: ...
def intersect(a_s: _I64, a_e: _I64, b_s: _I64, b_e: _I64) -> tuple[_I64, _I64]: ...
def overlap_lengths(q_s: _I64, q_e: _I64, u_s: _I64, u_e: _I64) -> _I64: ...
def points_in_set(points: _I64, u_s: _I64, u_e: _I64) -> npt.NDArray[np.uint8]: ...
def project(
    points: _I64, starts: _I64, ends: _I64, r_s: _I64, r_e: _I64
) -> tuple[_I64, _I64, _I64, _I64]: ...
def project_threads(
    api_row: _I64,
    api_thread: npt.NDArray[np.int32],
    api_start: _I64,
    op_start: _I64,
    op_end: _I64,
    t_slot: npt.NDArray[np.int32],
    b: _I64,
    b_off: _I64,
    q_lo: _I64,
    q_hi: _I64,
) -> tuple[_I64, _I64, _I64]: ...
def union_by_class(
    order: _I64, starts: _I64, ends: _I64, cls: npt.NDArray[np.int8]
) -> tuple[_I64, _I64, _I64, _I64, _I64, _I64]: ...
def first_per_start(order: _I64, starts: _I64, lstart: _I64, corr: _I64) -> _I64: ...
def sweep(
    c_s: _I64, c_e: _I64, m_s: _I64, m_e: _I64, x_s: _I64, x_e: _I64
) -> tuple[_I64, _I64, npt.NDArray[np.int8]]: ...
@overload
def partition_windows(
    w_s: _I64,
    w_e: _I64,
    s_s: _I64,
    s_e: _I64,
    s_l: npt.NDArray[np.int8],
    k_op: _I64,
    starts: _I64,
    lstart: _I64,
    lend: _I64,
    want_gaps: Literal[False] = ...,
) -> _I64: ...
@overload
def partition_windows(
    w_s: _I64,
    w_e: _I64,
    s_s: _I64,
    s_e: _I64,
    s_l: npt.NDArray[np.int8],
    k_op: _I64,
    starts: _I64,
    lstart: _I64,
    lend: _I64,
    want_gaps: Literal[True],
) -> tuple[_I64, tuple[_I64, _I64, _I64, _I64, _I64]]: ...
