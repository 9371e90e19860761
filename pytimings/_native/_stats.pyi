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
def group_sums(
    group: npt.NDArray[np.int64], values: npt.NDArray[np.int64], n: int
) -> npt.NDArray[np.int64]: ...
def factorize(
    keys: npt.NDArray[np.int64], inverse: bool = True
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
def distinct_counts(
    item: npt.NDArray[np.int64], group: npt.NDArray[np.int64], n_items: int, n_groups: int
) -> npt.NDArray[np.int64]: ...
