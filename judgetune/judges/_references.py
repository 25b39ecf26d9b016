"""Graded reference answers for a candidate: sampled from the human-graded answers of its
question (seeded, by a grade composition), or generated at descending quality by the LM when the
question has at most one gold answer (as LINKAGE does)."""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from collections.abc import Sequence

from judgetune.datasets import Example, Reference
from judgetune.lm import JudgeLM


class ReferencePool:
    """The graded answers of each question (group), from which references are drawn.

    A candidate never gets itself (same id or same text) as a reference.
    """

    def __init__(self, examples: Sequence[Example] = ()):
        self._by_group: dict[str, list[Example]] = defaultdict(list)
        for ex in examples:
            if ex.label is not None:
                self._by_group[ex.group_key].append(ex)

    def graded(self, example: Example) -> list[Reference]:
        """The graded references available to ``example``: its own, else its question's other answers."""
        if len([r for r in example.references if r.grade is not None]) >= 2:
            return [r for r in example.references if r.grade is not None]
        return [Reference(other.answer, other.label) for other in self._by_group.get(example.group_key, ())
                if other.id != example.id and other.answer.strip() != example.answer.strip()]

    def sample(self, example: Example, *, per_grade: int = 1, seed: int = 0,
               grades: Sequence[float] | None = None) -> tuple[Reference, ...]:
        """``per_grade`` references of each grade (all grades present by default), best first.

        The draw depends only on the seed and the example's id, so it does not change with the
        order examples are judged in. A grade with too few answers contributes what it has.
        """
        by_grade: dict[float, list[Reference]] = defaultdict(list)
        for ref in sorted(self.graded(example), key=lambda r: r.text):
            by_grade[float(ref.grade)].append(ref)
        rng = random.Random(f"{seed}:{example.id}")
        chosen: list[Reference] = []
        for grade in sorted(grades if grades is not None else by_grade, reverse=True):
            candidates = by_grade.get(float(grade), [])
            chosen.extend(rng.sample(candidates, min(per_grade, len(candidates))))
        return tuple(sorted(chosen, key=lambda r: -float(r.grade)))


class GeneratedReferences:
    """References of descending quality written by the LM, one list per question, cached.

    The best is the gold answer when there is one, else the LM's own answer; each next one is the
    LM's rewrite of the previous into a clearly worse answer. Grades run n-1 (best) .. 0.
    """

    def __init__(self, lm: JudgeLM, *, max_tokens: int = 160):
        self.lm, self.max_tokens = lm, max_tokens
        self._lists: dict[tuple[str, str, int], tuple[Reference, ...]] = {}
        self._lock = threading.Lock()

    def for_example(self, example: Example, n: int) -> tuple[Reference, ...]:
        question = example.question or ""
        gold = example.references[0].text if example.references else None
        key = (question, gold or "", n)
        with self._lock:
            if key not in self._lists:
                self._lists[key] = self._write(question, gold, n)
            return self._lists[key]

    def _write(self, question: str, gold: str | None, n: int) -> tuple[Reference, ...]:
        if gold is None:
            gold = self._ask("Answer the question as well as you can: accurate, complete and to the point.",
                             f"Question: {question}")
        answers = [gold]
        for _ in range(n - 1):
            answers.append(self._ask(
                "Rewrite the answer below into a clearly worse answer to the same question: leave out an important "
                "point, blur a detail or add a small mistake. Write only the new answer.",
                f"Question: {question}\n\nAnswer: {answers[-1]}"))
        return tuple(Reference(text, float(n - 1 - i)) for i, text in enumerate(answers))

    def _ask(self, instruction: str, content: str) -> str:
        messages = [{"role": "system", "content": instruction}, {"role": "user", "content": content}]
        return self.lm.generate(messages, max_tokens=self.max_tokens).text.strip()
