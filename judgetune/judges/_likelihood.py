"""Likelihood judge: how probable the LM finds the answer given the source, token by token.

The likelihood reading of an LM (GPTScore, Fu et al. 2023; BARTScore, Yuan et al. 2021): nothing
is generated and no label is named. The prompt is an instruction, ``k`` demonstrations (source and
answer of highly rated training examples, in the same layout) and the example's source text (its
reference, question or context); the score is the length-normalized log-probability of the answer
after it. ``direction`` turns the question around (the source given the answer, recall-like) or
averages both (F-style). Scores are bounded: the mean and sum of log-probabilities are clipped
at a floor (the unclipped values stay in ``detail``), the per-token probability lies in [0, 1].
For a pairwise example the score is answer_b's minus answer's.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

import dspy
import numpy as np

from judgetune.datasets import Example
from judgetune.judges._base import Judge, PromptState, demo_examples
from judgetune.judges._baselines import TARGETS, target_text
from judgetune.judges._prompting import make_signature
from judgetune.judges._space import Choice, IntRange, Param
from judgetune.judges._spec import JudgeSpec
from judgetune.judges._verdict import Verdict
from judgetune.lm import JudgeLM, TargetLogprobs

DIRECTIONS = ("answer", "source", "both")  # p(answer | source), p(source | answer), their mean
NORMALIZATIONS = ("mean", "sum", "prob")  # mean or summed log-probability per token, or its exp (geometric mean p)
FLOORS = {"mean": -10.0, "sum": -1000.0}  # where the log-probability scores are clipped
MAX_DEMOS = 6
SOURCES = ("reference", "question", "context")  # what ``source=auto`` looks for, in this order
DEMO_QUANTILE = 0.75  # demos come from training examples rated at or above this quantile of the labels


class LikelihoodJudge(PromptState, Judge):
    """Length-normalized log-probability of the answer (or the source) under an instruction and demos.

    The prompt state lives in two ``dspy.Predict`` sub-modules, one per direction: ``predict``
    (source -> answer) and ``reverse`` (answer -> source). Each holds its instruction
    (``signature.instructions``) and the demos (``demos``, the same examples in both), so
    ``named_predictors()``, ``dump_state()`` and ``load_state()`` carry what a frozen config holds;
    the prompt of a direction is built from its predictor's state. The judge lays the prompt out
    itself (chat turns or plain ``Input:/Output:`` text) rather than in DSPy's field format, since
    the scored text must follow the prompt directly.

    Args:
        lm: an in-process model (exact, batched over the cached prompt prefix), or a server with a
            completions endpoint that echoes prompt log-probabilities (then ``chat=False``).
        demo_pool: labeled examples to draw demos from (the highly rated ones).
        demos: exact demos (a frozen config), instead of drawing from the pool.
        instruction_text: the instruction for the answer direction (a frozen config's, or the user's).
            When it is one of ``PROMPTS``' answer-direction texts the reverse direction gets that pair's
            other text; any other text serves both directions.
        demo_seed: with the ``demo_draw`` knob, which demos are drawn.
    """

    kind = "likelihood"
    uses_prompt = True
    # instruction name -> (text when the answer is scored, text when the source is scored)
    PROMPTS: ClassVar[dict[str, tuple[str, str]]] = {
        "respond": ("Write a response to the text below.",
                    "Write the text that the response below was written for."),
        "paraphrase": ("Say the same thing as the text below in other words, keeping its meaning.",
                       "Say the same thing as the text below in other words, keeping its meaning."),
        "answer": ("Write a passage that answers the question or request below correctly and directly.",
                   "Write the question that the passage below answers."),
        "faithful": ("Write a statement that the text below fully supports, adding nothing it does not say.",
                     "Write a text that contains everything the statement below says."),
        "summary": ("Sum up the main points of the text below in a few sentences.",
                    "Write the full text that the summary below condenses."),
    }
    INSTRUCTIONS: ClassVar[dict[str, str]] = {name: texts[0] for name, texts in PROMPTS.items()}

    def __init__(self, lm: JudgeLM | None = None, *, demo_pool: Sequence[Example] = (),
                 demos: Sequence[Example] | None = None, instruction_text: str | None = None, demo_seed: int = 0,
                 label_range: tuple[float, float] | None = None, **params: Any):
        super().__init__(lm, **params)
        self.label_range = label_range
        self.predict = dspy.Predict(make_signature("", ("source",), "answer", "the text that is scored"))
        self.reverse = dspy.Predict(make_signature("", ("answer",), "source", "the text that is scored"))
        self.instruction = instruction_text or self.INSTRUCTIONS[self.params["instruction"]]
        self.demos = list(demos) if demos is not None else high_rated_demos(
            demo_pool, self.params["k"], seed=demo_seed * 1000 + self.params["demo_draw"])

    def prompt_predictors(self) -> list[tuple[str, dspy.Predict]]:
        return [("predict", self.predict), ("reverse", self.reverse)]

    def instruction_for(self, name: str, text: str) -> str:
        """The answer direction takes ``text`` (what a frozen config holds); the reverse direction its
        named pair's second text, or ``text`` itself for an instruction of the user's."""
        if name == "predict":
            return text
        return next((pair[1] for pair in self.PROMPTS.values() if pair[0] == text), text)

    @classmethod
    def data_defaults(cls, examples: Sequence[Example], label_range: tuple[float, float] | None) -> dict[str, Any]:
        """The source the examples carry (reference, else question, else context): ``source`` is not searched.
        Where the source is a question that most examples share (several answers to one question),
        ``direction`` is ``source``: P(question | answer) scores one text under each answer, so the answers
        are compared on the same tokens (query likelihood; Sachan et al., UPR, 2022), where P(answer | question)
        rewards short and common answers. Measured on the grading model, TREC-DL's passages ranked at 0.436 per
        question against 0.105 (the TREC-DL ``-directions`` score matrix in benchmarks/results). A shared reference
        or context keeps ``answer``: nothing measured says otherwise."""
        if not examples:
            return {}
        counts = {name: sum(bool(target_text(e, name)) for e in examples) for name in SOURCES}
        best = max(SOURCES, key=lambda name: counts[name])  # ties: the first (reference, question, context)
        if not counts[best]:
            return {}
        if best != "question":
            return {"source": best}
        questions = Counter(text for e in examples if (text := target_text(e, best)))
        shared = sum(n for n in questions.values() if n > 1)
        return {"source": best, **({"direction": "source"} if shared > counts[best] / 2 else {})}

    def spec(self) -> JudgeSpec:
        return replace(super().spec(), instruction=self.instruction, demos=tuple(self.demos))

    @classmethod
    def space(cls) -> list[Param]:
        return [Choice("instruction", tuple(cls.PROMPTS), "respond"), IntRange("k", 0, MAX_DEMOS, 0),
                IntRange("demo_draw", 0, 7, 0), Choice("direction", DIRECTIONS, "answer"),
                Choice("normalization", NORMALIZATIONS, "mean"), Choice("chat", (True, False), True),
                Choice("source", TARGETS, "auto", searched=False)]

    @property
    def score_range(self) -> tuple[float, float]:
        norm = self.params["normalization"]
        return (0.0, 1.0) if norm == "prob" else (FLOORS[norm], 0.0)

    def range_for(self, examples: Sequence[Example]) -> tuple[float, float]:
        low, high = self.score_range
        width = high - low
        return (-width, width) if any(ex.answer_b is not None for ex in examples) else (low, high)

    def directions(self) -> tuple[str, ...]:
        return ("answer", "source") if self.params["direction"] == "both" else (self.params["direction"],)

    def predictor(self, direction: str) -> dspy.Predict:
        """The sub-module whose instruction and demos make this direction's prompt."""
        return self.predict if direction == "answer" else self.reverse

    def _prefix_and_turns(self, direction: str) -> tuple[list[dict[str, str]], str]:
        """The shared part of every prompt in this direction: chat messages, or the plain-text head."""
        predictor = self.predictor(direction)
        instruction = predictor.signature.instructions
        pairs = [(s, a) for s, a in (demo_pair(d, self.params["source"]) for d in demo_examples(predictor.demos))
                 if s and a]
        if direction == "source":
            pairs = [(a, s) for s, a in pairs]
        if self.params["chat"]:
            messages = [{"role": "system", "content": instruction}]
            for given, wanted in pairs:
                messages += [{"role": "user", "content": given}, {"role": "assistant", "content": wanted}]
            return messages, ""
        head = instruction + "\n\n" + "".join(f"Input:\n{g}\nOutput:\n{w}\n\n" for g, w in pairs)
        return [], head

    def prompt(self, given: str, direction: str, prefix: tuple[list[dict[str, str]], str] | None = None) -> str:
        """The full prompt before the scored text (``prefix``: this direction's ``_prefix_and_turns``)."""
        messages, head = prefix or self._prefix_and_turns(direction)
        if self.params["chat"]:
            return self.lm.chat_prompt([*messages, {"role": "user", "content": given}])
        return f"{head}Input:\n{given}\nOutput:\n"

    def _value(self, scored: TargetLogprobs) -> float:
        norm = self.params["normalization"]
        if norm == "prob":
            return math.exp(scored.mean)
        return max(FLOORS[norm], scored.mean if norm == "mean" else scored.total)

    def forward(self, example: Example) -> Verdict:
        return self.judge_all([example])[0]

    def judge_all(self, examples: Sequence[Example], *, progress: bool = False) -> list[Verdict]:
        """All examples at once: per direction, one batched call over the prompts' shared prefix."""
        jobs: list[tuple[int, int, str, str]] = []  # (example, answer slot, direction, ...) -> a scored pair
        verdicts: list[Verdict | None] = [None] * len(examples)
        for i, ex in enumerate(examples):
            source = target_text(ex, self.params["source"])
            if not source:
                verdicts[i] = Verdict.failed(f"no {self.params['source']} text to score the answer against")
                continue
            answers = [ex.answer] if ex.answer_b is None else [ex.answer, ex.answer_b]
            if not all(a.strip() for a in answers):
                verdicts[i] = Verdict.failed("an empty answer has no likelihood")
                continue
            jobs.extend((i, slot, source, answer) for slot, answer in enumerate(answers))
        results: dict[tuple[int, int, str], Any] = {}
        for direction in self.directions():
            prefix = self._prefix_and_turns(direction)
            pairs = [(self.prompt(s, direction, prefix), a) if direction == "answer" else
                     (self.prompt(a, direction, prefix), s) for _, _, s, a in jobs]
            for (i, slot, _, _), outcome in zip(jobs, self.lm.target_logprobs(pairs)):
                results[(i, slot, direction)] = outcome
        for i, ex in enumerate(examples):
            if verdicts[i] is None:
                verdicts[i] = self._verdict(ex, [[results[(i, slot, d)] for d in self.directions()]
                                                 for slot in range(1 if ex.answer_b is None else 2)])
        return verdicts

    def _verdict(self, example: Example, outcomes: list[list[Any]]) -> Verdict:
        errors = [o.error for per_answer in outcomes for o in per_answer if not o.ok]
        if errors:
            return Verdict.failed(f"error: {errors[0]}")
        values, detail = [], {}
        for slot, per_answer in enumerate(outcomes):
            values.append(float(np.mean([self._value(o.value) for o in per_answer])))
            for direction, o in zip(self.directions(), per_answer):
                detail[f"{'ab'[slot]}_{direction}"] = {"mean": o.value.mean, "sum": o.value.total,
                                                       "tokens": len(o.value.logprobs)}
        score = values[0] if len(values) == 1 else values[1] - values[0]
        usage = {"prompt_tokens": sum(o.value.prompt_tokens + len(o.value.logprobs) for p in outcomes for o in p)}
        return Verdict(float(score), {}, True, "", usage, detail)

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "instruction": self.instruction, "label_range": self.label_range,
                "demos": [d.to_dict() for d in self.demos]}


def demo_pair(example: Example, source: str) -> tuple[str | None, str]:
    """A demo's (source, answer): for a pairwise example, the preferred answer."""
    answer = example.answer
    if example.answer_b is not None and (example.preference or 0) > 0:
        answer = example.answer_b
    return target_text(example, source), answer


def high_rated_demos(pool: Sequence[Example], k: int, *, seed: int) -> list[Example]:
    """``k`` examples drawn (seeded) among those rated at or above the pool's DEMO_QUANTILE (ties kept);
    for pairwise examples, those with a clear preference."""
    if k == 0:
        return []
    graded = [ex for ex in pool if ex.answer_b is None and ex.label is not None]
    if graded:
        cut = float(np.quantile([ex.label for ex in graded], DEMO_QUANTILE))
        candidates = [ex for ex in graded if ex.label >= cut]
    else:
        candidates = [ex for ex in pool if ex.answer_b is not None and (ex.preference or 0) != 0]
    candidates.sort(key=lambda ex: ex.id)
    return random.Random(seed).sample(candidates, min(k, len(candidates)))
