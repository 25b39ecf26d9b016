"""The Judge contract, and the shared machinery of judges that prompt an LM."""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, ClassVar

import dspy
import numpy as np

from judgetune.datasets import Example
from judgetune.judges._prompting import SCORING, forced_choice, format_messages, make_signature
from judgetune.judges._space import Choice, IntRange, Param, check_params
from judgetune.judges._verdict import Verdict
from judgetune.lm import JudgeLM, run_items

log = logging.getLogger(__name__)
MAX_DEMOS = 8


class Judge(dspy.Module):
    """Maps an Example to a Verdict.

    Subclasses set ``kind``, declare their knobs in :meth:`space` and implement :meth:`forward`.
    A judge holds its settings (``params``) and never results: every call returns a new Verdict.
    ``score_range`` is the range of ``Verdict.score``.
    """

    kind: ClassVar[str]
    needs_lm: ClassVar[bool] = True

    def __init__(self, lm: JudgeLM | None = None, **params: Any):
        super().__init__()
        if self.needs_lm and lm is None:
            raise ValueError(f"judge {self.kind} needs an LM (pass --lm SPEC, e.g. local:smollm2)")
        self.lm = lm
        self.params = check_params(self.space(), params, judge=self.kind)

    @classmethod
    def space(cls) -> list[Param]:
        """The tunable knobs; empty for a judge without any."""
        return []

    @property
    def score_range(self) -> tuple[float, float]:
        raise NotImplementedError

    def range_for(self, examples: Sequence[Example]) -> tuple[float, float]:
        """The range of the scores this judge gives these examples (``score_range`` unless the data changes it)."""
        return self.score_range

    def forward(self, example: Example) -> Verdict:
        raise NotImplementedError

    def judge_all(self, examples: Sequence[Example], *, progress: bool = False) -> list[Verdict]:
        """A Verdict per Example, in order; an Example whose judgment raised gets a failed Verdict."""
        run = self.lm.run if self.lm is not None else (
            lambda fn, items, progress: run_items(fn, items, concurrency=1, progress=progress, description=self.kind))
        verdicts = []
        for outcome in run(self, list(examples), progress=progress):
            if outcome.ok:
                verdicts.append(outcome.value)
            else:
                log.warning("%s: item %d failed: %s", self.kind, outcome.index, outcome.error)
                verdicts.append(Verdict.failed(f"error: {outcome.error}"))
        return verdicts

    def settings(self) -> dict[str, Any]:
        """The judge's settings as plain JSON (the part of a frozen config that is the judge's own)."""
        return {"judge": self.kind, "params": dict(self.params)}


def pick_demos(pool: Sequence[Example], k: int, *, seed: int, exclude: Sequence[str] = ()) -> list[Example]:
    """``k`` labeled Examples stratified by label: one per label in turn (labels in a seeded order),
    each label's Examples in a seeded order. Unlabeled Examples and ``exclude``d ids never appear."""
    rng = random.Random(seed)
    by_label: dict[float, list[Example]] = defaultdict(list)
    excluded = set(exclude)
    for ex in pool:
        if ex.id not in excluded and (ex.label is not None or ex.preference is not None):
            by_label[ex.label if ex.label is not None else ex.preference].append(ex)
    buckets = [by_label[label] for label in sorted(by_label)]
    for bucket in buckets:
        rng.shuffle(bucket)
    rng.shuffle(buckets)
    picked: list[Example] = []
    while len(picked) < k and any(buckets):
        for bucket in buckets:
            if bucket and len(picked) < k:
                picked.append(bucket.pop())
    return picked


def nearest_label(value: float, labels: Sequence[str], values: Sequence[float]) -> str:
    return labels[int(np.argmin([abs(value - v) for v in values]))]


class LMJudge(Judge):
    """A judge that asks an LM one or more forced-choice questions in DSPy's chat format.

    The instruction comes from the class's pool (``INSTRUCTIONS``, the method-faithful one first)
    unless ``instruction_text`` replaces it; demos are human-labeled Examples, ``k`` of them picked
    from ``demo_pool`` unless ``demos`` gives them; ``label_range`` is the human scale the demos' labels are on. A judgment
    whose labels got at most ``min_label_mass`` of the probability fails (see ``forced_choice``).
    """

    INSTRUCTIONS: ClassVar[dict[str, str]]

    def __init__(self, lm: JudgeLM | None = None, *, demo_pool: Sequence[Example] = (),
                 label_range: tuple[float, float] | None = None, instruction_text: str | None = None,
                 demo_seed: int = 0, max_reasoning_tokens: int = 160, min_label_mass: float = 0.0,
                 demos: Sequence[Example] | None = None, **params: Any):
        super().__init__(lm, **params)
        self.instruction = instruction_text or self.INSTRUCTIONS[self.params["instruction"]]
        self.label_range = label_range
        self.max_reasoning_tokens, self.min_label_mass = max_reasoning_tokens, min_label_mass
        # exact demos (a frozen config) win over picking k of them from the pool
        self.demos = list(demos) if demos is not None else pick_demos(demo_pool, self.params.get("k", 0), seed=demo_seed)

    @classmethod
    def lm_space(cls) -> list[Param]:
        return [Choice("instruction", tuple(cls.INSTRUCTIONS), next(iter(cls.INSTRUCTIONS))),
                IntRange("k", 0, MAX_DEMOS, 0), Choice("reasoning", (False, True), False),
                Choice("scoring", SCORING, "expected")]

    @classmethod
    def space(cls) -> list[Param]:
        return cls.lm_space()

    def ask(self, inputs: dict[str, str], output: str, output_description: str, labels: Sequence[str],
            values: Sequence[float], demos: Sequence[dict] = ()) -> Verdict:
        """One forced-choice question: the instruction, the demos, these inputs; the score is the expected value."""
        signature = make_signature(self.instruction, list(inputs), output, output_description,
                                   reasoning=self.params.get("reasoning", False))
        messages = format_messages(signature, demos, inputs)
        return forced_choice(self.lm, messages, output, labels, values, reasoning=self.params.get("reasoning", False),
                             max_reasoning_tokens=self.max_reasoning_tokens, min_label_mass=self.min_label_mass,
                             scoring=self.params.get("scoring", "expected"))

    def demo_value(self, example: Example, score_range: tuple[float, float]) -> float:
        """A demo's human label mapped from ``label_range`` onto ``score_range`` (linear)."""
        value = example.label if example.label is not None else example.preference
        if self.label_range is None or self.label_range == score_range:
            return float(value)
        (lo, hi), (a, b) = self.label_range, score_range
        return a + (float(value) - lo) * (b - a) / (hi - lo)

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "instruction": self.instruction, "label_range": self.label_range,
                "demos": [d.to_dict() for d in self.demos]}


def example_inputs(example: Example, *, with_context: bool = False) -> dict[str, str]:
    """The text fields of an Example a judge shows the LM: question, reference (the best one),
    context (numbered chunks) when asked for, and the answer."""
    inputs = {}
    if example.question:
        inputs["question"] = example.question
    if example.references:
        inputs["reference"] = example.references[0].text
    if with_context and example.context:
        inputs["context"] = "\n".join(f"[{i}] {chunk}" for i, chunk in enumerate(example.context, 1))
    inputs["answer"] = example.answer
    return inputs
