"""``test:deterministic`` (and ``test:slow``: the same numbers, each computation 0.1 s late): a stand-in
model for plumbing tests (resume, budgets, kills, workers, reports), never proof that judging works.
It has the in-process backend's interface, so the whole JudgeLM path runs (answer cache, call
counts, label distributions, target log-probs, generation with stop strings and JSON schemas),
without loading weights.

Tokens are the UTF-8 bytes of the text (256 ids, plus an end-of-text id). The next-token
log-probabilities are a softmax of Gaussian logits seeded by a SHA-256 of the token sequence: the
same sequence gives the same numbers on any machine, and any change of the prompt changes them.
Generation writes words picked by that hash (or the JSON-schema instance it builds), one byte a token.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from judgetune.errors import PromptTooLongError
from judgetune.lm._llamacpp import GeneratedToken, log_softmax

N_VOCAB = 257  # the 256 byte values and the end of text
EOS = 256
SPREAD = 3.0  # standard deviation of the logits: distributions neither flat nor one-hot
WORDS = ("the", "answer", "matches", "reference", "partly", "yes", "no", "score", "1", "2", "3", "4", "5",
         "because", "facts", "is", "clear", "missing", "and", "grader")
BYTES_PER_TOKEN = 4  # a real tokenizer's typical ratio: the byte context is n_ctx * 4


def _digest(state: hashlib._Hash) -> np.random.Generator:
    return np.random.default_rng(int.from_bytes(state.digest()[:8], "little"))


def _hasher(tokens: Sequence[int]) -> hashlib._Hash:
    return hashlib.sha256(np.asarray(tokens, dtype="<u2").tobytes())


class DeterministicModel:
    """The model behind ``load_lm("test:deterministic")`` (see the module docstring)."""

    backend = "deterministic"
    version = 1  # part of the cache key: change it when the numbers change
    batch_size = 1

    def __init__(self, *, n_ctx: int = 4096, delay: float = 0.0):
        self.n_ctx = n_ctx * BYTES_PER_TOKEN
        self.delay = delay  # seconds each call takes, as a real model's would
        self._lock = threading.RLock()
        self.evaluated_tokens = 0

    @property
    def n_vocab(self) -> int:
        return N_VOCAB

    def render(self, messages: list[dict[str, str]], prefix: str = "") -> str:
        turns = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
        return f"{turns}<|assistant|>\n{prefix}"

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        return list(text.encode("utf-8"))

    def token_text(self, token_id: int) -> str:
        return "" if token_id == EOS else bytes([token_id]).decode("utf-8", "replace")

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock:
            yield

    def _check(self, n: int) -> None:
        if n >= self.n_ctx:
            raise PromptTooLongError(f"prompt of {n} tokens does not fit the context of {self.n_ctx}")

    @staticmethod
    def _logprobs(state: hashlib._Hash) -> np.ndarray:
        return log_softmax(_digest(state).normal(0.0, SPREAD, N_VOCAB))

    def next_logprobs(self, tokens: list[int]) -> np.ndarray:
        """Log-probabilities of the next token after ``tokens``: a function of the whole sequence."""
        self._check(len(tokens))
        self.evaluated_tokens += len(tokens)
        time.sleep(self.delay)
        return self._logprobs(_hasher(tokens))

    def target_logprobs(self, items: Sequence[tuple[list[int], list[int]]]) -> list[np.ndarray]:
        """log p(target[j] | prompt, target[:j]) per target token, the same numbers as ``next_logprobs``."""
        rows = []
        time.sleep(self.delay)
        for prompt, target in items:
            if not prompt or not target:
                raise ValueError("target_logprobs needs a non-empty prompt and target")
            self._check(len(prompt) + len(target))
            state, row = _hasher(prompt), []
            for token in target:
                row.append(self._logprobs(state.copy())[token])
                state.update(np.asarray([token], dtype="<u2").tobytes())
            self.evaluated_tokens += len(prompt) + len(target)
            rows.append(np.asarray(row))
        return rows

    def generate(self, tokens: list[int], *, max_tokens: int, temperature: float = 0.0, stop: tuple[str, ...] = (),
                 json_schema: dict | None = None, want_logprobs: bool = False,
                 seed: int | None = None) -> tuple[list[GeneratedToken], str, bytes]:
        """A text picked by the prompt's hash (and ``seed`` when sampling): words, or an instance of
        ``json_schema``; cut at the first stop string, or after ``max_tokens`` bytes ("length")."""
        self._check(len(tokens))
        time.sleep(self.delay)
        state = _hasher(tokens)
        if temperature:
            state.update(f"seed={seed}".encode())
        rng = _digest(state.copy())
        if json_schema is not None:
            text = json.dumps(_instance(json_schema, rng)).encode()
        else:
            text = (" " + " ".join(rng.choice(WORDS, size=int(rng.integers(4, 16)))) + ".").encode()
        finish = "stop"
        hits = [text.index(s.encode()) for s in stop if s and s.encode() in text]
        if hits:
            text = text[:min(hits)]
        if len(text) > max_tokens:
            text, finish = text[:max_tokens], "length"
        out = []
        for byte in text:
            logprobs = None
            if want_logprobs:
                logprobs = self._logprobs(state.copy())
                logprobs[byte] = max(logprobs[byte], float(logprobs.max()) + 1.0)  # the token taken is the likeliest
                logprobs = logprobs - np.logaddexp.reduce(logprobs)
            out.append(GeneratedToken(byte, bytes([byte]), logprobs))
            state.update(np.asarray([byte], dtype="<u2").tobytes())
        self.evaluated_tokens += len(tokens) + len(out)
        return out, finish, text

    def close(self) -> None:
        pass


def _instance(schema: dict, rng: np.random.Generator):
    """A value that satisfies the common JSON-schema keywords (type, enum, const, properties, required,
    items, minItems/maxItems, minimum/maximum)."""
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][int(rng.integers(len(schema["enum"])))]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return _instance(schema[key][0], rng)
    kind = schema.get("type", "object")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        properties = schema.get("properties", {})
        return {name: _instance(properties[name], rng) for name in properties}
    if kind == "array":
        low = int(schema.get("minItems", 1))
        n = max(low, min(int(schema.get("maxItems", low + 2)), low + int(rng.integers(0, 3))))
        return [_instance(schema.get("items", {"type": "string"}), rng) for _ in range(n)]
    if kind in ("integer", "number"):
        low, high = schema.get("minimum", 0), schema.get("maximum", 5)
        value = low + (high - low) * float(rng.random())
        return int(round(value)) if kind == "integer" else round(value, 3)
    if kind == "boolean":
        return bool(rng.integers(2))
    if kind == "null":
        return None
    return " ".join(rng.choice(WORDS, size=int(rng.integers(1, 5))))
