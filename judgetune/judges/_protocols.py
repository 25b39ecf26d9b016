"""Protocols: the named ways of scoring in which an item's score may depend on other items.

Without a protocol (``None``) a judge scores each item from its frozen state and that item alone
(with the references the item carries): the score is the same alone, in any batch, in any order.
Methods that need other items are protocols you name, and each requires groups (``group`` on every
item: the question the answers belong to):

- ``group``: the judge may compare an item with the other candidates of its group (their texts,
  never their labels): a hybrid's within-question ``z`` or ``rank`` normalization. No label is read.
- ``linkage`` (LINKAGE, Yang et al., 2024): per group, ``per_grade`` references of every grade are
  drawn (seeded) from its labeled answers and *removed from the candidates*; every remaining
  candidate carries that one reference list. A group without enough answers of every grade is
  skipped (named, with the reason). Candidates are then scored as under ``group``.

"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from judgetune.datasets import Example, Reference
from judgetune.errors import JudgetuneError

__all__ = ["PROTOCOLS", "ProtocolDraw", "apply_protocol", "draw_references", "require_groups"]

PROTOCOLS = ("group", "linkage")


@dataclass(frozen=True)
class ProtocolDraw:
    """Candidates (carrying their references under ``linkage``), the groups that qualified, and the
    skipped ones with the reason."""

    candidates: list[Example]
    qualified: list[str]
    skipped: dict[str, str] = field(default_factory=dict)
    mode: str = "linkage"
    per_grade: int = 1
    seed: int = 0

    def summary(self) -> dict:
        """The protocol record every figure it produced carries."""
        return {"protocol": self.mode, "mode": self.mode, "per_grade": self.per_grade, "seed": self.seed,
                "questions": len(self.qualified), "skipped": len(self.skipped), "candidates": len(self.candidates)}


def require_groups(examples: Sequence[Example], protocol: str, *, why: str = "") -> None:
    """Refuse items without a group under a protocol (their score would depend on nothing to compare with).

    Raises:
        JudgetuneError: naming the first items without a group.
    """
    missing = [e.id for e in examples if e.group is None]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise JudgetuneError(f"protocol {protocol}{why} requires a group (the question) on every item; "
                             f"{len(missing)} item(s) have none: {shown}")


def draw_references(examples: Sequence[Example], *, per_grade: int = 1, seed: int = 0,
                    grades: Sequence[float] | None = None) -> ProtocolDraw:
    """References per question and the candidates that remain (see the module docstring).

    ``grades`` are the grades a question must have (default: every label in ``examples``). The draw
    for a question depends only on the seed and the question, not on the other questions.
    """
    labeled = [e for e in examples if e.label is not None]
    grades = sorted({float(g) for g in (grades if grades is not None else (e.label for e in labeled))}, reverse=True)
    by_group: dict[str, list[Example]] = defaultdict(list)
    for ex in sorted(labeled, key=lambda e: e.id):
        by_group[ex.group_key].append(ex)
    candidates: list[Example] = []
    qualified: list[str] = []
    skipped: dict[str, str] = {}
    for group in sorted(by_group):
        answers = by_group[group]
        counts = Counter(float(e.label) for e in answers)
        short = [g for g in grades if counts[g] < per_grade]
        if short:
            skipped[group] = f"fewer than {per_grade} answer(s) of grade {', '.join(f'{g:g}' for g in short)}"
            continue
        rng = random.Random(f"{seed}:{group}")
        chosen: list[Example] = []
        for g in grades:
            chosen.extend(rng.sample([e for e in answers if float(e.label) == g], per_grade))
        chosen_ids = {e.id for e in chosen}
        rest = [e for e in answers if e.id not in chosen_ids]
        if not rest:
            skipped[group] = "no answer left to judge after drawing the references"
            continue
        references = tuple(Reference(e.answer, float(e.label)) for e in chosen)  # best grade first
        candidates.extend(replace(ex, references=references) for ex in rest)
        qualified.append(group)
    return ProtocolDraw(candidates, qualified, skipped, "linkage", per_grade, seed)


def apply_protocol(examples: Sequence[Example], protocol: str | None, *, per_grade: int = 1, seed: int = 0,
                   grades: Sequence[float] | None = None) -> ProtocolDraw:
    """The items a protocol scores: all of them unchanged (``None``, ``group``), or LINKAGE's candidates
    with their drawn references (``linkage``: the drawn answers are no longer candidates).

    Raises:
        JudgetuneError: an unknown protocol, items without a group under a protocol, or (linkage)
            no labeled group with enough answers of every grade.
    """
    if protocol is not None and protocol not in PROTOCOLS:
        raise JudgetuneError(f"unknown protocol {protocol!r}; known: {', '.join(PROTOCOLS)} (or none)")
    items = list(examples)
    if protocol is None:
        return ProtocolDraw(items, [], {}, "none", per_grade, seed)
    require_groups(items, protocol)
    if protocol == "group":
        return ProtocolDraw(items, sorted({e.group_key for e in items}), {}, "group", per_grade, seed)
    draw = draw_references(items, per_grade=per_grade, seed=seed, grades=grades)
    if not draw.candidates:
        raise JudgetuneError(f"protocol linkage: no group has {per_grade} labeled answer(s) of every grade "
                             f"and one more to judge ({len(draw.skipped)} group(s) skipped)")
    return draw
