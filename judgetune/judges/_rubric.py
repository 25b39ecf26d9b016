"""Rubric judge: an integer score on a configurable scale, read as the expected value of the
score distribution (plain, or after a generated reasoning)."""

from __future__ import annotations

from judgetune.datasets import Example
from judgetune.judges._base import LMJudge, example_inputs, nearest_label
from judgetune.judges._space import Choice, Param
from judgetune.judges._verdict import Verdict

SCALES = {"1-5": (1, 5), "0-5": (0, 5), "1-3": (1, 3), "1-10": (1, 10)}


class RubricJudge(LMJudge):
    kind = "rubric"
    INSTRUCTIONS = {
        "faithful": "Judge the answer against the reference (and the question, when given). Give a score on the "
                    "stated integer scale: the lowest score means the answer shares nothing of the reference's "
                    "content, the highest means it says the same thing completely and correctly.",
        "similarity": "Rate how close in meaning the answer is to the reference. Ignore wording and style; count "
                      "only whether the same facts and claims are made. Higher means closer in meaning.",
        "strict": "You are a strict grader. Start from the lowest score and raise it only for content of the "
                  "reference that the answer states correctly. Missing details and any added or wrong claims "
                  "keep the score low.",
        "helpful": "Grade how well the answer would serve a reader who needs what the reference (or the question) "
                   "asks for: relevant, correct and complete answers score high, off-topic or wrong ones low.",
    }

    OUTPUT, OUTPUT_DESCRIPTION = "score", "an integer on the judge's scale, from worst to best"

    @classmethod
    def space(cls) -> list[Param]:
        return [*cls.lm_space(), Choice("scale", tuple(SCALES), "1-5")]

    @classmethod
    def data_defaults(cls, examples, label_range):
        return {"scale": "0-5"} if label_range == (0.0, 5.0) else {}

    @property
    def score_range(self) -> tuple[float, float]:
        return SCALES[self.params["scale"]]

    def _labels(self) -> tuple[list[str], list[float]]:
        low, high = self.score_range
        values = list(range(low, high + 1))
        return [str(v) for v in values], [float(v) for v in values]

    def forward(self, example: Example) -> Verdict:
        labels, values = self._labels()
        low, high = self.score_range
        description = f"an integer from {low} (worst) to {high} (best)"
        demos = [{**example_inputs(d), "score": nearest_label(self.demo_value(d, self.score_range), labels, values)}
                 for d in self.demos]
        return self.ask(example_inputs(example), "score", description, labels, values, demos)
