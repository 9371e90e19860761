import numpy as np
import numpy.typing as npt

def is_sorted_i64(a: npt.NDArray[np.int64]) -> bool: ...
