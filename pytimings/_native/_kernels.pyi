import numpy as np
import numpy.typing as npt

def is_sorted_i64(a: npt.NDArray[np.int64]) -> bool: ...
def open_ranges(
    end: npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
    order: npt.NDArray[np.int64],
    group: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]: ...
def join_sorted(
    keys: npt.NDArray[np.int64],
    rows: npt.NDArray[np.int64] | None,
    q_key: npt.NDArray[np.int64],
    q_id: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], int]: ...
