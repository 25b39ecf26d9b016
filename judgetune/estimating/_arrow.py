"""The fast way in for large JSONL and Parquet files when pyarrow is installed (``judgetune[parquet]``): the file
parsed by Arrow and its columns taken whole, so that 8 systems x 100k rows are read in about a second.

Arrow takes only a file that ``judgetune.datasets``' reader would read the same, without a word: a regular file
(checked before any read, so a FIFO never blocks), no row past the per-row size limit, no repeated key (Arrow
refuses one), no nesting past the reader's depth limit, no byte-order mark or blank line; every row with a string
id (all distinct), a string system, a finite number or nothing as label, a number in (0, 1] or nothing as sampling
probability, and one kind of row (pointwise or pairwise). Anything else returns None and that reader reads the
file, naming each bad row with its line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from judgetune._files import open_regular
from judgetune.datasets import MAX_DEPTH, MAX_ROW_BYTES, parquet_module, stream_format
from judgetune.estimating._rows import PROBABILITY, Observations

__all__ = ["ArrowIds", "fast_observations", "fast_scores"]

_CHUNK = 1 << 24
_BOM = b"\xef\xbb\xbf"


class ArrowIds(Sequence[str]):
    """The ids of an Arrow column, turned into Python strings only when first read one by one (a join by id
    with another Arrow column needs none of them)."""

    def __init__(self, column: Any) -> None:
        self.column = column
        self._list: list[str] | None = None

    def __len__(self) -> int:
        return len(self.column)

    def __getitem__(self, index: Any) -> Any:
        if self._list is None:
            self._list = self.column.to_pylist()
        return self._list[index]


def _arrow() -> Any:
    try:
        import pyarrow
        import pyarrow.compute
        import pyarrow.json
    except ImportError:
        return None
    return pyarrow


def _shape(path: Path) -> tuple[int, int, bytes]:
    """The file's lines (a last one without a line break counted), its longest line in bytes (with its break) and
    its first bytes, read in chunks."""
    count, longest, run, head = 0, 0, 0, b""
    with open_regular(path, "data file") as handle:
        while chunk := handle.read(_CHUNK):
            head = head or chunk[:3]
            breaks = np.flatnonzero(np.frombuffer(chunk, dtype=np.uint8) == 10)
            if len(breaks):
                longest = max(longest, run + int(breaks[0]) + 1, int(np.diff(breaks).max(initial=0)))
                run = len(chunk) - int(breaks[-1]) - 1
            else:
                run += len(chunk)
            count += len(breaks)
    return count + (run > 0), max(longest, run), head


def _depth(kind: Any) -> int:
    """How many objects and arrays an Arrow type nests (the row's own object not counted)."""
    pa = _arrow()
    if pa.types.is_struct(kind):
        return 1 + max((_depth(kind.field(i).type) for i in range(kind.num_fields)), default=0)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return 1 + _depth(kind.value_type)
    return 0


def _table(path: Path) -> Any:
    """The file as an Arrow table; None when Arrow is missing, cannot read it, or would read it otherwise than
    ``judgetune.datasets`` does (see the module).

    Raises:
        DataValidationError: a FIFO, a device or a folder (never read); FileNotFoundError: no such file.
    """
    kind = stream_format(path)
    pa = _arrow()
    if pa is None or kind not in ("jsonl", "parquet"):
        return None
    try:
        if kind == "parquet":
            table = parquet_module().read_table(path)
        else:
            lines, longest, head = _shape(path)
            if longest > MAX_ROW_BYTES or head == _BOM:
                return None
            table = pa.json.read_json(path)
            if table.num_rows != lines:
                return None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError):
        return None
    if not table.num_rows or max((_depth(f.type) for f in table.schema), default=0) >= MAX_DEPTH:
        return None
    return table


def _column(table: Any, name: str) -> Any:
    """Column ``name``, else field ``name`` of the ``meta`` column; None when neither."""
    pa = _arrow()
    if name in table.column_names:
        return table.column(name)
    if "meta" in table.column_names and pa.types.is_struct(table.schema.field("meta").type):
        meta = table.schema.field("meta").type
        if meta.get_field_index(name) >= 0:
            return pa.compute.struct_field(table.column("meta"), name)
    return None


def _strings(column: Any) -> bool:
    """A string column without nulls or blank values."""
    pa = _arrow()
    if column is None or not pa.types.is_string(column.type) or column.null_count:
        return False
    return not pa.compute.any(pa.compute.equal(pa.compute.utf8_trim_whitespace(column), "")).as_py()


def _numbers(column: Any, rows: int) -> np.ndarray | None:
    """A numeric column as floats (nan for null, all nan when absent); None when not numeric or not finite (NaN
    too: the row reader refuses it, naming its row)."""
    pa = _arrow()
    if column is None:
        return np.full(rows, np.nan)
    if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type) or pa.types.is_null(column.type)):
        return None
    values = column.cast(pa.float64())
    if pa.compute.any(pa.compute.invert(pa.compute.is_finite(values))).as_py():
        return None
    return pa.compute.fill_null(values, np.nan).to_numpy()


def _codes(column: Any) -> tuple[list[str], np.ndarray]:
    """Codes in order of first appearance, and the names they stand for."""
    encoded = _arrow().compute.dictionary_encode(column).combine_chunks()
    return encoded.dictionary.to_pylist(), encoded.indices.to_numpy(zero_copy_only=False).astype(int)


def _inputs(table: Any) -> np.ndarray | None:
    for name in ("group", "question"):
        column = table.column(name) if name in table.column_names else None
        if column is not None and not column.null_count and _arrow().types.is_string(column.type):
            return _codes(column)[1]
        if column is not None:
            return None
    return np.full(table.num_rows, -1)


def fast_observations(path: str | Path, by: Sequence[str]) -> Observations | None:
    """The rows of a regular JSONL or Parquet file read whole by Arrow (see the module); None for the row-by-row reader."""
    path = Path(path)
    table = _table(path)
    if table is None:
        return None
    pa, rows = _arrow(), table.num_rows
    pairwise = "answer_b" in table.column_names
    systems = [_column(table, b) for b in by]
    ids = table.column("id") if "id" in table.column_names else None
    if pairwise != (len(by) == 2) or (pairwise and table.column("answer_b").null_count) or not _strings(ids) \
            or not all(_strings(s) for s in systems) or pa.compute.count_distinct(ids).as_py() != rows:
        return None
    labels = _numbers(_column(table, "preference" if pairwise else "label"), rows)
    probabilities = _numbers(_column(table, PROBABILITY), rows)
    if probabilities is not None and np.any((probabilities <= 0) | (probabilities > 1)):  # nan compares False
        probabilities = None  # the row reader names each probability off (0, 1]
    inputs = _inputs(table)
    if labels is None or probabilities is None or inputs is None:
        return None
    names, first = _codes(pa.chunked_array(systems[0].chunks + (systems[1].chunks if pairwise else [])))
    second = first[rows:] if pairwise else None
    return Observations(str(path), ArrowIds(ids), np.arange(1, rows + 1), names, first[:rows], second, inputs,
                        labels, probabilities, np.full(rows, np.nan))


def fast_scores(obs: Observations, path: str | Path) -> np.ndarray | None:
    """Every row's score from a regular JSONL or Parquet score file holding exactly the rows' ids, each once; None for the
    row-by-row join (which names whatever is wrong)."""
    path = Path(path)
    table = _table(path)
    if table is None or "id" not in table.column_names or table.num_rows != len(obs):
        return None
    pa = _arrow()
    ids = table.column("id")
    if not pa.types.is_string(ids.type) or ids.null_count:
        return None
    known = obs.ids.column if isinstance(obs.ids, ArrowIds) else pa.array(list(obs.ids), type=pa.string())
    where = pa.compute.index_in(ids, value_set=known)
    if where.null_count or pa.compute.count_distinct(where).as_py() != len(obs):
        return None
    values = _numbers(_column(table, "score"), table.num_rows)
    if values is None:
        return None
    scores = np.full(len(obs), np.nan)
    scores[where.to_numpy(zero_copy_only=False).astype(int)] = values
    return scores
