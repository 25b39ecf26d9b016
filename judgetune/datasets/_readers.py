"""Read Examples from JSONL, CSV and TSV files, validating every row.

Every problem in a file is collected and raised at once as a DataValidationError, each as
``file:line: field: expected ..., found ...``. Nothing is dropped, defaulted to zero or coerced:
a label must be a number in JSONL and a cell that parses as one in CSV/TSV.
"""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import jsonlines
from pydantic import ValidationError

from judgetune._files import FileKindError, atomic_write, open_regular
from judgetune.datasets._json import parse_json
from judgetune.datasets._mapping import FieldMap
from judgetune.datasets._schema import Example, ExampleRow, Scale, format_number
from judgetune.datasets._validation import Cell, describe, problems_from, unwritable
from judgetune.errors import DataValidationError

FIELDS = ("id", "question", "answer", "references", "reference", "context", "answer_b", "preference",
          "label", "group", "meta")
_FORMATS = {".jsonl": "jsonl", ".csv": "csv", ".tsv": "tsv"}
MAX_ROW_BYTES = 1 << 20  # the per-item size limit: a JSONL row of at most 1 MiB, a CSV/TSV line of 1 Mi characters
log = logging.getLogger(__name__)


def read_examples(path: str | Path, *, require_label: bool = True, scale: Scale | None = None,
                  fields: dict[str, str] | None = None, label: str | None = None) -> list[Example]:
    """Read and validate a JSONL, CSV or TSV file of Examples.

    Args:
        path: the file; its suffix (``.jsonl``, ``.csv``, ``.tsv``) selects the format.
        require_label: whether each row must carry its human label (``preference`` for rows with
            ``answer_b``, else ``label``). Scoring new data does not need labels.
        scale: when given, every label must lie on it.
        fields: Example field -> source column (``{"answer": "summary"}``), for a file with its own
            column names; see :class:`FieldMap` for what happens to the other columns.
        label: the column holding the human score; without ``require_label`` the file may lack it.

    Raises:
        DataValidationError: listing every bad row of the file.
        FileNotFoundError: the file does not exist.

    Example:
        >>> examples = read_examples("pairs.jsonl", scale=Scale(0, 5))  # doctest: +SKIP
        >>> rated = read_examples("summeval.csv", fields={"question": "article", "answer": "summary"},
        ...                       label="coherence")  # doctest: +SKIP
    """
    mapping = FieldMap(fields or {}, label)
    return [example for _, example in _numbered_examples(path, require_label=require_label, scale=scale,
                                                         mapping=mapping)]


def read_labeled(path: str | Path, *, scale: Scale | None = None, fields: dict[str, str] | None = None,
                 label: str | None = None) -> tuple[list[Example], tuple[float, float]]:
    """The labeled Examples of a file and the human scale they are on.

    With ``scale`` every label must lie on it (an error names each line that does not). Without it
    the scale is the labels' range, unless a label stands isolated far outside the others (50 among
    labels 1-5: on 8 rows or more, the gap to the rest exceeds three times the rest's range, and
    at most 1% of the rows, or 2, carry it), which is refused with its line
    rather than stretching the scale; state the scale (``--scale``) when such a label is right.
    A file mixing pairwise rows (``preference``) with pointwise rows (``label``) is refused: the
    two are on different scales.

    Raises:
        DataValidationError: every problem at once.
    """
    path = Path(path)
    rows = _numbered_examples(path, require_label=True, scale=scale, mapping=FieldMap(fields or {}, label))
    pairwise = [line for line, e in rows if e.answer_b is not None]
    if pairwise and len(pairwise) < len(rows):
        pointwise = next(line for line, e in rows if e.answer_b is None)
        raise DataValidationError([f"{path}:{pointwise}: label: expected every row of a file to be pointwise (label) "
                                   f"or every row pairwise (answer_b, preference), found both (pairwise on line "
                                   f"{pairwise[0]}); a preference and a label are on different scales: split the file"])
    if scale is not None:
        return [e for _, e in rows], (float(scale.low), float(scale.high))
    values = sorted({e.judgment for _, e in rows})
    if len(values) < 2:
        raise DataValidationError([f"{path}: {label or 'label'}: expected at least two distinct human labels to "
                                   f"define a scale, found {len(values)}; state the scale with --scale LOW-HIGH"])
    problems = []
    for value, rest in ((values[-1], values[:-1]), (values[0], values[1:])):
        span, gap = rest[-1] - rest[0], min(abs(value - rest[0]), abs(value - rest[-1]))
        if len(rest) >= 2 and len(rows) >= 8 and gap > 3 * span:
            lines = [line for line, e in rows if e.judgment == value]
            if len(lines) <= max(2, len(rows) // 100):
                name = "preference" if pairwise else "label"
                problems += [f"{path}:{line}: {name}: expected a label near the others ({format_number(rest[0])} to "
                             f"{format_number(rest[-1])}), found {format_number(value)}, isolated far outside them; "
                             "fix it, or state the scale with --scale LOW-HIGH if it is right" for line in lines]
    if problems:
        raise DataValidationError(problems)
    return [e for _, e in rows], (float(values[0]), float(values[-1]))


def _numbered_examples(path: str | Path, *, require_label: bool, scale: Scale | None,
                       mapping: FieldMap | None = None) -> list[tuple[int, Example]]:
    mapping = mapping or FieldMap()
    path = Path(path)
    kind = _FORMATS.get(path.suffix.lower())
    if kind is None:
        raise DataValidationError([f"{path}: expected a .jsonl, .csv or .tsv file, found suffix {path.suffix!r}"])
    check_regular(path)
    problems: list[str] = []
    rows = (jsonl_rows(path, problems) if kind == "jsonl"
            else _table_rows(path, kind, problems, mapping, require_label=require_label))
    examples: list[tuple[int, Example]] = []
    seen: dict[str, int] = {}
    names = mapping.names()
    to_meta: dict[str, None] = {}
    labels_read, rows_read, first_columns = 0, 0, []  # rows holding the --label column; rows; the first's columns
    for line, record in rows:
        labels_read += mapping.label in record
        rows_read += 1
        first_columns = first_columns or [c for c in record if c != "meta"]
        if mapping:
            to_meta.update(dict.fromkeys(mapping.extra_columns(list(record))))
            record, meta_problems = mapping.apply(record)
            problems.extend(f"{path}:{line}: {p}" for p in meta_problems)
        example = example_from_record(record, where=f"{path}:{line}", default_id=f"{path.stem}:{line}",
                                      require_label=require_label, scale=scale, problems=problems, names=names)
        if example is None:
            continue
        if example.id in seen:
            problems.append(f"{path}:{line}: id: expected a unique id, found {example.id!r} "
                            f"already used on line {seen[example.id]}")
            continue
        seen[example.id] = line
        examples.append((line, example))
    if not examples and not problems:
        problems.append(f"{path}: expected at least one row, found none")
    unlabeled = [p for p in problems if p.endswith(_NO_LABEL)]
    if unlabeled and len(unlabeled) == rows_read:  # no row has a label: one line, the column, not one per row
        problems = [p for p in problems if not p.endswith(_NO_LABEL)]
        column = unlabeled[0][:-len(_NO_LABEL) - 2].rsplit(": ", 1)[-1]  # label, preference, or the mapped column
        problems.insert(0, f"{path}: {column}: expected a column of human labels, found none in any row (columns "
                           f"of the first row: {', '.join(first_columns)}); name yours with --label COLUMN")
    if problems:
        raise DataValidationError(problems)
    if to_meta:
        log.info("%s: column(s) %s not mapped to an Example field: kept under meta", path, ", ".join(to_meta))
    passed_over = [c for c in ("label", "preference") if c in to_meta]
    if mapping.label is not None and not labels_read and passed_over:  # a mistyped --label, most likely
        log.warning("warning: --label %s: no row of %s has a column %r, so every row is unlabeled; its column %r is "
                    "kept under meta, not read as the label (drop --label, or name that column)", mapping.label,
                    path, mapping.label, passed_over[0])
    return examples


def check_regular(path: Path, what: str = "data file") -> None:
    """Refuse at once what is no regular file (a folder, a device, a FIFO), each named as what it is.

    Raises:
        FileNotFoundError: no such file.
        DataValidationError: a folder, device, FIFO or socket.
    """
    try:
        open_regular(path, what).close()
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such {what}") from None
    except FileKindError as err:
        raise DataValidationError([str(err)]) from None


def write_examples(path: str | Path, examples: Iterable[Example]) -> None:
    """Write Examples as JSONL that ``read_examples`` reads back unchanged."""
    with atomic_write(path) as handle, jsonlines.Writer(handle) as writer:
        writer.write_all(e.to_dict() for e in examples)


def jsonl_rows(path: Path, problems: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    # Parsed line by line (not with jsonlines.Reader) to know the line number of every row.
    with open_regular(path, "data file") as handle:
        for line, raw in enumerate(_bounded_lines(handle), 1):
            if raw is None:
                problems.append(f"{path}:{line}: row: expected at most {MAX_ROW_BYTES:,} bytes (the per-item size "
                                "limit), found a longer row; shorten its texts")
                continue
            if line == 1 and raw.startswith(_UTF16_MARKS):  # one line, not one per row of garbled text
                problems.append(_utf16_problem(path))
                return
            try:
                text = raw.decode("utf-8-sig" if line == 1 else "utf-8")  # Excel starts with a BOM
            except UnicodeDecodeError as err:
                problems.append(f"{path}:{line}: row: expected UTF-8 text, found undecodable bytes ({err.reason})")
                continue
            if not text.strip():  # a blank line is not a row
                continue
            # without its line break: a row cut short would otherwise be reported on the next line
            value, problem = parse_json(text.rstrip("\r\n"), where=str(path), line=line, what="a JSON object")
            if problem:
                problems.append(problem)
                continue
            if not isinstance(value, dict):
                problems.append(f"{path}:{line}: row: expected a JSON object, found {_kind(value)}")
                continue
            yield line, value


def _bounded_lines(handle: BinaryIO) -> Iterator[bytes | None]:
    """The file's lines; None for a line longer than ``MAX_ROW_BYTES``, which is skipped without being held
    in memory (reading is bounded by the limit, whatever the file)."""
    while True:
        raw = handle.readline(MAX_ROW_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_ROW_BYTES and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = handle.readline(1 << 20)
            yield None
            continue
        yield raw


class _RowTooLong(Exception):
    pass


def _bounded_text_lines(handle) -> Iterator[str]:
    """The lines of a text file, stopping with _RowTooLong at a line longer than ``MAX_ROW_BYTES`` characters
    (never read whole)."""
    while True:
        line = handle.readline(MAX_ROW_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_ROW_BYTES and not line.endswith(("\n", "\r")):
            raise _RowTooLong
        yield line


def _header_problems(path: Path, header: list[str], kind: str, mapping: FieldMap, require_label: bool,
                     problems: list[str]) -> bool:
    """Whether the header is refused (a mapped column absent, an unknown or repeated column); the problems are added."""
    unknown = [] if mapping else [h for h in header if h not in FIELDS or h == "meta"]
    absent = [(t, c) for t, c in mapping.targets.items()
              if c not in header and (require_label or t not in ("label", "preference"))]
    hint = delimiter_hint(header, kind)
    if absent:
        problems.extend(f"{path}:1: header: expected a column {c!r} (mapped to {t}), found columns "
                        f"{', '.join(header)}{hint}" for t, c in absent)
        return True
    if unknown:
        cased = [h for h in unknown if h.strip().lower() in FIELDS]
        hint = hint[2:] or (f"names are lower case: {', '.join(repr(h.strip().lower()) for h in cased)}" if cased else
                            "an empty column name: a comma at the end of the header?" if "" in unknown else
                            "map your columns with --field FIELD=COLUMN and --label COLUMN")
        problems.append(f"{path}:1: header: expected columns among {', '.join(f for f in FIELDS if f != 'meta')}"
                        f", found unknown column(s) {', '.join(map(repr, unknown))}; {hint}")
        return True
    twice = sorted({h for h in header if header.count(h) > 1})
    if twice:
        problems.append(f"{path}:1: header: expected each column once, found {', '.join(map(repr, twice))} "
                        "more than once")
        return True
    return False


def _table_rows(path: Path, kind: str, problems: list[str], mapping: FieldMap | None = None, *,
                require_label: bool = True) -> Iterator[tuple[int, dict[str, Any]]]:
    """CSV is read as RFC 4180 quotes it (strictly: a stray quote is an error, never a merged row);
    TSV carries no quoting at all (a quote is a character), so a quote cannot join lines. Every mapped
    column must be in the header, but for the human score's when labels are not required."""
    mapping = mapping or FieldMap()
    dialect = {"delimiter": ",", "strict": True} if kind == "csv" else {"delimiter": "\t", "quoting": csv.QUOTE_NONE}
    try:
        with io.TextIOWrapper(open_regular(path, "data file"), encoding="utf-8-sig", newline="") as handle:  # BOM
            reader = csv.reader(_bounded_text_lines(handle), **dialect)
            try:
                header = next(reader, None)
            except _RowTooLong:
                problems.append(f"{path}:1: header: expected at most {MAX_ROW_BYTES:,} characters, found a longer line")
                return
            if header is None:
                return
            header = [h.strip() for h in header]
            if _header_problems(path, header, kind, mapping, require_label, problems):
                return
            start = reader.line_num + 1
            while True:
                try:
                    cells = next(reader)
                except StopIteration:
                    break
                except _RowTooLong:  # a line past the per-item limit: the rest of the file is not read
                    problems.append(f"{path}:{start}: row: expected at most {MAX_ROW_BYTES:,} characters (the per-item "
                                    "size limit), found a longer row; the rest of the file is not read")
                    return
                except csv.Error as err:
                    if "field limit" in str(err):  # csv's own bound on a quoted cell
                        problems.append(f"{path}:{start}: row: expected cells of at most {csv.field_size_limit():,} "
                                        "characters (the per-item size limit), found a longer one; the rest of the "
                                        "file is not read")
                        return
                    problems.append(f"{path}:{start}: row: expected well-formed CSV (a quoted cell ends with a quote "
                                    f"followed by a comma or the line end), found {err}")
                    return
                line, start = start, reader.line_num + 1
                if not cells:  # a blank line is not a row
                    continue
                if sum(map(len, cells)) > MAX_ROW_BYTES:  # quoted cells spanning many lines
                    problems.append(f"{path}:{line}: row: expected at most {MAX_ROW_BYTES:,} characters (the per-item "
                                    "size limit), found a longer row; shorten its texts")
                    continue
                if len(cells) != len(header):
                    problems.append(f"{path}:{line}: row: expected {len(header)} {kind.upper()} cells, "
                                    f"found {len(cells)}")
                    continue
                quoted = [h for h, c in zip(header, cells) if kind == "tsv" and _looks_quoted(c)]
                if quoted:
                    problems.append(f"{path}:{line}: {quoted[0]}: expected plain TSV text (TSV has no quoting), found "
                                    f"a quoted cell {describe(cells[header.index(quoted[0])])}; remove the quotes "
                                    "or write CSV or JSONL")
                    continue
                yield line, {h: Cell(c) for h, c in zip(header, cells) if c.strip() != ""}
    except UnicodeDecodeError as err:
        problems.append(_undecodable(path, err))


_NO_LABEL = "expected the human label (a number), found nothing"
_UTF16_MARKS = (b"\xff\xfe", b"\xfe\xff")  # the byte-order marks of UTF-16 (Windows' "Unicode" text)


def _utf16_problem(path: Path) -> str:
    return f"{path}:1: file: expected UTF-8 text, found UTF-16 (its byte-order mark); save the file as UTF-8"


def _undecodable(path: Path, err: UnicodeDecodeError) -> str:
    """The problem of a text file that is not UTF-8, at its first undecodable line (read again as bytes)."""
    with open_regular(path, "data file") as handle:
        first = handle.read(2)
        if first in _UTF16_MARKS:
            return _utf16_problem(path)
        handle.seek(0)
        for line, raw in enumerate(_bounded_lines(handle), 1):
            try:
                if raw is not None:
                    raw.decode("utf-8")
            except UnicodeDecodeError as bad:
                return (f"{path}:{line}: file: expected UTF-8 text, found undecodable bytes ({bad.reason}, byte "
                        f"{bad.start + 1} of the line); save the file as UTF-8")
    return f"{path}: file: expected UTF-8 text, found undecodable bytes ({err.reason}); save the file as UTF-8"


def delimiter_hint(header: list[str], kind: str) -> str:
    """``"; the header looks ...-delimited: ..."`` when a one-column header holds another delimiter, else ``""``."""
    if len(header) != 1:
        return ""
    for mark, name, fix in ((";", "';'", "save it with commas (CSV) or tabs (a .tsv file)"),
                            ("\t", "tab", "name it .tsv" if kind == "csv" else ""),
                            (",", "comma", "name it .csv" if kind == "tsv" else "")):
        if mark in header[0] and fix:
            return f"; the header looks {name}-delimited, not {'comma' if kind == 'csv' else 'tab'}-delimited: {fix}"
    return ""


def _looks_quoted(cell: str) -> bool:
    """A cell a CSV writer quoted (its quotes doubled inside quotes): TSV would read the quotes as text."""
    return len(cell) >= 2 and cell[0] == cell[-1] == '"' and '""' in cell[1:-1]


def example_from_record(record: dict[str, Any], *, where: str, default_id: str, require_label: bool = True,
                        scale: Scale | None = None, problems: list[str],
                        names: dict[str, str] | None = None) -> Example | None:
    """Validate one parsed row (:class:`ExampleRow`, then the rules that span fields); append its
    problems and return None when it has any. ``names`` shows a mapped field by its source column."""
    names = names or {}

    def shown(name: str) -> str:
        return names.get(name, name)

    before = len(problems)
    bad_text = unwritable(record)
    if bad_text:  # refused here, at its line, not when an output or a cache key is written after the work
        problems.extend(f"{where}: {p}" for p in bad_text)
        return None
    target = "preference" if "answer_b" in record else "label"
    fields = dict(record)
    if not require_label and fields.get(target, 0) is None:  # a null label is no label, where none is needed
        del fields[target]
    if "references" in record and "reference" in record:
        problems.append(f"{where}: {shown('reference')}: expected either 'reference' or 'references', not both, "
                        f"found {describe(fields.pop('reference'))}")
    row = None
    try:
        row = ExampleRow.model_validate(fields, context={"scale": scale, "target": target})
    except ValidationError as err:
        problems.extend(problems_from(err, where, known=f"a known field ({', '.join(FIELDS)}); put extra data "
                                                        "under 'meta' (or map the file's columns with --field or "
                                                        "--label: the others are kept under meta)", names=names))
    if "preference" in record and "answer_b" not in record:
        problems.append(f"{where}: {shown('answer_b')}: expected text (a row with a preference compares answer with "
                        "answer_b), found nothing")
    if require_label and target not in record:
        problems.append(f"{where}: {shown(target)}: {_NO_LABEL}")
    if len(problems) > before or row is None:
        return None
    return row.example(default_id)


def _kind(value: Any) -> str:
    return {list: "a JSON array", str: "a JSON string", type(None): "null", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


