import numpy as np
import numpy.typing as npt

_I64 = npt.NDArray[np.int64]
_I32 = npt.NDArray[np.int32]
_I8 = npt.NDArray[np.int8]
_U8 = npt.NDArray[np.uint8]

def innermost_rows(
    a_start: _I64,
    a_end: _I64,
    a_thread: _I32,
    a_keep: _U8 | None,
    q_start: _I64,
    q_end: _I64,
    q_thread: _I32,
    method: str = "auto",
) -> npt.NDArray[np.int32] | _I64: ...
def launching_rows(
    a_start: _I64,
    a_end: _I64,
    a_thread: _I32,
    a_keep: _U8 | None,
    q_start: _I64,
    q_end: _I64,
    q_thread: _I32,
    api_row: _I64,
    graph: _U8,
    no_launch: int,
    no_op: int,
    graph_code: int,
    parts: int = 1,
    split_min: int = 262144,
    method: str = "auto",
    a_id: _I64 | None = None,
    call_id: _I64 | None = None,
    space: _I32 | None = None,
) -> tuple[_I32 | _I64, _I8]: ...
def contains_point(
    a_start: _I64,
    a_end: _I64,
    a_thread: _I32,
    a_keep: _U8 | None,
    p_at: _I64,
    p_thread: _I32,
    p_keep: _U8 | None,
) -> _U8: ...
def names_present(name: _I32, n_names: int) -> _I64: ...
def window_index(
    start: _I64, keep: _U8 | None, ws: _I64, we: _I64, wid: _I64, out: _I32
) -> None: ...
def launcher_texts(
    sel: _U8,
    op_row: _I32 | _I64,
    name: _I32,
    args: _I32 | None,
    start: _I64,
    end: _I64,
    kind: _I8,
    copy_kind: _I8,
    op_name: _I32,
    memcpy_kind: int,
    dtod: int,
    parts: int = 1,
    split_min: int = 262144,
) -> tuple[_I64, _I32, _I64, _I64, npt.NDArray[np.bool_], _I64]: ...
def text_totals(
    rows: _I64,
    text: _I32,
    n_texts: int,
    start: _I64,
    end: _I64,
    kind: _I8,
    copy_kind: _I8,
    op_name: _I32,
    memcpy_kind: int,
    dtod: int,
) -> tuple[_I64, npt.NDArray[np.bool_], _I64]: ...
def op_categories(
    start: _I64,
    end: _I64,
    kind: _I8,
    name: _I32,
    sel: _U8,
    win: _I32 | None,
    n_win: int,
    text: _I32,
    text_cat: _I8,
    text_place: _I64,
    name_cat: _I8,
    reason: _I8,
    n_reasons: int,
    graph: _U8,
    memcpy_kind: int,
    memset_kind: int,
    memcpy_cat: int,
    memset_cat: int,
    n_cat: int,
    parts: int = 1,
    split_min: int = 262144,
) -> tuple[_I8, _I32 | _I64, npt.NDArray[np.int64], _I64, _I64, _I64, _I64]: ...
def busy_split(
    start: _I64,
    end: _I64,
    cat: _I8,
    order: _I64,
    n_cat: int,
    points: _I64,
    parts: int = 1,
    split_min: int = 262144,
) -> npt.NDArray[np.int64]: ...
