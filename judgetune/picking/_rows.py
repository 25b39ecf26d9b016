"""The rows of a data file as they are written (JSONL lines, CSV/TSV cells, Parquet rows), so that picked items
are written back in the input's own format, columns and values untouched but for the columns a pick adds (an id,
a sampling probability).

Rows are read in the order, and with the blank-line rules, of ``judgetune.datasets``' reader: the i-th row here
is the i-th row there.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from judgetune._files import atomic_write, open_regular
from judgetune.datasets import parquet_module
from judgetune.errors import JudgetuneError, shown

__all__ = ["FORMATS", "RawRows", "read_rows"]

FORMATS = {".jsonl": "jsonl", ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet"}
Columns = Mapping[str, Sequence[Any]]  # column -> one value per picked row, in the order of the indices


class RawRows:
    """A file's header (CSV/TSV) and rows, each as its original text (JSONL) or cells (CSV/TSV); a Parquet file
    as its Arrow table."""

    def __init__(self, path: Path, kind: str, header: list[str] | None, rows: Any):
        self.path, self.kind, self.header, self.rows = path, kind, header, rows

    def __len__(self) -> int:
        return len(self.rows)

    def write(self, out: str | Path, indices: Sequence[int], *, columns: Columns | None = None,
              meta: Columns | None = None) -> None:
        """The rows at ``indices`` (in that order) into ``out``, in this file's format. ``columns`` are set on
        each row (a JSONL key, a CSV/TSV/Parquet column, replaced when the file has it); ``meta`` under the row's
        ``meta`` in JSONL, as columns in the flat formats."""
        indices = [int(i) for i in indices]
        added = {**(columns or {}), **({} if self.kind == "jsonl" else (meta or {}))}
        if self.kind == "parquet":
            table = self.rows.take(indices)
            for name, values in added.items():
                if name in table.column_names:
                    table = table.drop_columns([name])
                table = table.append_column(name, [list(values)])
            with atomic_write(out, "wb", encoding=None) as handle:
                parquet_module().write_table(table, handle)
            return
        with atomic_write(out) as handle:
            if self.kind == "jsonl":
                handle.writelines(_jsonl_row(self.rows[i], k, columns or {}, meta or {}) for k, i in enumerate(indices))
                return
            keep = [c for c, name in enumerate(self.header) if name not in added]
            writer = csv.writer(handle, lineterminator="\n", **_dialect(self.kind))
            writer.writerow([self.header[c] for c in keep] + list(added))
            writer.writerows([self.rows[i][c] for c in keep] + [_cell(v[k]) for v in added.values()]
                             for k, i in enumerate(indices))


def _jsonl_row(text: str, k: int, columns: Columns, meta: Columns) -> str:
    if not columns and not meta:
        return text
    row = json.loads(text)  # a row the data reader accepted
    row.update({name: values[k] for name, values in columns.items()})
    if meta:
        row["meta"] = {**(row.get("meta") if isinstance(row.get("meta"), dict) else {}),
                       **{name: values[k] for name, values in meta.items()}}
    return json.dumps(row, ensure_ascii=False) + "\n"


def _cell(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _dialect(kind: str) -> dict:
    return {"delimiter": ","} if kind == "csv" else {"delimiter": "\t", "quoting": csv.QUOTE_NONE, "escapechar": None}


def read_rows(path: str | Path) -> RawRows:
    """The rows of a JSONL, CSV, TSV or Parquet file (already validated by the data reader).

    Raises:
        JudgetuneError: a suffix that is no data file's.
    """
    path = Path(path)
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise JudgetuneError(f"{shown(path)}: expected a .jsonl, .csv, .tsv or .parquet file, found suffix "
                             f"{shown(path.suffix)!r}")
    if kind == "parquet":
        return RawRows(path, kind, None, parquet_module().read_table(path))
    newline = "\n" if kind == "jsonl" else ""  # JSONL rows end at a line feed alone, as the data reader's do
    with io.TextIOWrapper(open_regular(path, "data file"), encoding="utf-8-sig", newline=newline) as handle:
        if kind == "jsonl":
            rows = [line if line.endswith("\n") else line + "\n" for line in handle if line.strip()]
            return RawRows(path, kind, None, rows)
        reader = csv.reader(handle, **_dialect(kind), **({"strict": True} if kind == "csv" else {}))
        header = next(reader, None) or []
        return RawRows(path, kind, [h.strip() for h in header], [cells for cells in reader if cells])
