"""Label distributions: the model's probability of each label string at the answer position.

In-process models give exact probabilities, chaining token log-probabilities for labels of several
tokens. Over a server, judges read ``top_logprobs`` of a generated answer instead (labels must then
be single tokens, and a label outside the top k has probability 0 and is reported as missing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

TOP_LOGPROBS = 20  # the most OpenAI's API returns


@dataclass(frozen=True)
class LabelDistribution:
    """``logprobs[i]`` is log p(labels[i]) at the answer position (``-inf`` when a server did not list it).

    ``outside_mass`` is the probability the model put on anything that is no label.
    """

    labels: tuple[str, ...]
    logprobs: tuple[float, ...]
    missing: tuple[str, ...] = ()
    usage: dict[str, int] = field(default_factory=dict)

    @property
    def probabilities(self) -> dict[str, float]:
        """Raw probabilities, not renormalized."""
        return {label: math.exp(lp) for label, lp in zip(self.labels, self.logprobs)}

    @property
    def outside_mass(self) -> float:
        return max(0.0, 1.0 - sum(self.probabilities.values()))

    def normalized(self) -> dict[str, float]:
        """Probabilities renormalized over the labels.

        Raises:
            ValueError: when no label received any probability (nothing to normalize).
        """
        probs = self.probabilities
        total = sum(probs.values())
        if total <= 0:
            raise ValueError(f"no probability on any of the labels {list(self.labels)}")
        return {label: p / total for label, p in probs.items()}

    def expected(self, values: Sequence[float]) -> float:
        """The expected value: sum over labels of p(label) * value, with p renormalized over the labels."""
        if len(values) != len(self.labels):
            raise ValueError(f"{len(values)} values for {len(self.labels)} labels")
        return sum(p * v for p, v in zip(self.normalized().values(), values))

    def to_dict(self) -> dict:
        return {"labels": list(self.labels), "logprobs": list(self.logprobs), "missing": list(self.missing),
                "usage": self.usage}

    @classmethod
    def from_dict(cls, data: dict) -> LabelDistribution:
        return cls(tuple(data["labels"]), tuple(float(x) for x in data["logprobs"]), tuple(data["missing"]),
                   dict(data["usage"]))


def _check_labels(labels: Sequence[str]) -> tuple[str, ...]:
    labels = tuple(labels)
    if not labels or any(not isinstance(label, str) or label == "" for label in labels):
        raise ValueError(f"labels must be non-empty strings, got {list(labels)}")
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels must be distinct, got {list(labels)}")
    return labels


def local_label_distribution(model, messages: list[dict[str, str]], labels: Sequence[str], *,
                             prefix: str = "") -> LabelDistribution:
    """Exact label log-probabilities from an in-process model (llama.cpp or transformers).

    Single-token labels all come from one forward pass; a label of n tokens costs n - 1 more
    passes, each over one token thanks to the KV cache of the shared prompt.
    """
    labels = _check_labels(labels)
    with model.locked():
        prompt = model.tokenize(model.render(messages, prefix))
        first = model.next_logprobs(prompt)
        logprobs = []
        for label in labels:
            pieces = model.tokenize(label, special=False)
            total = float(first[pieces[0]])
            for i in range(1, len(pieces)):
                total += float(model.next_logprobs(prompt + pieces[:i])[pieces[i]])
            logprobs.append(total)
    return LabelDistribution(labels, tuple(logprobs), usage={"prompt_tokens": len(prompt)})
