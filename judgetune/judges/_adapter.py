"""The DSPy adapter of judgetune's LM judges: DSPy's chat format, then a forced choice at the answer position.

A judge's ``dspy.Predict`` formats its prompt (signature instruction, demos, inputs) as DSPy's
ChatAdapter does; this adapter then reads the label distribution at the output field's answer
position (see ``forced_choice``) instead of parsing a sampled answer. It is installed per call
with ``dspy.context(adapter=..., lm=...)``, never through DSPy's global settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import dspy

from judgetune.judges._prompting import REASONING_FIELD, forced_choice
from judgetune.judges._sampling import ALPHA, sampled_choice


class ForcedChoiceAdapter(dspy.ChatAdapter):
    """Reads ``labels`` (worth ``values``) at the last output field of the signature.

    ``lm`` is the judge's ``JudgeLM`` (DSPy's LM argument is ignored: a label distribution needs the
    model itself). The completion holds the most probable label (``None`` when the judgment failed),
    the reasoning when there is one, and the full ``verdict``.

    ``mode`` is the scoring mode: ``logprobs`` reads the distribution (``forced_choice``); ``sampled``
    parses ``n_samples`` answers at ``temperature`` and ``parsed`` one greedy answer (``sampled_choice``).
    """

    def __init__(self, lm: Any, labels: Sequence[str], values: Sequence[float], *, reasoning: bool = False,
                 max_reasoning_tokens: int = 160, min_label_mass: float = 0.0, scoring: str = "expected",
                 mode: str = "logprobs", n_samples: int = 1, temperature: float = 0.0):
        super().__init__()
        self.judge_lm, self.labels, self.values = lm, list(labels), list(values)
        self.reasoning, self.max_reasoning_tokens = reasoning, max_reasoning_tokens
        self.min_label_mass, self.scoring = min_label_mass, scoring
        self.mode, self.n_samples, self.temperature = mode, n_samples, temperature

    def __call__(self, lm, lm_kwargs: dict[str, Any], signature: type[dspy.Signature], demos: list,
                 inputs: dict[str, Any]) -> list[dict[str, Any]]:
        shown = [d if isinstance(d, dspy.Example) else dspy.Example(**d) for d in demos]
        messages = self.format(signature, shown, inputs)
        output = list(signature.output_fields)[-1]
        if self.mode == "logprobs":
            verdict = forced_choice(self.judge_lm, messages, output, self.labels, self.values, reasoning=self.reasoning,
                                    max_reasoning_tokens=self.max_reasoning_tokens,
                                    min_label_mass=self.min_label_mass, scoring=self.scoring)
        else:
            sampled = self.mode == "sampled"
            verdict = sampled_choice(self.judge_lm, messages, output, self.labels, self.values,
                                     n=self.n_samples if sampled else 1, temperature=self.temperature if sampled else 0.0,
                                     alpha=ALPHA if sampled else 0.0, reasoning=self.reasoning,
                                     max_reasoning_tokens=self.max_reasoning_tokens, scoring=self.scoring)
        label = max(verdict.distribution, key=verdict.distribution.get) if verdict.parsed and verdict.distribution \
            else None
        completion: dict[str, Any] = {output: label, "verdict": verdict}
        if REASONING_FIELD in signature.output_fields:
            completion[REASONING_FIELD] = verdict.raw
        return [completion]

    async def acall(self, lm, lm_kwargs, signature, demos, inputs):
        return self(lm, lm_kwargs, signature, demos, inputs)
