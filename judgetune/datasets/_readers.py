"""Read Examples from JSONL, CSV and TSV files, validating every row.

Every problem in a file is collected and raised at once as a DataValidationError, each as
``file:line: field: expected ..., found ...``. Nothing is dropped, defaulted to zero or coerced:
a label must be a number in JSONL and a cell that parses as one in CSV/TSV.
"""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import jsonlines

from judgetune.datasets._schema import Example, Reference, Scale
from judgetune.errors import DataValidationError

FIELDS = ("id", "question", "answer", "references", "reference", "context", "answer_b", "preference",
          "label", "group", "meta")
_FORMATS = {".jsonl": "jsonl", ".csv": "csv", ".tsv": "tsv"}


def read_examples(path: str | Path, *, require_label: bool = True, scale: Scale | None = None) -> list[Example]:
    """Read and validate a JSONL, CSV or TSV file of Examples.

    Args:
        path: the file; its suffix (``.jsonl``, ``.csv``, ``.tsv``) selects the format.
        require_label: whether each row must carry its human label (``preference`` for rows with
            ``answer_b``, else ``label``). Scoring new data does not need labels.
        scale: when given, every label must lie on it.

    Raises:
        DataValidationError: listing every bad row of the file.
        FileNotFoundError: the file does not exist.

    Example:
        >>> examples = read_examples("pairs.jsonl", scale=Scale(0, 5))  # doctest: +SKIP
    """
    path = Path(path)
    kind = _FORMATS.get(path.suffix.lower())
    if kind is None:
        raise DataValidationError([f"{path}: expected a .jsonl, .csv or .tsv file, found suffix {path.suffix!r}"])
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such data file")
    problems: list[str] = []
    rows = jsonl_rows(path, problems) if kind == "jsonl" else _table_rows(path, kind, problems)
    examples: list[Example] = []
    seen: dict[str, int] = {}
    for line, record in rows:
        example = example_from_record(record, where=f"{path}:{line}", default_id=f"{path.stem}:{line}",
                                      require_label=require_label, scale=scale, problems=problems)
        if example is None:
            continue
        if example.id in seen:
            problems.append(f"{path}:{line}: id: expected a unique id, found {example.id!r} "
                            f"already used on line {seen[example.id]}")
            continue
        seen[example.id] = line
        examples.append(example)
    if not examples and not problems:
        problems.append(f"{path}: expected at least one row, found none")
    if problems:
        raise DataValidationError(problems)
    return examples


def write_examples(path: str | Path, examples: Iterable[Example]) -> None:
    """Write Examples as JSONL that ``read_examples`` reads back unchanged."""
    with jsonlines.open(Path(path), mode="w") as writer:
        writer.write_all(e.to_dict() for e in examples)


def jsonl_rows(path: Path, problems: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    # Parsed line by line (not with jsonlines.Reader) to know the line number of every row.
    with path.open("rb") as handle:
        for line, raw in enumerate(handle, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                problems.append(f"{path}:{line}: row: expected UTF-8 text, found undecodable bytes ({err.reason})")
                continue
            if not text.strip():  # a blank line is not a row
                continue
            try:
                value = json.loads(text)
            except json.JSONDecodeError as err:
                problems.append(f"{path}:{line}: row: expected a JSON object, found invalid JSON ({err.msg} "
                                f"at column {err.colno})")
                continue
            if not isinstance(value, dict):
                problems.append(f"{path}:{line}: row: expected a JSON object, found {_kind(value)}")
                continue
            yield line, value


def _table_rows(path: Path, kind: str, problems: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    delimiter = "," if kind == "csv" else "\t"
    try:
        with path.open(encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle, delimiter=delimiter)
            header = next(reader, None)
            if header is None:
                return
            header = [h.strip() for h in header]
            unknown = [h for h in header if h not in FIELDS or h == "meta"]
            if unknown:
                problems.append(f"{path}:1: header: expected columns among {', '.join(f for f in FIELDS if f != 'meta')}"
                                f", found unknown column(s) {', '.join(map(repr, unknown))}")
                return
            start = reader.line_num + 1
            for cells in reader:
                line, start = start, reader.line_num + 1
                if not cells:  # a blank line is not a row
                    continue
                if len(cells) != len(header):
                    problems.append(f"{path}:{line}: row: expected {len(header)} {kind.upper()} cells, "
                                    f"found {len(cells)}")
                    continue
                yield line, {h: _Cell(c) for h, c in zip(header, cells) if c.strip() != ""}
    except UnicodeDecodeError as err:
        problems.append(f"{path}: file: expected UTF-8 text, found undecodable bytes ({err.reason})")


class _Cell(str):
    """Text from a CSV/TSV cell: unlike a JSON string, it may be read as a number."""


def example_from_record(record: dict[str, Any], *, where: str, default_id: str, require_label: bool = True,
                        scale: Scale | None = None, problems: list[str]) -> Example | None:
    """Validate one parsed row; append its problems and return None when it has any."""
    before = len(problems)

    def bad(name: str, expected: str, value: Any) -> None:
        problems.append(f"{where}: {name}: expected {expected}, found {_describe(value)}")

    for name in record:
        if name not in FIELDS:
            bad(name, f"a known field ({', '.join(FIELDS)}); put extra data under 'meta'", record[name])
    ident = _identifier(record, "id", bad)
    group = _identifier(record, "group", bad)
    answer = record.get("answer")
    if not isinstance(answer, str):  # "" is a real answer (RAGChecker has empty responses); absent is not
        bad("answer", "text", answer)
    question = _text(record, "question", bad)
    answer_b = _text(record, "answer_b", bad)
    label = _number(record, "label", bad)
    preference = _number(record, "preference", bad)
    references = _references(record, bad)
    context = _context(record, bad)
    meta = record.get("meta", {})
    if not isinstance(meta, dict):
        bad("meta", "a JSON object", meta)
    if "preference" in record and "answer_b" not in record:
        bad("answer_b", "text (a row with a preference compares answer with answer_b)", None)
    target_name, target = ("preference", preference) if "answer_b" in record else ("label", label)
    if require_label and target_name not in record:
        bad(target_name, "the human label (a number)", None)
    if scale is not None and target is not None and not scale.contains(target):
        bad(target_name, scale.expected(), target)
    if len(problems) > before:
        return None
    return Example(id=ident if ident is not None else default_id, answer=answer, question=question,
                   references=references, context=context, answer_b=answer_b, preference=preference,
                   label=label, group=group, meta=dict(meta))


def _identifier(record: dict[str, Any], name: str, bad) -> str | None:
    value = record.get(name)
    if value is None and name not in record:
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).strip() == "":
        bad(name, "a non-empty string or integer", value)
        return None
    return str(value)


def _text(record: dict[str, Any], name: str, bad) -> str | None:
    if name not in record:
        return None
    value = record[name]
    if not isinstance(value, str):
        bad(name, "text", value)
        return None
    return str(value)


def _number(record: dict[str, Any], name: str, bad) -> float | None:
    if name not in record:
        return None
    value = record[name]
    if isinstance(value, _Cell):
        try:
            number = float(value)
        except ValueError:
            bad(name, "a number", value)
            return None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        bad(name, "a number", value)
        return None
    if not math.isfinite(number):
        bad(name, "a finite number", value)
        return None
    return number


def _references(record: dict[str, Any], bad) -> tuple[Reference, ...]:
    if "references" in record and "reference" in record:
        bad("reference", "either 'reference' or 'references', not both", record["reference"])
        return ()
    name = "references" if "references" in record else "reference"
    value = record.get(name, [])
    if isinstance(value, str) and name == "reference":
        value = [value]
    if not isinstance(value, list):
        bad(name, "a list of texts or {text, grade} objects", value)
        return ()
    refs = []
    for i, item in enumerate(value):
        if isinstance(item, str) and item.strip():
            refs.append(Reference(str(item)))
        elif isinstance(item, dict) and isinstance(item.get("text"), str) and set(item) <= {"text", "grade"}:
            grade = item.get("grade")
            if grade is not None and (isinstance(grade, bool) or not isinstance(grade, (int, float))
                                      or not math.isfinite(grade)):
                bad(f"{name}[{i}].grade", "a finite number or null", grade)
                continue
            refs.append(Reference(item["text"], None if grade is None else float(grade)))
        else:
            bad(f"{name}[{i}]", "non-empty text or an object with 'text' and optional 'grade'", item)
    return tuple(refs)


def _context(record: dict[str, Any], bad) -> tuple[str, ...]:
    value = record.get("context", [])
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        bad("context", "text or a list of texts", value)
        return ()
    return tuple(str(c) for c in value)


def _kind(value: Any) -> str:
    return {list: "a JSON array", str: "a JSON string", type(None): "null", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _describe(value: Any) -> str:
    if value is None:
        return "nothing"
    if isinstance(value, _Cell):
        return f"{str(value)!r}"
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
