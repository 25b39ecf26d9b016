"""Prompts in DSPy's chat format, and reading a label distribution at the answer position.

A judge's prompt is a DSPy signature (the instruction and the fields) formatted by DSPy's
ChatAdapter with the judge's demos. The score is then read, never parsed from one sampled token:
on an in-process model the answer is prefilled up to ``[[ ## <output> ## ]]`` and the model's
probability of each label is read there (after a generated reasoning when reasoning-first is on);
on a server the answer is generated with ``top_logprobs`` and the distribution is read at the
first token after that marker.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import dspy
import numpy as np

from judgetune.judges._verdict import Verdict, add_usage
from judgetune.lm import JudgeLM, LabelDistribution, LogprobsUnavailableError, logprobs_unavailable

FIELD_DESCRIPTIONS = {
    "question": "the question or request the answer responds to",
    "reference": "a reference answer or text to compare with",
    "context": "the source text or retrieved passages the answer should rest on",
    "answer": "the answer under judgment",
    "answer_a": "the first answer",
    "answer_b": "the second answer",
    "references": "reference answers, numbered from best (1) to worst",
    "text": "the text to check against",
    "source": "the text whose information is looked for",
    "fact": "one self-contained fact",
    "check": "a yes/no question about the answer",
}
REASONING_FIELD = "reasoning"


def make_signature(instruction: str, inputs: Sequence[str], output: str, output_description: str, *,
                   reasoning: bool = False) -> type[dspy.Signature]:
    """A DSPy signature with the given input fields, an optional reasoning field, then the output."""
    fields: dict = {name: (str, dspy.InputField(desc=FIELD_DESCRIPTIONS.get(name, name))) for name in inputs}
    if reasoning:
        fields[REASONING_FIELD] = (str, dspy.OutputField(desc="brief step-by-step reasoning before the answer"))
    fields[output] = (str, dspy.OutputField(desc=output_description))
    return dspy.make_signature(fields, instruction)


def marker(field: str) -> str:
    return f"[[ ## {field} ## ]]"


SCORING = ("expected", "argmax")


def _verdict(dist: LabelDistribution, values: Sequence[float], raw: str, usage: dict, min_label_mass: float,
             scoring: str) -> Verdict:
    mass = sum(dist.probabilities.values())
    detail = {"label_mass": mass}
    if mass <= min_label_mass:
        return Verdict.failed(f"the labels {list(dist.labels)} got p={mass:.2g} at the answer position; "
                              f"text: {raw[:200]!r}", usage=usage, detail=detail)
    probs = dist.normalized()
    if scoring == "argmax":  # the most probable label's value (ties: the first label)
        score = values[max(range(len(values)), key=lambda i: (probs[dist.labels[i]], -i))]
    else:
        score = dist.expected(values)
    return Verdict(float(score), probs, True, raw, usage, detail)


def read_labels(lm: JudgeLM, messages: list[dict[str, str]], labels: Sequence[str], prefix: str) -> LabelDistribution:
    """The labels' distribution after ``prefix``, each label's capitalized spelling folded into it."""
    extra = [(i, label.capitalize()) for i, label in enumerate(labels) if label.capitalize() not in labels]
    dist = lm.label_distribution(messages, [*labels, *(spelling for _, spelling in extra)], prefix=prefix)
    logprobs = list(dist.logprobs[:len(labels)])
    for (i, _), logprob in zip(extra, dist.logprobs[len(labels):]):
        logprobs[i] = float(np.logaddexp(logprobs[i], logprob))
    return LabelDistribution(tuple(labels), tuple(logprobs), usage=dist.usage)


def forced_choice(lm: JudgeLM, messages: list[dict[str, str]], output: str, labels: Sequence[str],
                  values: Sequence[float], *, reasoning: bool = False, max_reasoning_tokens: int = 160,
                  min_label_mass: float = 0.0, scoring: str = "expected") -> Verdict:
    """The expected label value at the ``output`` field's answer position (see the module docstring).

    A label's probability includes its capitalized spelling ("Pass" counts as "pass"). The judgment
    fails when the labels' total probability is at most ``min_label_mass`` (by default: exactly zero,
    as when a server lists none of them among its top tokens); the mass is kept in ``detail``.
    ``scoring`` is ``expected`` (the expected value) or ``argmax`` (the most probable label's value).
    """
    if scoring not in SCORING:
        raise ValueError(f"scoring must be one of {SCORING}, got {scoring!r}")
    if lm.in_process or (not reasoning and lm.label_position is not None):  # the prompt ends at the label
        prefix, usage, raw = "", {}, ""
        if reasoning:
            start = marker(REASONING_FIELD) + "\n"
            thought = lm.generate(messages, prefix=start, stop=("[[ ##",), max_tokens=max_reasoning_tokens)
            raw, usage = thought.text.strip(), thought.usage
            prefix = f"{start}{raw}\n\n"
        dist = read_labels(lm, messages, labels, f"{prefix}{marker(output)}\n")
        return _verdict(dist, values, raw, add_usage(usage, {"prompt_tokens": dist.usage.get("prompt_tokens", 0)}),
                        min_label_mass, scoring)
    answer = lm.generate(messages, max_tokens=(max_reasoning_tokens if reasoning else 0) + 24, top_logprobs=20)
    if answer.logprobs is None:  # the endpoint gives none: every item would fail alike, so say it once
        raise LogprobsUnavailableError(logprobs_unavailable(lm, f"{lm.spec} at {lm.spec.endpoint} answered "
                                                                "without log-probabilities"))
    dist = distribution_after_marker(answer.logprobs or [], marker(output), labels)
    if dist is None:
        return Verdict.failed(f"no {marker(output)} followed by a label in the answer: {answer.text[:200]!r}",
                              usage=answer.usage)
    return _verdict(dist, values, answer.text, answer.usage, min_label_mass, scoring)


def distribution_after_marker(tokens: list[tuple[str, float, list[tuple[str, float]]]], mark: str,
                              labels: Sequence[str]) -> LabelDistribution | None:
    """Label log-probabilities at the first non-blank token after ``mark`` in a generated answer.

    A label matches an alternative token whose text, stripped of blanks and lowercased, equals it
    (``"3"`` and ``" 3"``, ``"pass"`` and ``"Pass"`` are one label); the most probable such token
    counts. ``None`` when the marker or a token after it is missing.
    """
    text, start = "", None
    for i, (token, _, _) in enumerate(tokens):
        text += token
        if mark in text:
            start = i + 1
            break
    if start is None:
        return None
    while start < len(tokens) and not tokens[start][0].strip():
        start += 1
    if start >= len(tokens):
        return None
    top = tokens[start][2] or [(tokens[start][0], tokens[start][1])]
    logprobs = []
    for label in labels:
        matches = [lp for token, lp in top if token.strip().lower() == label.lower()]
        logprobs.append(max(matches) if matches else -math.inf)
    missing = tuple(label for label, lp in zip(labels, logprobs) if lp == -math.inf)
    return LabelDistribution(tuple(labels), tuple(logprobs), missing)
