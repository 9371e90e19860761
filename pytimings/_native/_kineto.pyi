from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

NO_VALUE: int

class RowError(ValueError):
    index: int
    def __init__(self, message: str, index: int) -> None: ...

def exact_ns_fast(ts: bytes, dur: bytes | None) -> tuple[int, int] | None: ...
def event_rows(
    evs: list[Any],
    cat: int,
    ids: dict[str, int],
    strings: list[str],
    keys: dict[Any, int],
    exact: Callable[[bytes, bytes | None], tuple[int, int]],
    index: npt.NDArray[np.int64],
) -> tuple[dict[str, npt.NDArray[Any]], dict[str, int]]: ...
def flow_rows(
    evs: list[Any], keys: dict[Any, int], exact: Callable[[bytes, bytes | None], tuple[int, int]]
) -> tuple[dict[str, npt.NDArray[Any]], dict[str, int]]: ...
