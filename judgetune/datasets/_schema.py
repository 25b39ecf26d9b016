"""The Example: one human-labeled item, and the label scale it is measured on."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


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
