"""A planted-bias testbed for the audit (tests and benchmarks only; never proof that judging works).

Synthetic items name their quality in the answer (``grade-G``, G in 1..3). :class:`BiasedLM`
answers a judge's label questions from that grade plus two planted biases and a small
deterministic noise (a hash of the prompt):

- rubric questions (numeric labels): the target score is ``G + length_slope * (words - 10)`` plus
  noise, read as the two labels around it (so the expected score is the target exactly);
- pairwise questions (labels A, B, tie): the preference for the second-shown answer is
  ``(G_b - G_a) / 10 + position_bias + length_slope * (words_b - words_a) / 5`` plus noise, read as
  p(B) = (1 + preference) / 2, p(A) = (1 - preference) / 2.

So appending ``w`` words to the judged answer moves a rubric score by ``length_slope * w`` and a
pairwise preference by ``length_slope * w / 5``; showing a pair in both orders averages to
``position_bias``. :func:`unbiased_twin` is the same LM with both biases zero.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from judgetune.datasets import Example, Reference
from judgetune.lm import Generation, LabelDistribution, run_items
from judgetune.testing.scripted_lm import refusing_dspy_lm

GRADE = re.compile(r"grade-(\d)")
FIELD = re.compile(r"\[\[ ## (\w+) ## \]\]\n(.*?)(?=\n\n\[\[ ## |\n\nRespond with|\Z)", re.S)
BASE_WORDS = 10
PAIR_LENGTH_DIVISOR = 5.0
WORDS = ("river", "stone", "lamp", "paper", "garden", "window", "music", "bread", "cloud", "engine", "letter", "bridge")


def biased_examples(n: int = 60, *, pairwise: bool = False, seed: int = 0) -> list[Example]:
    """``n`` items (seeded) whose answers carry ``grade-G`` (1..3) among about 10 words, in groups of 3;
    pairwise items add ``answer_b`` and its preference."""
    rng = np.random.default_rng(seed)

    def answer(i: int, grade: int) -> str:
        filler = " ".join(rng.choice(WORDS, size=int(rng.integers(5, 10))))
        return f"Answer item-{i} grade-{grade}: {filler}."

    out = []
    for i in range(n):
        g = int(rng.integers(1, 4))
        ref = (Reference(f"Reference for item {i} on topic {i % 5}."), Reference(f"Another reference for item {i}."))
        if pairwise:
            g_b = int(rng.integers(1, 4))
            out.append(Example(id=f"b{i}", question=f"Question {i}?", answer=answer(i, g), answer_b=answer(i, g_b),
                               preference=float(np.sign(g_b - g)), group=f"q{i // 3}"))
        else:
            out.append(Example(id=f"b{i}", question=f"Question {i}?", answer=answer(i, g), references=ref,
                               label=float(g), group=f"q{i // 3}"))
    return out


@dataclass(frozen=True)
class Biases:
    """The planted biases: ``position_bias`` (pairwise preference for the second-shown answer; negative:
    the first is favoured) and ``length_slope`` (score per word of the judged answer)."""

    position_bias: float = 0.0
    length_slope: float = 0.0
    noise: float = 0.1

    def planted(self, probe: str, *, pairwise: bool, words: int = 0) -> float:
        """The effect the audit should find for ``probe`` when ``words`` words are appended."""
        if probe == "position":
            return self.position_bias if pairwise else 0.0
        if probe in ("verbosity", "distraction"):
            return self.length_slope * words / (PAIR_LENGTH_DIVISOR if pairwise else 1.0)
        return 0.0


PLANTED = Biases(position_bias=-0.25, length_slope=0.04)


def unbiased_twin(biases: Biases = PLANTED) -> Biases:
    """The same LM (same noise) with no planted bias."""
    return Biases(0.0, 0.0, biases.noise)


class BiasedLM:
    """A deterministic stand-in for :class:`judgetune.lm.JudgeLM` with planted biases (see the module docstring)."""

    in_process = True
    concurrency = 1

    def __init__(self, biases: Biases = PLANTED):
        self.biases = biases
        self.label_calls = 0  # label questions answered; ``engine.calls`` counts generations (as JudgeLM's)
        self.engine = SimpleNamespace(calls=0)
        self.transcript = None

    @functools.cached_property
    def dspy_lm(self):
        return refusing_dspy_lm()

    def _noise(self, key: str, scale: float) -> float:
        rng = np.random.default_rng(int(hashlib.sha256(key.encode()).hexdigest()[:12], 16))
        return float(np.clip(rng.normal(0.0, scale), -3 * scale, 3 * scale))

    def label_distribution(self, messages: list[dict], labels: Sequence[str], *, prefix: str = "") -> LabelDistribution:
        self.label_calls += 1
        fields = dict(FIELD.findall(messages[-1]["content"]))
        key = json.dumps([messages, list(labels), prefix])
        if {"A", "B"} <= set(labels):
            probs = self._pairwise(fields, labels, key)
        else:
            probs = self._rubric(fields, labels, key)
        logprobs = tuple(float(np.log(max(p, 1e-12))) for p in probs)
        return LabelDistribution(tuple(labels), logprobs, usage={"prompt_tokens": 10})

    def _pairwise(self, fields: dict[str, str], labels: Sequence[str], key: str) -> list[float]:
        a, b = fields["answer_a"], fields["answer_b"]
        b_ = self.biases
        pref = ((_grade(b) - _grade(a)) / 10 + b_.position_bias
                + b_.length_slope * (len(b.split()) - len(a.split())) / PAIR_LENGTH_DIVISOR
                + self._noise(key, b_.noise / 2))
        pref = float(np.clip(pref, -0.99, 0.99))
        return [(1 + pref) / 2 if label == "B" else (1 - pref) / 2 if label == "A" else 0.0 for label in labels]

    def _rubric(self, fields: dict[str, str], labels: Sequence[str], key: str) -> list[float]:
        answer = fields["answer"]
        target = _grade(answer) + self.biases.length_slope * (len(answer.split()) - BASE_WORDS) \
            + self._noise(key, self.biases.noise)
        numeric = [(i, float(label)) for i, label in enumerate(labels) if _is_number(label)]
        values = np.array([v for _, v in numeric])
        target = float(np.clip(target, values.min(), values.max()))
        probs = [0.0] * len(labels)
        below = max((v for _, v in numeric if v <= target))
        above = min((v for _, v in numeric if v >= target))
        share = 0.0 if above == below else (target - below) / (above - below)
        for i, v in numeric:
            if v == below:
                probs[i] += 1 - share
            if v == above:
                probs[i] += share
        return probs

    def generate(self, messages: list[dict], *, prefix: str = "", max_tokens: int = 256, stop: Sequence[str] = (),
                 json_schema: dict | None = None, top_logprobs: int | None = None) -> Generation:
        """A fixed neutral reasoning (a judge's reasoning step reads nothing into it)."""
        self.engine.calls += 1
        return Generation(" I compare the answer with what was asked.", {"prompt_tokens": 10, "completion_tokens": 9})

    def run(self, fn, items, *, progress: bool = False, batched: bool = False):
        return run_items(fn, items, concurrency=1, progress=progress, description="biased")

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class Testbed:
    """One frozen judge on the biased LM: its name, config, the items to audit, and the LM."""

    name: str
    config: Any
    examples: list[Example]
    lm: BiasedLM
    pairwise: bool


def audit_testbeds(biases: Biases = PLANTED, *, n: int = 60, seed: int = 0) -> list[Testbed]:
    """A rubric judge (0-5, two demos) and a pairwise judge (one order, so its position bias shows), both
    uncalibrated (the judge's range mapped linearly onto the labels'), on ``n`` seeded items each."""
    from judgetune.config import JudgeConfig
    from judgetune.judges import make_judge

    lm = BiasedLM(biases)
    out = []
    for kind, pairwise, label_range, params in (("rubric", False, (0.0, 5.0), {"k": 2, "scale": "0-5"}),
                                                 ("pairwise", True, (-1.0, 1.0), {"swap": False, "mode": "answers"})):
        items = biased_examples(n + 6, pairwise=pairwise, seed=seed)
        demos, audited = items[:6], items[6:]  # demos come from items that are not audited
        judge = make_judge(kind, lm, train=demos, label_range=label_range, params=params, seed=seed)
        config = JudgeConfig.from_judge(judge, lm={"spec": "biased"}, calibrator=None, label_range=label_range)
        out.append(Testbed(kind, config, audited, lm, pairwise))
    return out


def _grade(text: str) -> int:
    found = GRADE.search(text)
    if not found:
        raise ValueError(f"no grade-N in {text[:80]!r}")
    return int(found.group(1))


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
