"""Label distributions: the model's probability of each label string at the answer position.

In-process models give exact probabilities, chaining token log-probabilities for labels of several
tokens. Over a server, judges read ``top_logprobs`` of a generated answer instead (labels must then
be single tokens, and a label outside the top k has probability 0 and is reported as missing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from judgetune.errors import PromptTooLongError

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


def local_label_distributions(model, requests: Sequence[tuple[list[dict[str, str]], Sequence[str], str]]
                               ) -> list[LabelDistribution | Exception]:
    """``local_label_distribution`` of many ``(messages, labels, prefix)`` requests, several per decode.

    On llama.cpp the prompts run side by side over their shared, cached prefix; each prompt runs with
    its longest label of several tokens appended (``path_logprobs_many``), so that label costs no second
    pass (the "10" of a 1-10 scale); any other label of several tokens goes through ``target_logprobs``.
    A single request, and other backends, go one at a time (``local_label_distribution``, whose KV
    cache may still hold a reasoning just generated). A request that cannot be scored (bad labels, a
    prompt too long) gets its exception in its place.
    """
    if len(requests) == 1 or not hasattr(model, "path_logprobs_many"):
        out: list[LabelDistribution | Exception] = []
        for messages, labels, prefix in requests:
            try:
                out.append(local_label_distribution(model, messages, labels, prefix=prefix))
            except ValueError as err:
                out.append(err)
        return out
    results: list[LabelDistribution | Exception | None] = [None] * len(requests)
    todo: list[tuple[int, list[int], list[list[int]]]] = []
    with model.locked():
        for i, (messages, labels, prefix) in enumerate(requests):
            try:
                labels = _check_labels(labels)
                prompt = model.tokenize(model.render(messages, prefix))
                pieces = [model.tokenize(label, special=False) for label in labels]
                needed = len(prompt) + max(len(p) for p in pieces)  # the prompt and its longest label
                if needed > model.n_ctx:
                    raise PromptTooLongError(f"prompt of {len(prompt)} tokens (and its longest label) does not fit "
                                             f"the context of {model.n_ctx}")
                todo.append((i, prompt, pieces))
            except ValueError as err:
                results[i] = err
        paths = [max((p for p in pieces if len(p) > 1), key=len, default=[]) for _, _, pieces in todo]
        scored = model.path_logprobs_many([(prompt, path) for (_, prompt, _), path in zip(todo, paths)])
        firsts = [first for first, _ in scored]
        tails = {(k, j): float(scored[k][1].sum()) for k, (_, _, pieces) in enumerate(todo)
                 for j, p in enumerate(pieces) if len(p) > 1 and p == paths[k]}
        longer = [(k, j) for k, (_, _, pieces) in enumerate(todo) for j, p in enumerate(pieces)
                  if len(p) > 1 and (k, j) not in tails]
        rest = model.target_logprobs([(todo[k][1], todo[k][2][j]) for k, j in longer]) if longer else []
        tails.update({kj: float(row[1:].sum()) for kj, row in zip(longer, rest)})
        for k, (i, prompt, pieces) in enumerate(todo):
            logprobs = tuple(float(firsts[k][p[0]]) + tails.get((k, j), 0.0) for j, p in enumerate(pieces))
            results[i] = LabelDistribution(_check_labels(requests[i][1]), logprobs,
                                           usage={"prompt_tokens": len(prompt)})
    return results
