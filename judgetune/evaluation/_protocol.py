"""The LINKAGE evaluation protocol on graded answer lists, and cross-fitted evaluation by question.

LINKAGE (Yang et al., 2024) draws, per question, references by grade from the question's graded
answers (``per_grade`` of every grade: the (3,2,1,0) composition is ``per_grade=1``, (3,3,2,2,1,1,0,0)
is ``per_grade=2``), removes them from the candidates, scores every remaining candidate against
that one reference list, and averages the per-question Spearman of scores and grades. A question
without ``per_grade`` answers of every grade is skipped (``mode="linkage"``).

``mode="all"`` keeps every question and every answer: each answer is a candidate, its references
are drawn from the question's *other* answers (a grade with too few answers gives what it has,
a missing grade none), so figures can be set beside the paper's own question counts.

``cross_fit`` fits a judge on the questions of k-1 folds and scores the held-out fold, so every
question is scored by a judge that never saw it, its references or its answers.
"""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from judgetune.datasets import Example, Reference
from judgetune.judges import Judge, ReferencePool, Verdict

MODES = ("linkage", "all")


@dataclass(frozen=True)
class ProtocolDraw:
    """Candidates carrying their references, and which questions qualified (the rest with the reason)."""

    candidates: list[Example]
    qualified: list[str]
    skipped: dict[str, str] = field(default_factory=dict)
    mode: str = "linkage"
    per_grade: int = 1
    seed: int = 0

    def summary(self) -> dict:
        return {"mode": self.mode, "per_grade": self.per_grade, "seed": self.seed, "questions": len(self.qualified),
                "skipped": len(self.skipped), "candidates": len(self.candidates)}


def draw_references(examples: Sequence[Example], *, per_grade: int = 1, seed: int = 0, mode: str = "linkage",
                    grades: Sequence[float] | None = None) -> ProtocolDraw:
    """References per question and the candidates that remain (see the module docstring).

    ``grades`` are the grades a question must have (default: every label in ``examples``). The draw
    for a question depends only on the seed and the question, not on the other questions.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
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
        if mode == "all":
            pool = ReferencePool(answers)
            candidates.extend(replace(ex, references=pool.sample(ex, per_grade=per_grade, seed=seed)) for ex in answers)
            qualified.append(group)
            continue
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
    return ProtocolDraw(candidates, qualified, skipped, mode, per_grade, seed)


def question_folds(groups: Sequence[str], k: int, *, seed: int = 0) -> list[list[str]]:
    """The distinct groups dealt into ``k`` folds in a seeded order."""
    keys = sorted(set(groups))
    if len(keys) < k:
        raise ValueError(f"{len(keys)} questions cannot fill {k} folds")
    random.Random(seed).shuffle(keys)
    return [keys[i::k] for i in range(k)]


def cross_fit(make_judge: Callable[[Sequence[Example]], Judge], examples: Sequence[Example], *, folds: int = 5,
              seed: int = 0) -> list[Verdict]:
    """A Verdict per example from a judge fitted without its question: ``make_judge(train)`` must
    return a judge fitted on ``train`` alone; it then judges the held-out fold's examples."""
    verdicts: list[Verdict | None] = [None] * len(examples)
    for held_out in question_folds([e.group_key for e in examples], folds, seed=seed):
        held = set(held_out)
        train = [e for e in examples if e.group_key not in held]
        test_index = [i for i, e in enumerate(examples) if e.group_key in held]
        judge = make_judge(train)
        for i, verdict in zip(test_index, judge.judge_all([examples[i] for i in test_index])):
            verdicts[i] = verdict
    return verdicts  # type: ignore[return-value]
