"""A columnar table: named, equal-length 1-D numpy arrays, with pandas/Arrow views.

Every table pytimings computes or ingests is one of these, so that each can be written
as CSV, Parquet or JSON and handed to pandas or Arrow without copies where possible.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

WRITE_FORMATS = ("csv", "parquet", "json")


class Table:
    """Columns of equal length, in a fixed order. Immutable by convention."""

    __slots__ = ("_cols",)

    def __init__(self, columns: Mapping[str, npt.ArrayLike]) -> None:
        cols = {name: np.asarray(col) for name, col in columns.items()}
        lengths = {len(c) for c in cols.values()}
        if len(lengths) > 1:
            raise ValueError(f"columns differ in length: { {k: len(v) for k, v in cols.items()} }")
        for name, col in cols.items():
            if col.ndim != 1:
                raise ValueError(f"column {name!r} is not one-dimensional")
        self._cols: dict[str, npt.NDArray[Any]] = cols

    @classmethod
    def empty(cls, schema: Mapping[str, npt.DTypeLike]) -> Table:
        return cls({name: np.empty(0, dtype=dt) for name, dt in schema.items()})

    def __len__(self) -> int:
        return len(next(iter(self._cols.values()))) if self._cols else 0

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        return self._cols[name]

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    @property
    def columns(self) -> list[str]:
        return list(self._cols)

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self._cols.values())

    def take(self, index: npt.ArrayLike) -> Table:
        """Rows selected by an integer index or a boolean mask."""
        idx = np.asarray(index)
        return Table({k: v[idx] for k, v in self._cols.items()})

    def with_columns(self, **columns: npt.ArrayLike) -> Table:
        return Table({**self._cols, **columns})

    def to_dict(self) -> dict[str, npt.NDArray[Any]]:
        return dict(self._cols)

    def to_pandas(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self._cols, copy=False)

    def to_arrow(self) -> pa.Table:
        import pyarrow as pa

        return pa.table({k: pa.array(v) for k, v in self._cols.items()})

    def to_records(self) -> list[dict[str, Any]]:
        """Rows as dicts of plain Python values (NaN becomes None), e.g. for JSON."""
        cols = []
        for c in self._cols.values():
            values = c.tolist()
            if c.dtype.kind == "f":
                values = [None if v != v else v for v in values]
            cols.append(values)
        return [dict(zip(self._cols, row, strict=True)) for row in zip(*cols, strict=True)]

    def write(self, path: str | os.PathLike[str], format: str | None = None) -> None:
        """Write as ``csv``, ``parquet`` or ``json`` (a list of row objects); the format
        defaults to the path's suffix. Raises ``UsageError`` for an unknown format."""
        from pytimings.errors import UsageError

        fmt = format or os.path.splitext(os.fspath(path))[1].lstrip(".").lower()
        if fmt not in WRITE_FORMATS:
            raise UsageError(
                f"{os.fspath(path)}: unknown table format {fmt!r}; "
                f"formats: {', '.join(WRITE_FORMATS)}"
            )
        from pytimings.fileout import writing

        if fmt == "json":
            doc = json.dumps(self.to_records(), allow_nan=False) + "\n"
            with writing(path) as f:
                f.write(doc.encode())
        elif fmt == "csv":
            import pyarrow.csv

            with writing(path) as f:
                pyarrow.csv.write_csv(self.to_arrow(), f)
        else:
            import pyarrow.parquet

            with writing(path) as f:
                pyarrow.parquet.write_table(self.to_arrow(), f)

    def __repr__(self) -> str:
        return f"Table({len(self)} rows: {', '.join(self._cols)})"
