from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

MASK_VALUE: int
MASK_NULL: int
MASK_ABSENT: int

def scan_table(
    buf: Buffer,
    page_size: int,
    usable_size: int,
    root_page: int,
    columns: list[int],
    kinds: bytes,
    rowid_alias: int,
) -> list[tuple[npt.NDArray[Any], bytes | None, npt.NDArray[np.uint8] | None]]: ...
