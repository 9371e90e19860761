import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

CLASS_KERNEL: int
CLASS_MEMCPY: int
CLASS_MEMSET: int
CLASS_RUNTIME: int
CLASS_DRIVER: int
CLASS_SYNC: int
CLASS_ANNOTATION: int
CLASS_GPU_ANNOTATION: int
CLASS_CPU_OP: int
CLASS_PYTHON: int
CLASS_FLOW: int
CLASS_NOCAT: int
CLASS_OTHER: int
N_CLASS: int

def utf8_bad(data: bytes) -> int: ...

class SplitError(ValueError):
    offset: int
    def __init__(self, message: str, offset: int) -> None: ...

@disjoint_base
class Splitter:
    n_elements: int
    doc_base: int
    @property
    def finished(self) -> bool: ...
    @property
    def saw_events(self) -> bool: ...
    @property
    def skeleton(self) -> bytes: ...
    @property
    def skeleton_map(self) -> list[tuple[int, int]]: ...
    def feed(self, buf: bytes, final: bool) -> int: ...
    def serve(self) -> None: ...
    def submit(self, buf: bytes, final: bool) -> None: ...
    def result(self) -> int: ...
    def close(self) -> None: ...
    def take(
        self, cls: int
    ) -> tuple[bytes, npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
    def counts_of_other(self) -> dict[bytes, int]: ...
    def pending(self, cls: int) -> int: ...
