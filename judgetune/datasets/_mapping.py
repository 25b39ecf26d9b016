"""Field mapping: reading a file whose columns have their own names (``article``, ``summary``,
``coherence``) as Examples, without rewriting it.

A :class:`FieldMap` says which source column feeds which Example field (``question=article``)
and which column holds the human score (``label="coherence"``; ``preference`` on pairwise rows).
The rule for a mapped file's other columns: a column named like an Example field that no mapping
claims is read as that field; every other column is kept under ``meta`` (nothing is dropped).
Errors name the source column: ``summary (as answer)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAPPABLE", "FieldMap"]

# the Example fields a column can feed; the human score is set with ``label``
MAPPABLE = ("id", "question", "answer", "references", "reference", "context", "answer_b", "group", "label",
            "preference")
NATIVE = ("id", "question", "answer", "references", "reference", "context", "answer_b", "preference", "label",
          "group", "meta")


@dataclass(frozen=True)
class FieldMap:
    """Which source column feeds which Example field.

    Args:
        fields: Example field -> source column, e.g. ``{"question": "article", "answer": "summary"}``.
        label: the column holding the human score (read as ``label``, or ``preference`` on rows
            with ``answer_b``).

    Raises:
        ValueError: an unknown field, an empty column name, or the label set twice.
    """

    fields: Mapping[str, str] = field(default_factory=dict)
    label: str | None = None

    def __post_init__(self) -> None:
        fields = dict(self.fields)
        for target, column in fields.items():
            if target not in MAPPABLE:
                raise ValueError(f"--field {target}={column}: expected an Example field among {', '.join(MAPPABLE)} "
                                 f"before '=', found {target!r}")
            if not isinstance(column, str) or not column.strip():
                raise ValueError(f"--field {target}=: expected a column name after '='")
        if self.label is not None and not self.label.strip():
            raise ValueError("--label: expected a column name")
        if self.label is not None and ({"label", "preference"} & set(fields)):
            raise ValueError(f"--label {self.label}: the human score is already mapped by --field "
                             f"{'label' if 'label' in fields else 'preference'}=...; give one of them")
        object.__setattr__(self, "fields", fields)

    def __bool__(self) -> bool:
        return bool(self.fields) or self.label is not None

    @property
    def targets(self) -> dict[str, str]:
        """Example field -> column, the label included (as ``label``)."""
        return {**self.fields, **({"label": self.label} if self.label is not None else {})}

    @property
    def columns(self) -> list[str]:
        """The source columns the mapping reads, each once."""
        return list(dict.fromkeys(self.targets.values()))

    def names(self) -> dict[str, str]:
        """How errors name a mapped field: ``summary (as answer)``."""
        out = {}
        for target, column in self.targets.items():
            shown = f"{column} (as {target})" if column != target else column
            out[target] = shown
            if target in ("label", "preference"):  # the score lands on either, by the row's kind
                out["label"] = out["preference"] = shown
            if target in ("reference", "references"):
                out["reference"] = out["references"] = shown
        return out

    def _claimed(self) -> set[str]:
        """The Example fields the mapping sets (both names of the score when it sets one)."""
        claimed = set(self.targets)
        if claimed & {"label", "preference"}:
            claimed |= {"label", "preference"}
        if claimed & {"reference", "references"}:
            claimed |= {"reference", "references"}
        return claimed

    def extra_columns(self, columns: list[str]) -> list[str]:
        """The columns that go to ``meta``: neither mapped nor an Example field the mapping leaves unclaimed."""
        return [c for c in columns if c not in self.columns and (c not in NATIVE or c in self._claimed())]

    def apply(self, record: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
        """The record in Example field names, and the problems of keeping its extra columns under
        ``meta`` (a key the row's own ``meta`` already has)."""
        out: dict[str, Any] = {}
        for target, column in self.targets.items():
            if column in record:
                value = record[column]
                out["reference" if target == "references" and isinstance(value, str) else target] = value
        claimed, extras = self._claimed(), {}
        for key, value in record.items():
            if key in self.columns:
                continue
            if key in NATIVE and key not in claimed:
                out[key] = value
            else:
                extras[key] = str(value) if isinstance(value, str) else value
        if "label" in out and "answer_b" in out:  # a pairwise row: its human score is the preference
            out["preference"] = out.pop("label")
        problems = []
        if extras:
            meta = out.get("meta", {})
            if isinstance(meta, dict):
                problems = [f"meta: expected the column {k!r} (kept under meta) not to be a key of the row's own "
                            "meta too" for k in extras if k in meta]
                out["meta"] = {**meta, **extras}
        return out, problems
