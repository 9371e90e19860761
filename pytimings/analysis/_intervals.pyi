from typing import Literal, overload

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]

NO_LAUNCH_NS: int

def union(starts: I64, ends: I64) -> tuple[I64, I64]: ...
def intersect(a_s: I64, a_e: I64, b_s: I64, b_e: I64) -> tuple[I64, I64]: ...
def difference(a_s: I64, a_e: I64, b_s: I64, b_e: I64) -> tuple[I64, I64]: ...
def overlap_lengths(q_s: I64, q_e: I64, u_s: I64, u_e: I64) -> I64: ...
def points_in_set(points: I64, u_s: I64, u_e: I64) -> npt.NDArray[np.uint8]: ...
def project(points: I64, values: I64, r_s: I64, r_e: I64) -> tuple[I64, I64]: ...
def union_by_class(
    order: I64, starts: I64, ends: I64, cls: npt.NDArray[np.int8]
) -> tuple[I64, I64, I64, I64, I64, I64]: ...
def first_per_start(order: I64, starts: I64, lstart: I64, corr: I64) -> I64: ...
def sweep(
    c_s: I64, c_e: I64, m_s: I64, m_e: I64, x_s: I64, x_e: I64
) -> tuple[I64, I64, npt.NDArray[np.int8]]: ...
@overload
def partition_windows(
    w_s: I64,
    w_e: I64,
    s_s: I64,
    s_e: I64,
    s_l: npt.NDArray[np.int8],
    k_op: I64,
    starts: I64,
    lstart: I64,
    want_gaps: Literal[False] = ...,
) -> I64: ...
@overload
def partition_windows(
    w_s: I64,
    w_e: I64,
    s_s: I64,
    s_e: I64,
    s_l: npt.NDArray[np.int8],
    k_op: I64,
    starts: I64,
    lstart: I64,
    want_gaps: Literal[True],
) -> tuple[I64, tuple[I64, I64, I64, I64, I64]]: ...
