"""A scripted stand-in for JudgeLM, for fault and bias tests only (never as proof that judging works).

``answer(messages, labels, prefix)`` decides the probability of each label; ``generate`` returns
``text`` (or ``text(messages)``). Every request is recorded in ``calls``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import dspy
from dspy import lm15

from judgetune.lm import Generation, LabelDistribution, run_items


class _NoEngine:
    def complete(self, request):
        raise lm15.UnsupportedFeatureError("ScriptedLM answers label distributions and generate() only", feature="chat")

    def stream(self, request):
        raise lm15.UnsupportedFeatureError("ScriptedLM answers label distributions and generate() only", feature="chat")

    def close(self) -> None:
        pass


def refusing_dspy_lm() -> dspy.LM:
    """A ``dspy.LM`` whose engine refuses calls, for stand-ins that answer ``label_distribution`` and
    ``generate`` themselves (the judges' forced choice reads those, never the engine)."""
    return dspy.LM("scripted/lm", engine=_NoEngine(), cache=False, num_retries=0)


class ScriptedLM:
    in_process = True
    concurrency = 1

    def __init__(self, answer: Callable[[list[dict], Sequence[str], str], dict[str, float]],
                 text: str | Callable[[list[dict]], str] = ""):
        self.answer, self.text = answer, text
        self.calls: list[dict] = []
        self.transcript = None

    @functools.cached_property
    def dspy_lm(self) -> dspy.LM:
        """The ``dspy.LM`` a judge installs around its predictor (see :func:`refusing_dspy_lm`)."""
        return refusing_dspy_lm()

    def label_distribution(self, messages: list[dict], labels: Sequence[str], *, prefix: str = "") -> LabelDistribution:
        self.calls.append({"op": "labels", "messages": messages, "labels": list(labels), "prefix": prefix})
        probs = self.answer(messages, labels, prefix)
        logprobs = tuple(math.log(probs[label]) if probs.get(label, 0) > 0 else -math.inf for label in labels)
        return LabelDistribution(tuple(labels), logprobs, usage={"prompt_tokens": 10})

    def generate(self, messages: list[dict], *, prefix: str = "", max_tokens: int = 256, stop: Sequence[str] = (),
                 json_schema: dict | None = None, top_logprobs: int | None = None) -> Generation:
        self.calls.append({"op": "generate", "messages": messages, "prefix": prefix})
        text = self.text(messages) if callable(self.text) else self.text
        return Generation(text, {"prompt_tokens": 10, "completion_tokens": 5})

    def run(self, fn, items, *, progress: bool = False, batched: bool = False):
        return run_items(fn, items, concurrency=1, progress=progress, description="scripted")
