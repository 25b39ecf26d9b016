"""Pairwise judge: which of two answers is better, asked in both orders and averaged so that a
preference for a position cancels out.

Two modes. ``answers``: answer vs answer_b; the score is the preference for answer_b in [-1, 1]
(positive: answer_b better, 0: tie). ``references``: the candidate against each graded reference the
item carries (LINKAGE's pairwise baseline; the ``linkage`` protocol draws them from its question); the
score is the grade-weighted mean of its win rates (a tie counts half), in [0, 1], each reference
weighing its grade minus the lowest grade plus one.
"""

from __future__ import annotations

from judgetune.datasets import Example
from judgetune.judges._base import LMJudge
from judgetune.judges._space import Choice, IntRange, Param
from judgetune.judges._verdict import Verdict, add_usage

LABELS = ["A", "B", "tie"]
VALUES = [-1.0, 1.0, 0.0]  # preference for the answer shown second (B)


class PairwiseJudge(LMJudge):
    kind = "pairwise"
    INSTRUCTIONS = {
        "faithful": "Compare the two answers to the question. Say A if answer A is better, B if answer B is better, "
                    "tie if they are equally good. Judge correctness and helpfulness; ignore length and order.",
        "reference": "Using the reference (when given) as the standard, decide which answer is more correct and "
                     "complete: A, B, or tie.",
        "instruction-following": "Which answer follows the request more precisely and honestly? Answer A or B; say "
                                 "tie only if neither is better. Do not reward length or confident tone.",
        "critic": "Act as an impartial expert reviewer. Find the errors and omissions in each answer, then pick the "
                  "better one: A, B, or tie.",
    }

    INPUTS, OUTPUT, OUTPUT_DESCRIPTION = ("question", "reference", "answer_a", "answer_b"), "better", "A, B or tie"
    seeded = True

    @classmethod
    def data_defaults(cls, examples, label_range):
        return {"mode": "answers" if any(ex.answer_b is not None for ex in examples) else "references"}

    @classmethod
    def left_out(cls, examples: list[Example]) -> dict[str, tuple[str, str]]:
        """``mode`` is the data's, never searched: the other mode fails on every item (``answers`` needs a
        second answer, ``references`` an answer alone beside graded references)."""
        pairs = sum(ex.answer_b is not None for ex in examples)
        return {"mode": (cls.data_defaults(examples, None)["mode"],
                         f"{pairs} of {len(examples)} training items hold a second answer")}

    def __init__(self, lm=None, *, seed: int = 0, **kwargs):
        super().__init__(lm, **kwargs)
        self.seed = seed

    @classmethod
    def space(cls) -> list[Param]:
        return [*cls.lm_space(), Choice("swap", (True, False), True), Choice("mode", ("answers", "references"), "answers"),
                IntRange("per_grade", 1, 2, 1, searched=False)]  # accepted, read by nothing: not searched

    @property
    def score_range(self) -> tuple[float, float]:
        return (-1.0, 1.0) if self.params["mode"] == "answers" else (0.0, 1.0)

    def compare(self, question: str | None, first: str, second: str, reference: str | None) -> Verdict:
        """Preference for ``second`` over ``first`` in [-1, 1], averaged over both orders when ``swap`` is on."""
        def inputs(a: str, b: str) -> dict[str, str]:
            out = {"question": question} if question else {}
            if reference:
                out["reference"] = reference
            return {**out, "answer_a": a, "answer_b": b}

        demos = [{**inputs(d.answer, d.answer_b), "better": "B" if d.preference > 0 else "A" if d.preference < 0 else "tie"}
                 for d in self.demos if d.answer_b is not None and d.preference is not None]
        description = "A, B or tie"
        forward = self.ask(inputs(first, second), "better", description, LABELS, VALUES, demos)
        if not self.params["swap"] or not forward.parsed:
            return forward
        backward = self.ask(inputs(second, first), "better", description, LABELS, VALUES, demos)
        if not backward.parsed:
            return backward
        p1, p2 = forward.distribution, backward.distribution
        distribution = {"first": (p1["A"] + p2["B"]) / 2, "second": (p1["B"] + p2["A"]) / 2,
                        "tie": (p1["tie"] + p2["tie"]) / 2}
        return Verdict((forward.score - backward.score) / 2, distribution, True, f"{forward.raw}\n---\n{backward.raw}",
                       add_usage(forward.usage, backward.usage),
                       {"forward": forward.score, "backward": -backward.score})

    def forward(self, example: Example) -> Verdict:
        reference = example.references[0].text if len(example.references) == 1 else None
        if self.params["mode"] == "answers":
            if example.answer_b is None:
                return Verdict.failed("pairwise mode 'answers' needs answer_b; use mode=references for single answers")
            return self.compare(example.question, example.answer, example.answer_b, reference)
        references = tuple(r for r in example.references if r.grade is not None)
        if not references:
            return Verdict.failed("no graded references on this item (pairwise mode 'references'; the linkage "
                                  "protocol draws them from its question)")
        low = min(r.grade for r in references)
        wins, weights, usage = [], [], {}
        for ref in references:
            verdict = self.compare(example.question, ref.text, example.answer, None)
            if not verdict.parsed:
                return verdict
            wins.append((verdict.score + 1) / 2)  # preference for the candidate -> win rate, tie = 1/2
            weights.append(ref.grade - low + 1)
            usage = add_usage(usage, verdict.usage)
        score = sum(w * x for w, x in zip(weights, wins)) / sum(weights)
        return Verdict(score, {}, True, "", usage, {"wins": wins, "grades": [r.grade for r in references]})
