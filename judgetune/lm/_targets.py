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

from judgetune.lm._modes import LogprobsUnavailableError
from judgetune.lm._remote import LMCallError, OpenAICompatibleClient, StatusError

# statuses that mean "this server has no such endpoint or option", not a passing fault
_UNSUPPORTED = (400, 404, 405, 422, 501)
# A text whose continuation any language model predicts: echoed log-probabilities of its last tokens
# must be near 0. Servers that misalign them (llama-cpp-python's, abetlen/llama-cpp-python#1983:
# each token scored by the distribution *after* it) give them around -10 and fail this check.
PROBE = "Counting: 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20"
PROBE_TOKENS, PROBE_FLOOR = 12, -2.0


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
    if not getattr(client, "echo_checked", False):
        check_echo(client)
    tokens, values, offsets, usage = _echo(client, prompt + target)
    end = len(prompt) + len(target)
    picked = [i for i, offset in enumerate(offsets) if offset < end and (offset >= len(prompt) or (
        i + 1 < len(offsets) and offsets[i + 1] > len(prompt)))]
    if not picked or any(values[i] is None for i in picked):
        raise LogprobsUnavailableError(f"{_where(client)}: the echoed prompt carries no log-probabilities for the target "
                                       f"text. {NEED}")
    return TargetLogprobs(tuple(tokens[i] for i in picked), tuple(float(values[i]) for i in picked),
                          int(usage.get("prompt_tokens", 0)) or picked[0])


def _where(client: OpenAICompatibleClient) -> str:
    return f"{client.spec} at {client.spec.endpoint}/completions"


NEED = ("the likelihood judge needs the prompt's own token log-probabilities: a completions endpoint that accepts "
        "echo=true with logprobs and returns them aligned (vLLM does); llama.cpp's C++ server returns none for the "
        "prompt, llama-cpp-python's returns them shifted by one token, OpenAI's chat models offer no echo. Use the "
        "in-process model (local:NAME or llamacpp:PATH.gguf) instead")


def _echo(client: OpenAICompatibleClient, text: str) -> tuple[list, list, list, dict]:
    """The echoed tokens, their log-probabilities and character offsets, and the usage."""
    try:
        choice, usage = client.complete_text(text, max_tokens=1, echo=True, logprobs=1)
    except LMCallError as err:
        if isinstance(err.__cause__, StatusError) and err.__cause__.status in _UNSUPPORTED:
            raise LogprobsUnavailableError(f"{_where(client)}: {err.__cause__}. {NEED}") from None
        raise
    logprobs = choice.get("logprobs") or {}
    tokens, values, offsets = (logprobs.get(k) for k in ("tokens", "token_logprobs", "text_offset"))
    if not tokens or not values or not offsets or not len(tokens) == len(values) == len(offsets):
        raise LogprobsUnavailableError(f"{_where(client)}: the answer has no echoed tokens with token_logprobs and "
                                       f"text_offset. {NEED}")
    return tokens, values, offsets, usage


def check_echo(client: OpenAICompatibleClient) -> None:
    """Once per client: the echoed log-probabilities of a predictable text must be high (see PROBE).

    Raises:
        LogprobsUnavailableError: naming the model, the endpoint and the figure found.
    """
    _, values, offsets, _ = _echo(client, PROBE)
    inside = [v for v, o in zip(values, offsets) if o < len(PROBE)][-PROBE_TOKENS:]
    if len(inside) < PROBE_TOKENS or any(v is None for v in inside):
        raise LogprobsUnavailableError(f"{_where(client)}: the echoed prompt carries no log-probabilities. {NEED}")
    mean = sum(inside) / len(inside)
    if mean < PROBE_FLOOR:
        raise LogprobsUnavailableError(
            f"{_where(client)}: the echoed log-probabilities fail a sanity check: the last {PROBE_TOKENS} tokens of "
            f"{PROBE!r} get {mean:.2f} nats each on average (a model predicting them gives near 0), so they are not "
            f"the log-probabilities of the tokens they are listed with. {NEED}")
    client.echo_checked = True
