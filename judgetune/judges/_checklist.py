"""Checklist judge: the criterion as a few yes/no questions, each answered as P(yes), combined by a
fitted model into one score on the human scale.

1. The checklist is the judge's instruction: one question per line, each asked so that "yes" means
   a better answer (a line that is no question becomes "Does the answer meet this: ...?"). It comes
   from the named generic checklists, the user's own (``--instructions``), the criterion, or the
   proposer LM (which writes and refines checklists as it does instructions).
2. Each question is asked in DSPy's chat format with the item's fields first and the question last,
   so the prompts of one item's questions share everything up to the question: in-process they are
   scored together over that shared prefix (one pass over the item, then one short pass per
   question). P(yes) is read at the answer position, renormalized over yes and no (capitalized
   spellings folded in). For a pairwise item each answer gets its own P(yes); the feature is
   answer_b's minus answer's.
3. ``combiner``: ``monotone`` (ridge with non-negative weights, the hybrid's ``HybridModel``: no
   question can lower the score by a "yes"), ``ridge`` (free signs) or ``mean`` (the plain mean of
   the answers, nothing fitted). The fitted model and the questions it was fitted on are the judge's
   ``fitted`` state in judge.json; a frozen checklist judge scores an item from that state and the
   item alone.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, ClassVar

import dspy
import numpy as np

from judgetune._progress import progress as _progress
from judgetune.datasets import Example
from judgetune.errors import JudgetuneError
from judgetune.judges._base import Judge, PromptState, example_inputs
from judgetune.judges._hybrid_model import HybridModel
from judgetune.judges._prompting import make_signature, marker
from judgetune.judges._space import Choice, Param
from judgetune.judges._spec import JudgeSpec
from judgetune.judges._verdict import Verdict
from judgetune.lm import JudgeLM

__all__ = ["COMBINERS", "ChecklistError", "ChecklistJudge", "parse_checklist"]

COMBINERS = ("monotone", "ridge", "mean")
MAX_QUESTIONS = 8
CHUNK = 16  # items whose questions go to the model in one call (their prompts share the system prompt)
LEAD = ("Read the item and answer the check question about the answer with yes or no. Answer yes only when "
        "the answer clearly passes the check.")
ANSWER_FIELD = "verdict"
LABELS = ("yes", "no", "Yes", "No")  # read together; the capitalized spellings count for their label
_BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)]|q\d+[.:)])\s*", re.IGNORECASE)


class ChecklistError(JudgetuneError, ValueError):
    """A checklist text that gives no usable questions."""


def parse_checklist(text: str) -> list[str]:
    """The questions of a checklist text: one per non-empty line, bullets and numbering removed; a
    line that is no question becomes one ("Does the answer meet this: ...?").

    Raises:
        ChecklistError: no question, or more than ``MAX_QUESTIONS``.
    """
    questions = []
    for line in text.splitlines():
        line = _BULLET.sub("", line).strip()
        if not line:
            continue
        if not line.endswith("?"):
            line = f"Does the answer meet this: {line.rstrip('.:;')}?"
        questions.append(line)
    if not questions:
        raise ChecklistError("a checklist needs at least one question (one per line)")
    if len(questions) > MAX_QUESTIONS:
        raise ChecklistError(f"a checklist holds at most {MAX_QUESTIONS} questions, found {len(questions)}")
    return questions


class ChecklistJudge(PromptState, Judge):
    """Yes/no questions answered as P(yes), combined by a fitted model; see the module docstring.

    The prompt state is one ``dspy.Predict`` (``predict``): its signature instruction is the checklist
    (one question per line) and its demos the judge's demos (none are shown: the human labels grade
    the whole answer, not each question). ``dump_state()``/``load_state()`` carry both. Each question's
    prompt is DSPy's ChatAdapter format of the signature ``LEAD`` + item fields + ``check`` -> ``verdict``.
    """

    kind = "checklist"
    uses_prompt = True
    fits = True
    seeded = True
    PROPOSES: ClassVar[str] = "checklist"  # what a proposer LM writes for this judge
    INSTRUCTIONS: ClassVar[dict[str, str]] = {
        "content": "Does the answer state the main point of the reference?\n"
                   "Does the answer include the details of the reference?\n"
                   "Does the answer avoid claims that the reference does not make?\n"
                   "Would a reader learn the same facts from the answer as from the reference?",
        "quality": "Does the answer respond to what the question asks?\n"
                   "Is the answer correct?\n"
                   "Is the answer complete?\n"
                   "Does the answer stay free of irrelevant or made-up content?",
        "faithful": "Is every statement of the answer supported by the text it is checked against?\n"
                    "Does the answer keep names, numbers and dates as the text gives them?\n"
                    "Does the answer avoid adding information the text does not contain?",
    }

    def __init__(self, lm: JudgeLM | None = None, *, demo_pool: Sequence[Example] = (),
                 label_range: tuple[float, float] | None = None, instruction_text: str | None = None,
                 demo_seed: int = 0, demos: Sequence[Example] | None = None, fitted: dict[str, Any] | None = None,
                 seed: int = 0, **params: Any):
        super().__init__(lm, **params)
        self.label_range, self.seed = label_range, seed
        text = instruction_text or self.INSTRUCTIONS[self.params["instruction"]]
        parse_checklist(text)  # a bad checklist is refused here, not at the first item
        self.predict = dspy.Predict(make_signature(text, ("question", "reference", "answer", "check"), ANSWER_FIELD,
                                                   "yes or no"))
        self.demos = list(demos or [])
        self.model_: HybridModel | None = None
        self.fitted_questions: list[str] | None = None
        if fitted is not None:
            self.check_fitted(fitted)
            if fitted["questions"] != self.questions:
                raise ValueError(f"fitted: questions: fitted on {fitted['questions']}, but the checklist is "
                                 f"{self.questions}")
            self.fitted_questions = list(fitted["questions"])
            self.model_ = HybridModel.from_dict(fitted["model"]) if fitted.get("model") is not None else None

    @classmethod
    def space(cls) -> list[Param]:
        return [Choice("instruction", tuple(cls.INSTRUCTIONS), "content"), Choice("combiner", COMBINERS, "monotone"),
                Choice("alpha", (0.1, 1.0, 10.0), 1.0)]

    @classmethod
    def data_defaults(cls, examples: Sequence[Example], label_range: tuple[float, float] | None) -> dict[str, Any]:
        """The generic checklist that fits the fields most examples carry: ``content`` with references,
        ``faithful`` with a context, ``quality`` otherwise."""
        if not examples:
            return {}
        half = len(examples) / 2
        if sum(bool(e.references) for e in examples) > half:
            return {"instruction": "content"}
        if sum(bool(e.context) for e in examples) > half:
            return {"instruction": "faithful"}
        return {"instruction": "quality"}

    @classmethod
    def check_fitted(cls, fitted: dict[str, Any]) -> None:
        questions = fitted.get("questions")
        if not isinstance(questions, list) or not questions or not all(isinstance(q, str) and q for q in questions):
            raise ValueError("fitted: questions: expected the list of questions the combiner was fitted on")
        if fitted.get("model") is not None:
            model = HybridModel.from_dict(fitted["model"])
            if len(model.features) != len(questions):
                raise ValueError(f"fitted: model: {len(model.features)} features for {len(questions)} questions")

    @property
    def questions(self) -> list[str]:
        return parse_checklist(self.instruction)

    @property
    def score_range(self) -> tuple[float, float]:
        if self.params["combiner"] == "mean":
            return (0.0, 1.0)
        if self.model_ is None:
            raise JudgetuneError("the checklist judge is not fitted: call fit(training examples) or load a frozen config")
        return self.model_.score_range_

    def range_for(self, examples: Sequence[Example]) -> tuple[float, float]:
        if self.params["combiner"] == "mean" and any(e.answer_b is not None for e in examples):
            return (-1.0, 1.0)
        return self.score_range

    # -- asking the questions ------------------------------------------------------------------------

    def prompts(self, example: Example, answer: str) -> list[list[dict[str, str]]]:
        """One chat prompt per question: the item's fields first, the question last (a shared prefix)."""
        inputs = example_inputs(replace(example, answer=answer), with_context=True)
        signature = make_signature(LEAD, [*inputs, "check"], ANSWER_FIELD, "yes or no")
        adapter = dspy.ChatAdapter()
        shown = [dspy.Example(**d.to_dict()) for d in self.demos]
        return [adapter.format(signature, shown, {**inputs, "check": q}) for q in self.questions]

    def answers(self, examples: Sequence[Example]) -> list[np.ndarray | str]:
        """Per example its P(yes) per question (pairwise: answer_b's minus answer's), or why it failed."""
        if self.lm is None:
            raise JudgetuneError("the checklist judge needs an LM (pass --lm SPEC, e.g. local:smollm2)")
        if not self.lm.in_process and self.lm.label_position is None:
            raise JudgetuneError(f"{self.lm.spec}: the checklist judge reads P(yes) at the answer position; it needs an "
                                 "in-process model or a server whose prompt can end at the label (see docs/lms.md)")
        slots: list[tuple[int, int]] = []  # (example, answer slot) per block of questions
        requests = []
        prefix = f"{marker(ANSWER_FIELD)}\n"
        for i, ex in enumerate(examples):
            for slot, answer in enumerate([ex.answer] if ex.answer_b is None else [ex.answer, ex.answer_b]):
                slots.append((i, slot))
                requests += [(messages, list(LABELS), prefix) for messages in self.prompts(ex, answer)]
        outcomes = self.lm.label_distributions(requests)
        n = len(self.questions)
        probs: dict[tuple[int, int], list[float] | str] = {}
        for k, key in enumerate(slots):
            values: list[float] = []
            for outcome in outcomes[k * n:(k + 1) * n]:
                if not outcome.ok:
                    probs[key] = f"error: {outcome.error}"
                    break
                lp = outcome.value.logprobs
                yes, no = np.logaddexp(lp[0], lp[2]), np.logaddexp(lp[1], lp[3])
                if yes == -math.inf and no == -math.inf:
                    probs[key] = "neither yes nor no got any probability at the answer position"
                    break
                values.append(float(1 / (1 + np.exp(no - yes))))
            else:
                probs[key] = values
        out: list[np.ndarray | str] = []
        for i, ex in enumerate(examples):
            parts = [probs[(i, slot)] for slot in range(1 if ex.answer_b is None else 2)]
            failed = next((p for p in parts if isinstance(p, str)), None)
            if failed is not None:
                out.append(failed)
            else:
                out.append(np.asarray(parts[0]) if len(parts) == 1 else np.asarray(parts[1]) - np.asarray(parts[0]))
        return out

    # -- fitting and scoring -------------------------------------------------------------------------

    def fit(self, examples: Sequence[Example]) -> ChecklistJudge:
        """Fit the combiner on labeled training examples (their answers to the questions against their
        labels). Items the LM could not answer are left out of the fit (and logged by count).

        Raises:
            JudgetuneError: fewer than 4 labeled examples answered.
        """
        labeled = [e for e in examples if e.judgment is not None]
        self.fitted_questions, self.model_ = self.questions, None
        if self.params["combiner"] == "mean":
            return self
        answered = [(a, e) for a, e in zip(self.answers(labeled), labeled) if not isinstance(a, str)]
        if len(answered) < 4:
            raise JudgetuneError(f"the checklist judge needs at least 4 labeled training examples it can answer, got "
                                 f"{len(answered)} of {len(labeled)}")
        x = np.vstack([a for a, _ in answered])
        names = [f"q{i + 1}" for i in range(x.shape[1])]
        self.model_ = HybridModel(names, model="ridge", alpha=self.params["alpha"], seed=self.seed,
                                  monotone=self.params["combiner"] == "monotone").fit(
            x, [e.judgment for _, e in answered], [e.group_key for _, e in answered])
        return self

    def forward(self, example: Example) -> Verdict:
        return self.judge_all([example])[0]

    def judge_all(self, examples: Sequence[Example], *, progress: bool = False) -> list[Verdict]:
        """A score per example: the combiner over its questions' answers (a failed item says why)."""
        if self.params["combiner"] != "mean" and self.model_ is None:
            raise JudgetuneError("the checklist judge is not fitted: call fit(training examples) or load a frozen config")
        chunks = range(0, len(examples), CHUNK)  # the same chunks whether progress is shown or not
        answered = [a for start in _progress(chunks, desc=f"checklist ({CHUNK} items a step)", enabled=progress)
                    for a in self.answers(examples[start:start + CHUNK])]
        verdicts = []
        for answers in answered:
            if isinstance(answers, str):
                verdicts.append(Verdict.failed(answers))
                continue
            if self.model_ is None:
                score = float(np.mean(answers))
            else:
                score = float(self.model_.predict(answers[None, :], ["item"])[0][0])
            detail = {"answers": {q: float(p) for q, p in zip(self.questions, answers)}}
            verdicts.append(Verdict(score, {}, True, "", {}, detail))
        return verdicts

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "instruction": self.instruction, "label_range": self.label_range,
                "demos": [d.to_dict() for d in self.demos], "fitted": self.fitted_state()}

    def fitted_state(self) -> dict[str, Any] | None:
        if self.fitted_questions is None:
            return None
        return {"questions": self.fitted_questions, "model": None if self.model_ is None else self.model_.to_dict()}

    def spec(self) -> JudgeSpec:
        return replace(super().spec(), instruction=self.instruction, demos=tuple(self.demos),
                       fitted=self.fitted_state())
