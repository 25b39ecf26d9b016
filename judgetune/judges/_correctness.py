"""Correctness judge: pass / partially pass / fail against a reference, scored 2 / 1 / 0 as the
expected value of the three labels' probabilities."""

from __future__ import annotations

from judgetune.datasets import Example
from judgetune.judges._base import LMJudge, example_inputs, nearest_label
from judgetune.judges._verdict import Verdict

LABELS = ["pass", "partially pass", "fail"]
VALUES = [2.0, 1.0, 0.0]


class CorrectnessJudge(LMJudge):
    kind = "correctness"
    INSTRUCTIONS = {
        "faithful": "Decide whether the answer is correct with respect to the reference. Say pass when it conveys "
                    "the reference's meaning, partially pass when it gets part of it right, fail when it does not.",
        "equivalence": "Is the answer equivalent to the reference? pass: same meaning; partially pass: overlapping "
                       "meaning with something missing or added; fail: different meaning.",
        "grader": "You grade answers with a reference solution. Award pass only if nothing essential is missing or "
                  "wrong, partially pass if the core is right but details are off, and fail otherwise.",
        "lenient": "Check the answer against the reference. Minor omissions and different wording are fine (pass); "
                   "an answer that is only half right is partially pass; a wrong or unrelated answer is fail.",
    }
    score_range = (0.0, 2.0)
    OUTPUT, OUTPUT_DESCRIPTION = "verdict", "exactly one of: pass, partially pass, fail"

    def forward(self, example: Example) -> Verdict:
        if not example.references:
            return Verdict.failed("the correctness judge needs a reference answer; this example has none")
        description = "exactly one of: pass, partially pass, fail"
        demos = [{**example_inputs(d), "verdict": nearest_label(self.demo_value(d, self.score_range), LABELS, VALUES)}
                 for d in self.demos if d.references]
        return self.ask(example_inputs(example), "verdict", description, LABELS, VALUES, demos)
