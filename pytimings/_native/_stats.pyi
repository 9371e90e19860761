import numpy as np
import numpy.typing as npt

def grouped_stats_sorted(
    keys: npt.NDArray[np.int64],
    values: npt.NDArray[np.int64],
    qs: npt.NDArray[np.float64],
) -> tuple[
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.int64],
    npt.NDArray[np.float64],
]: ...
