"""Rows of a data file one at a time (JSONL, CSV, TSV, Parquet), validated like ``read_examples`` reads them,
for work that must not hold the file in memory (scoring millions of items).

``iter_examples`` yields ``(line, Example)`` and appends every bad row's problem to a list the caller
holds (``file:line: field: expected ..., found ...``); it does not check that ids are unique (the
caller does, with constant memory per row). In a Parquet file the "line" is the row number, from 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from judgetune._files import FileKindError, open_regular
from judgetune.datasets._mapping import FieldMap
from judgetune.datasets._readers import _FORMATS, _table_rows, example_from_record, jsonl_rows
from judgetune.datasets._schema import Example
from judgetune.errors import DataValidationError, JudgetuneError

__all__ = ["STREAM_FORMATS", "iter_examples", "iter_records", "parquet_module", "stream_format"]

STREAM_FORMATS = {**_FORMATS, ".parquet": "parquet"}
PARQUET_BATCH = 4096  # rows per Parquet record batch read


def stream_format(path: str | Path) -> str:
    """``jsonl``, ``csv``, ``tsv`` or ``parquet`` from the suffix of an existing regular file.

    Raises:
        DataValidationError: an unknown suffix, or a path that is not a regular file (a folder, a device, a FIFO).
        FileNotFoundError: no such file.
    """
    path = Path(path)
    kind = STREAM_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise DataValidationError([f"{path}: expected a .jsonl, .csv, .tsv or .parquet file, found suffix "
                                   f"{path.suffix!r}"])
    try:
        open_regular(path, "data file").close()  # the one check every input gets (devices, FIFOs, loops)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such data file") from None
    except FileKindError as err:
        raise DataValidationError([str(err)]) from None
    return kind


def iter_records(path: str | Path, problems: list[str], *, mapping: FieldMap | None = None,
                 require_label: bool = False) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line, parsed row)`` of a data file, one at a time; problems of the file's form are appended."""
    path = Path(path)
    kind = stream_format(path)
    if kind == "jsonl":
        yield from jsonl_rows(path, problems)
    elif kind == "parquet":
        yield from _parquet_rows(path, problems)
    else:
        yield from _table_rows(path, kind, problems, mapping or FieldMap(), require_label=require_label)


def iter_examples(path: str | Path, problems: list[str], *, fields: dict[str, str] | None = None,
                  label: str | None = None, require_label: bool = False) -> Iterator[tuple[int, Example]]:
    """``(line, Example)`` of every valid row, one at a time, ids as ``read_examples`` gives them
    (``STEM:LINE`` when a row has none); each bad row's problem is appended to ``problems``."""
    path = Path(path)
    mapping = FieldMap(fields or {}, label)
    names = mapping.names()
    for line, record in iter_records(path, problems, mapping=mapping, require_label=require_label):
        if mapping:
            record, meta_problems = mapping.apply(record)
            problems.extend(f"{path}:{line}: {p}" for p in meta_problems)
        example = example_from_record(record, where=f"{path}:{line}", default_id=f"{path.stem}:{line}",
                                      require_label=require_label, problems=problems, names=names)
        if example is not None:
            yield line, example


def _parquet_rows(path: Path, problems: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Rows of a Parquet file as JSON-like dicts (a null cell left out), read one record batch at a time."""
    pq = parquet_module()
    try:
        handle = pq.ParquetFile(path)
    except Exception as err:  # pyarrow raises ArrowInvalid / OSError for a file that is not Parquet
        problems.append(f"{path}: file: expected a Parquet file, found {type(err).__name__}: {str(err)[:200]}")
        return
    line = 0
    with handle:
        for batch in handle.iter_batches(batch_size=PARQUET_BATCH):
            for row in batch.to_pylist():
                line += 1
                yield line, {str(k): v for k, v in row.items() if v is not None}


def parquet_module() -> Any:
    """``pyarrow.parquet``, or a one-line error naming the extra that installs it."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise JudgetuneError("Parquet files need pyarrow: pip install 'judgetune[parquet]'") from None
    return pq
