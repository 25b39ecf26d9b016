"""Target log-probabilities: how likely a model finds a given text after a given prompt, token by token.

This is the likelihood reading of a model (GPTScore, BARTScore): no answer is generated. In-process
models score a batch of (prompt, target) pairs in one go, the prompts' shared prefix evaluated once
and kept in the KV cache. An OpenAI-compatible server scores them through the legacy completions
endpoint with ``echo`` (the prompt's own log-probabilities come back); where it does not, the
error says what is missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from judgetune.lm._labels import LogprobsUnavailableError
from judgetune.lm._remote import LMCallError, OpenAICompatibleClient, StatusError

# statuses that mean "this server has no such endpoint or option", not a passing fault
_UNSUPPORTED = (400, 404, 405, 422, 501)


@dataclass(frozen=True)
class TargetLogprobs:
    """``logprobs[j]`` is log p(token j of the target | prompt, tokens before j); ``tokens`` their text."""

    tokens: tuple[str, ...]
    logprobs: tuple[float, ...]
    prompt_tokens: int

    @property
    def total(self) -> float:
        return float(sum(self.logprobs))

    @property
    def mean(self) -> float:
        return self.total / len(self.logprobs)

    def to_dict(self) -> dict:
        return {"tokens": list(self.tokens), "logprobs": list(self.logprobs), "prompt_tokens": self.prompt_tokens}

    @classmethod
    def from_dict(cls, data: dict) -> TargetLogprobs:
        return cls(tuple(data["tokens"]), tuple(float(x) for x in data["logprobs"]), int(data["prompt_tokens"]))


def _check(prompt: str, target: str) -> None:
    if not prompt or not target:
        raise ValueError(f"target log-probabilities need a non-empty prompt and target, got {prompt[:40]!r} and "
                         f"{target[:40]!r}")


def local_target_logprobs(model, pairs: Sequence[tuple[str, str]]) -> list[TargetLogprobs]:
    """Exact target log-probabilities from an in-process model, all pairs in one batched call.

    The prompt is tokenized with special tokens (a rendered chat template), the target as plain
    text, on its own: the target's tokens do not depend on the prompt before it.
    """
    if not hasattr(model, "target_logprobs"):
        raise LogprobsUnavailableError(f"the {model.backend} backend does not score target texts; use llamacpp")
    for prompt, target in pairs:
        _check(prompt, target)
    with model.locked():
        tokenized = [(model.tokenize(prompt), model.tokenize(target, special=False)) for prompt, target in pairs]
        rows = model.target_logprobs(tokenized)
        return [TargetLogprobs(tuple(model.token_text(t) for t in target), tuple(float(x) for x in row), len(prompt))
                for (prompt, target), row in zip(tokenized, rows)]


def remote_target_logprobs(client: OpenAICompatibleClient, prompt: str, target: str) -> TargetLogprobs:
    """Target log-probabilities from a server's completions endpoint, echoing prompt + target.

    The server tokenizes prompt and target as one text; the target's tokens are those starting at or
    after the prompt's end (a token across the boundary counts as the target's).

    Raises:
        LogprobsUnavailableError: the server has no completions endpoint, or returns no echoed log-probabilities.
        LMCallError: the call failed for another reason (after retries).
    """
    _check(prompt, target)
    where = f"{client.spec} at {client.spec.endpoint}/completions"
    need = ("the likelihood judge needs the prompt's own token log-probabilities (a completions endpoint that "
            "accepts echo=true with logprobs: llama-cpp-python's server started with --logits_all true, or vLLM); "
            "OpenAI's chat models and most hosted APIs do not offer it")
    try:
        choice, usage = client.complete_text(prompt + target, max_tokens=1, echo=True, logprobs=1)
    except LMCallError as err:
        if isinstance(err.__cause__, StatusError) and err.__cause__.status in _UNSUPPORTED:
            raise LogprobsUnavailableError(f"{where}: {err.__cause__}. {need}") from None
        raise
    logprobs = choice.get("logprobs") or {}
    tokens, values, offsets = (logprobs.get(k) for k in ("tokens", "token_logprobs", "text_offset"))
    if not tokens or not values or not offsets or not len(tokens) == len(values) == len(offsets):
        raise LogprobsUnavailableError(f"{where}: the answer has no echoed tokens with token_logprobs and "
                                       f"text_offset. {need}")
    end = len(prompt) + len(target)
    picked = [i for i, offset in enumerate(offsets) if offset < end and (offset >= len(prompt) or (
        i + 1 < len(offsets) and offsets[i + 1] > len(prompt)))]
    if not picked or any(values[i] is None for i in picked):
        raise LogprobsUnavailableError(f"{where}: the echoed prompt carries no log-probabilities for the target "
                                       f"text. {need}")
    return TargetLogprobs(tuple(tokens[i] for i in picked), tuple(float(values[i]) for i in picked),
                          int(usage.get("prompt_tokens", 0)) or picked[0])
