"""The rows of a data file as they are written (JSONL lines, CSV/TSV cells), so that picked items are
written back in the input's own format, columns and values untouched.

Rows are read in the order, and with the blank-line rules, of ``judgetune.datasets.read_examples``:
the i-th row here is the i-th Example there.
"""

from __future__ import annotations

import csv
from pathlib import Path

from judgetune._files import atomic_write
from judgetune.errors import JudgetuneError

__all__ = ["FORMATS", "RawRows", "read_rows"]

FORMATS = {".jsonl": "jsonl", ".csv": "csv", ".tsv": "tsv"}


class RawRows:
    """A file's header (CSV/TSV) and rows, each as its original text (JSONL) or cells (CSV/TSV)."""

    def __init__(self, path: Path, kind: str, header: list[str] | None, rows: list):
        self.path, self.kind, self.header, self.rows = path, kind, header, rows

    def __len__(self) -> int:
        return len(self.rows)

    def write(self, out: str | Path, indices: list[int]) -> None:
        """The rows at ``indices`` (in that order) into ``out``, in this file's format."""
        with atomic_write(out) as handle:
            if self.kind == "jsonl":
                handle.write("".join(self.rows[i] for i in indices))
                return
            dialect = _dialect(self.kind)
            writer = csv.writer(handle, lineterminator="\n", **dialect)
            writer.writerow(self.header)
            writer.writerows(self.rows[i] for i in indices)


def _dialect(kind: str) -> dict:
    return {"delimiter": ","} if kind == "csv" else {"delimiter": "\t", "quoting": csv.QUOTE_NONE, "escapechar": None}


def read_rows(path: str | Path) -> RawRows:
    """The rows of a JSONL, CSV or TSV file (already validated by ``read_examples``).

    Raises:
        JudgetuneError: a suffix that is no data file's.
    """
    path = Path(path)
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise JudgetuneError(f"{path}: expected a .jsonl, .csv or .tsv file, found suffix {path.suffix!r}")
    if kind == "jsonl":
        with path.open(encoding="utf-8-sig") as handle:
            rows = [line if line.endswith("\n") else line + "\n" for line in handle if line.strip()]
        return RawRows(path, kind, None, rows)
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.reader(handle, **_dialect(kind), **({"strict": True} if kind == "csv" else {}))
        header = next(reader, None) or []
        rows = [cells for cells in reader if cells]
    return RawRows(path, kind, [h.strip() for h in header], rows)
