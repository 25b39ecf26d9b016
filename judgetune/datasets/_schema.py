"""The Example: one human-labeled item, the label scale it is measured on, and the row model a data
file's rows are validated with."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo

from judgetune.datasets._json import ascii_number
from judgetune.datasets._validation import Cell, expected


@dataclass(frozen=True)
class Scale:
    """The range of a label. ``values`` lists the allowed labels of a discrete scale."""

    low: float
    high: float
    values: tuple[float, ...] | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not self.low < self.high:
            raise ValueError(f"scale low {self.low} must be below high {self.high}")

    def contains(self, value: float) -> bool:
        if self.values is not None:
            return any(math.isclose(value, v) for v in self.values)
        return self.low <= value <= self.high

    def expected(self) -> str:
        if self.values is not None:
            return "one of " + ", ".join(format_number(v) for v in self.values)
        return f"a number in [{format_number(self.low)}, {format_number(self.high)}]"

    def to_dict(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high, "values": list(self.values) if self.values else None,
                "description": self.description}


def parse_scale(text: str) -> Scale:
    """``"1-5"``, ``"0:3"`` or ``"-2..2"`` as a Scale (low below high).

    Raises:
        ValueError: the text is no such range.
    """
    found = re.fullmatch(r"\s*(-?\d+(?:\.\d+)?)\s*(?:-|:|\.\.|to)\s*(-?\d+(?:\.\d+)?)\s*", text, re.ASCII)
    if not found or not float(found.group(1)) < float(found.group(2)):
        raise ValueError(f"expected a scale LOW-HIGH with LOW below HIGH (e.g. 1-5 or -2..2), got {text!r}")
    return Scale(float(found.group(1)), float(found.group(2)), description=text.strip())


def format_number(value: float) -> str:
    """1.0 -> "1", 0.5 -> "0.5"."""
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass(frozen=True)
class Reference:
    """A reference answer with its human grade (``None`` when ungraded, e.g. a single gold answer)."""

    text: str
    grade: float | None = None


@dataclass(frozen=True)
class Example:
    """One human-labeled item. Which fields are set depends on the task (see DESIGN.md).

    ``label`` is the human score of ``answer``; for pairwise items ``preference`` says how much
    better ``answer_b`` is than ``answer`` (positive: ``answer_b`` better). ``group`` is the query
    id that per-group correlations and splits use.
    """

    id: str
    answer: str
    question: str | None = None
    references: tuple[Reference, ...] = ()
    context: tuple[str, ...] = ()
    answer_b: str | None = None
    preference: float | None = None
    label: float | None = None
    group: str | None = None
    meta: dict[str, Any] = field(default_factory=dict, hash=False)

    @property
    def judgment(self) -> float | None:
        """The human judgment: ``preference`` for a pairwise item (one with ``answer_b``), else ``label``."""
        return self.preference if self.answer_b is not None else self.label

    @property
    def group_key(self) -> str:
        """The group used for splitting and per-group metrics: the item itself when ungrouped."""
        return self.group if self.group is not None else f"id:{self.id}"

    def to_dict(self) -> dict[str, Any]:
        """The Example as the JSON object the JSONL reader accepts back."""
        out: dict[str, Any] = {"id": self.id, "answer": self.answer}
        if self.question is not None:
            out["question"] = self.question
        if self.references:
            out["references"] = [{"text": r.text, "grade": r.grade} for r in self.references]
        if self.context:
            out["context"] = list(self.context)
        if self.answer_b is not None:
            out["answer_b"] = self.answer_b
            out["preference"] = self.preference
        if self.label is not None:
            out["label"] = self.label
        if self.group is not None:
            out["group"] = self.group
        if self.meta:
            out["meta"] = self.meta
        return out


# --- the row model: what a data file's row may hold, validated field by field -------------------------

def _identifier(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int)) or str(value).strip() == "":
        raise expected("a non-empty string or integer")
    return str(value)


def _text(value: Any) -> str:
    if not isinstance(value, str):  # "" is a real answer (RAGChecker has empty responses); absent is not
        raise expected("text")
    return str(value)


def _number(value: Any) -> float:
    if isinstance(value, Cell):  # CSV/TSV: the cell must read as a plain number ("1_0" is not 10)
        try:
            number = ascii_number(value)  # not "1_0", not "٣" (float reads both)
        except ValueError:
            raise expected("a number") from None
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    else:
        raise expected("a number")
    if not math.isfinite(number):
        raise expected("a finite number")
    return number


def _on_scale(value: float, info: ValidationInfo) -> float:
    scale, target = (info.context or {}).get("scale"), (info.context or {}).get("target")
    if scale is not None and info.field_name == target and not scale.contains(value):
        raise expected(scale.expected(), found=value)
    return value


def _reference(value: Any) -> Reference:
    if isinstance(value, str) and value.strip():
        return Reference(str(value))
    if isinstance(value, dict) and isinstance(value.get("text"), str) and set(value) <= {"text", "grade"}:
        grade = value.get("grade")
        if grade is not None and (isinstance(grade, bool) or not isinstance(grade, (int, float))
                                  or not math.isfinite(grade)):
            raise expected("a finite number or null", found=grade, sub="grade")
        return Reference(value["text"], None if grade is None else float(grade))
    raise expected("non-empty text or an object with 'text' and optional 'grade'")


def _reference_list(value: Any, info: ValidationInfo) -> list:
    if isinstance(value, str) and info.field_name == "reference":
        return [value]
    if not isinstance(value, list):
        raise expected("a list of texts or {text, grade} objects")
    return value


def _context(value: Any) -> tuple[str, ...]:
    value = [value] if isinstance(value, str) else value
    if not isinstance(value, list) or not all(isinstance(c, str) for c in value):
        raise expected("text or a list of texts")
    return tuple(str(c) for c in value)


def _meta(value: Any) -> dict:
    if not isinstance(value, dict):
        raise expected("a JSON object")
    return dict(value)


Identifier = Annotated[str, BeforeValidator(_identifier)]
Text = Annotated[str, BeforeValidator(_text)]
Label = Annotated[float, AfterValidator(_on_scale), BeforeValidator(_number)]
References = Annotated[list[Annotated[Any, BeforeValidator(_reference)]], BeforeValidator(_reference_list)]


class ExampleRow(BaseModel):
    """One row of a data file, as written (the fields of :class:`Example`, ``reference`` as a
    shorthand of ``references``). Validate with the context ``{"scale": Scale | None, "target":
    "label" | "preference"}`` to check the human label against a stated scale."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    id: Identifier = None
    group: Identifier = None
    answer: Text = Field(default=None, validate_default=True)
    question: Text = None
    answer_b: Text = None
    label: Label = None
    preference: Label = None
    references: References = []
    reference: References = []
    context: Annotated[tuple[str, ...], BeforeValidator(_context)] = ()
    meta: Annotated[dict[str, Any], BeforeValidator(_meta)] = {}

    def example(self, default_id: str) -> Example:
        return Example(id=self.id if self.id is not None else default_id, answer=self.answer, question=self.question,
                       references=tuple(self.references or self.reference), context=self.context,
                       answer_b=self.answer_b, preference=self.preference, label=self.label, group=self.group,
                       meta=self.meta)
