"""The rows an estimate is made from: each row's id, system (two for a pairwise comparison), input, human label
(if any), the probability it was drawn with to be labeled (if recorded) and, once joined, the judge's score.

Every file (JSONL, CSV, TSV, Parquet) is read by ``judgetune.datasets``' one reader, with its rules (the per-row
size limit, a repeated JSON key refused, a FIFO or device never opened); a regular JSONL or Parquet file is taken
whole by Arrow (``_arrow``) when that reader would accept every row as it is. ``--by`` names a column of the file,
or a key of a row's ``meta``; ``sampling_probability`` likewise (``judgetune pick --for estimate`` writes it).
A null or empty label is no label. Every bad row is reported with its line, all at once; nothing is dropped.
"""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from judgetune.datasets import Example, FieldMap, ascii_number, describe, example_from_record, iter_records
from judgetune.errors import DataValidationError

__all__ = ["PROBABILITY", "Observations", "from_examples", "is_nan", "no_gc", "probability", "read_data", "records"]

PROBABILITY = "sampling_probability"


@dataclass
class Observations:
    """One estimate's rows, in file order. Systems are codes into ``names`` (in order of first appearance):
    ``system`` per row, and ``system_b`` for pairwise comparisons (the system of ``answer_b``; ``system`` holds
    ``answer``'s). ``inputs`` codes the input each row answers (its group, else its question; -1: neither).
    Labels, probabilities and scores are nan where absent."""

    where: str
    ids: Sequence[str]
    lines: np.ndarray
    names: list[str]
    system: np.ndarray
    system_b: np.ndarray | None
    inputs: np.ndarray
    labels: np.ndarray
    probabilities: np.ndarray
    scores: np.ndarray = field(default_factory=lambda: np.zeros(0))
    examples: list[Example] | None = None
    scale: tuple[float, float] | None = None  # the data's own human scale, when known (a catalog source's)
    nan_labels: int = 0  # labels given as NaN, taken for no label
    label_where: dict[int, str] = field(default_factory=dict)  # row -> "FILE:LINE" of a label joined from another file

    def label_line(self, row: int) -> str:
        """Where row ``row``'s label was read: the labels file's line when it was joined from one."""
        return self.label_where.get(row, f"{self.where}:{self.lines[row]}")

    @property
    def pairwise(self) -> bool:
        return self.system_b is not None

    def __len__(self) -> int:
        return len(self.ids)


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """The cyclic garbage collector paused while a file's rows are read: it would walk the growing columns again
    and again (a third of the time of a million rows); nothing read makes a cycle."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def records(path: str | Path, problems: list[str], *, label: str | None = None,
            fields: dict[str, str] | None = None) -> Iterator[tuple[int, dict]]:
    """``(line, row as written)`` of a JSONL, CSV, TSV or Parquet file, through ``judgetune.datasets``' reader;
    problems of its form are appended."""
    # a mapping, so that a column such as --by's is not refused as unknown in a CSV header
    yield from iter_records(path, problems, mapping=FieldMap(fields or {}, label or "label"))


def _take(record: dict[str, Any], name: str) -> Any:
    """The value of column ``name``, removed from the row, else of ``meta[name]`` (left in place); None if neither."""
    value = record.pop(name, None)
    if value is None:
        meta = record.get("meta")
        if meta.__class__ is dict:
            return meta.get(name)
    return value


def _number(value: Any, where: Any, what: str, problems: list[str]) -> float:
    """A label or probability: nan when absent (None, an empty cell); a finite number, else a problem (``where``:
    the row, as text or as a (file, line) pair). A label's NaN is taken for no label before (``is_nan``)."""
    if value is None:
        return math.nan
    if value.__class__ in (int, float) and math.isfinite(value):
        return float(value)
    if isinstance(value, str) and not value.strip():
        return math.nan
    if isinstance(where, tuple):
        where = f"{where[0]}:{where[1]}"
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(value)
        number = ascii_number(value) if isinstance(value, str) else float(value)
    except ValueError:
        problems.append(f"{where}: {what}: expected a number, found {describe(value)}")
        return math.nan
    if not math.isfinite(number):
        problems.append(f"{where}: {what}: expected a finite number, or nothing for an unlabeled row (null, an "
                        f"empty cell), found {describe(number)}")
        return math.nan
    return number


def probability(value: Any, where: Any, problems: list[str]) -> float:
    """A recorded sampling probability: nan when absent, else a number in (0, 1] (a problem otherwise)."""
    number = _number(value, where, PROBABILITY, problems)
    if not math.isnan(number) and not 0 < number <= 1:
        if isinstance(where, tuple):
            where = f"{where[0]}:{where[1]}"
        problems.append(f"{where}: {PROBABILITY}: expected the chance the row was drawn to be labeled, a number in "
                        f"(0, 1], found {number:g}")
        return math.nan
    return number


def is_nan(value: Any) -> bool:
    """Whether a label is NaN (JSON's ``NaN``, a ``nan`` cell, a float NaN): no label, as pandas writes one, counted
    so that the estimate says so."""
    return value.__class__ is float and value != value or isinstance(value, str) and \
        value.strip().lower().lstrip("+-") == "nan"


class _Columns:
    """The columns being collected, row by row; systems and inputs coded as they come."""

    def __init__(self, path: Path, by: Sequence[str], mapping: FieldMap, examples: bool) -> None:
        self.path, self.stem, self.by, self.mapping, self.keep = str(path), path.stem, list(by), mapping, examples
        self.shown = mapping.names()
        self.ids: list[str] = []
        self.lines: list[int] = []
        self.codes: list[list[int]] = [[] for _ in by]
        self.names: dict[str, int] = {}
        self.input_codes: list[int] = []
        self.input_names: dict[Any, int] = {}
        self.labels: list[float] = []
        self.probabilities: list[float] = []
        self.examples: list[Example] = []
        self.seen: dict[str, int] = {}
        self.nan_labels = 0
        self.slow_rows = 0  # rows read by _add_row
        self.without: dict[str, int] = dict.fromkeys(by, 0)  # rows without a --by column
        self.first_columns: list[str] = []  # the first row's columns and meta keys, to name in an error

    def observations(self, where: str) -> Observations:
        second = np.asarray(self.codes[1], dtype=int) if len(self.by) == 2 else None
        return Observations(where, self.ids, np.asarray(self.lines, dtype=int), list(self.names),
                            np.asarray(self.codes[0], dtype=int), second, np.asarray(self.input_codes, dtype=int),
                            np.asarray(self.labels, dtype=float), np.asarray(self.probabilities, dtype=float),
                            np.full(len(self.ids), np.nan), self.examples if self.keep else None)

    def system(self, value: Any, line: int, name: str, problems: list[str]) -> int:
        if value is None:
            self.without[name] += 1
        if value.__class__ is not str and (value is None or isinstance(value, (dict, list, bool))) or \
                not str(value).strip():
            problems.append(f"{self.path}:{line}: {name}: expected the system's name (--by {name}), found "
                            + ("nothing" if value is None else repr(value)))
            return -1
        return self.names.setdefault(str(value), len(self.names))

    def input(self, record: dict[str, Any]) -> int:
        """The code of the input a row answers: its group, else its question (-1 when it has neither)."""
        for key in ("group", "question"):
            value = record.get(key)
            if value is not None and value.__class__ in (str, int):
                return self.input_names.setdefault((key, value), len(self.input_names))
        return -1

    def identifier(self, record: dict[str, Any], line: int, problems: list[str]) -> str:
        value = record.get("id")
        if value is None:
            return f"{self.stem}:{line}"
        if not isinstance(value, (str, int)) or isinstance(value, bool) or not str(value).strip():
            problems.append(f"{self.path}:{line}: id: expected a non-empty string or integer, found {describe(value)}")
        return str(value)


def _kind_problem(columns: _Columns, pairwise: bool, line: int) -> str | None:
    if pairwise == (len(columns.by) == 2):
        return None
    found = f"a pairwise row with --by {columns.by[0]}" if pairwise else f"a row with one answer with --by " \
                                                                        f"{','.join(columns.by)}"
    return (f"{columns.path}:{line}: by: expected --by A,B (the systems of answer and answer_b) for a pairwise row "
            f"and --by SYSTEM for a row with one answer, found {found}")


def _add_row(columns: _Columns, record: dict[str, Any], line: int, problems: list[str]) -> None:
    before = len(problems)
    if not columns.slow_rows:
        meta = record.get("meta")
        columns.first_columns = [k for k in record if k != "meta"] + (
            [f"meta.{k}" for k in meta] if meta.__class__ is dict else [])
    columns.slow_rows += 1
    codes = [columns.system(_take(record, b), line, b, problems) for b in columns.by]
    chance = probability(_take(record, PROBABILITY), (columns.path, line), problems)
    if columns.mapping:
        record, extra = columns.mapping.apply(record)
        problems.extend(f"{columns.path}:{line}: {p}" for p in extra)
    pairwise = "answer_b" in record
    kind = _kind_problem(columns, pairwise, line)
    if kind:
        problems.append(kind)
    row_id = columns.identifier(record, line, problems)
    name = "preference" if pairwise else "label"
    label = record.get(name)
    if is_nan(label):
        columns.nan_labels += 1
        label = None
    label = _number(label, (columns.path, line), columns.shown.get(name, name), problems)
    if columns.keep:
        if record.get(name) is None or math.isnan(label):  # no label (null, an empty cell): the judge needs none
            record.pop(name, None)
        example = example_from_record(record, where=f"{columns.path}:{line}", default_id=f"{columns.stem}:{line}",
                                      require_label=False, problems=problems, names=columns.shown)
    if len(problems) > before:
        return
    if row_id in columns.seen:
        problems.append(f"{columns.path}:{line}: id: expected a unique id, found {row_id!r} already used on line "
                        f"{columns.seen[row_id]}")
        return
    columns.seen[row_id] = line
    columns.ids.append(row_id)
    columns.lines.append(line)
    for column, code in zip(columns.codes, codes):
        column.append(code)
    columns.input_codes.append(columns.input(record))
    columns.labels.append(label)
    columns.probabilities.append(chance)
    if columns.keep:
        columns.examples.append(example)


def _column(record: dict[str, Any], name: str) -> Any:
    value = record.get(name)
    if value is None:
        meta = record.get("meta")
        return meta.get(name) if meta.__class__ is dict else None
    return value


def _quick(columns: _Columns, rows: Iterator[tuple[int, dict[str, Any]]]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Add the common rows (string systems and ids, numbers or nothing for labels and probabilities) at the speed
    a million rows need, inlined; yields the others, untouched, for ``_add_row``."""
    by, pairwise, nan = columns.by, len(columns.by) == 2, math.nan
    name = "preference" if pairwise else "label"
    names, seen, codes, numbers = columns.names, columns.seen, columns.codes, (int, float)
    inputs = columns.input_names
    for line, record in rows:
        meta = record.get("meta")
        meta = meta if meta.__class__ is dict else {}
        systems = [record.get(b) or meta.get(b) for b in by]
        row_id, label = record.get("id"), record.get(name)
        chance = record.get(PROBABILITY, meta.get(PROBABILITY))
        if not isinstance(row_id, str) or row_id in seen or ("answer_b" in record) != pairwise or \
                not (label is None or label.__class__ in numbers and math.isfinite(label)) or \
                not (chance is None or chance.__class__ in numbers and 0 < chance <= 1) or \
                not all(v.__class__ is str and v and not v.isspace() for v in systems) or not row_id.strip():
            yield line, record
            continue
        seen[row_id] = line
        columns.ids.append(row_id)
        columns.lines.append(line)
        for column, value in zip(codes, systems):
            code = names.get(value)
            if code is None:
                code = names[value] = len(names)
            column.append(code)
        group = record.get("group")
        code = inputs.get(("group", group)) if group.__class__ is str else columns.input(record)
        if code is None:
            code = inputs[("group", group)] = len(inputs)
        columns.input_codes.append(code)
        columns.labels.append(nan if label is None else label)
        columns.probabilities.append(nan if chance is None else chance)


def read_data(path: str | Path, by: Sequence[str], *, fields: dict[str, str] | None = None,
              label: str | None = None, examples: bool = False) -> Observations:
    """The rows of a data file: ``by`` one column (a system per row) or two (pairwise rows: the systems of
    ``answer`` and ``answer_b``); ``examples``: also validate every row as an Example, for a judge to score.

    Raises:
        DataValidationError: every bad row (a missing system, a label that is no number, a repeated id, ...).
        FileNotFoundError: no such file.
    """
    path = Path(path)
    problems: list[str] = []
    columns = _Columns(path, by, FieldMap(fields or {}, label), examples)
    rows = records(path, problems, label=label)
    with no_gc():
        for line, record in _quick(columns, rows) if not columns.mapping and not examples else rows:
            _add_row(columns, record, line, problems)
    if not columns.ids and not problems:
        problems.append(f"{path}: expected at least one row, found none")
    absent = [b for b, n in columns.without.items() if n and n == columns.slow_rows and not columns.ids]
    if absent:  # one line, not two a row: the column is not there at all
        problems = [f"{path}: --by {','.join(by)}: expected a column (or meta key) {absent[0]!r} naming each row's "
                    f"system, found none in any row (columns of the first row: {', '.join(columns.first_columns)})"]
    if problems:
        raise DataValidationError(problems)
    columns.seen = {}
    obs = columns.observations(str(path))
    obs.nan_labels = columns.nan_labels
    return obs


def from_examples(examples: Sequence[Example], by: Sequence[str], where: str) -> Observations:
    """The rows of Examples already read (a catalog source), each system read from ``meta``."""
    columns, problems = _Columns(Path(where), by, FieldMap(), True), []
    for index, example in enumerate(examples, 1):
        row = f"{where}: {example.id}"
        codes = [columns.system(example.meta.get(b), index, b, problems) for b in by]
        if (example.answer_b is not None) != (len(by) == 2):
            problems.append(f"{row}: by: expected --by A,B for pairwise rows and --by SYSTEM for the others")
        columns.ids.append(example.id)
        columns.lines.append(index)
        for column, code in zip(columns.codes, codes):
            column.append(code)
        columns.input_codes.append(columns.input({"group": example.group, "question": example.question}))
        columns.labels.append(math.nan if example.judgment is None else example.judgment)
        columns.probabilities.append(probability(example.meta.get(PROBABILITY), row, problems))
        columns.examples.append(example)
    if problems:
        raise DataValidationError(problems)
    return columns.observations(where)
