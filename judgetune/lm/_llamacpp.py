"""The embedded llama.cpp backend: chat template, next-token log-probabilities with KV-cache prefix
reuse, and generation with stop strings, logprobs and JSON-schema grammars. Thread-safe: one lock
guards the single llama.cpp context."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from judgetune.errors import PromptTooLongError

# llama.cpp's OpenMP threads spin between calls unless told otherwise, stalling the other core.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def log_softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    top = z.max()
    return z - (top + np.log(np.exp(z - top).sum()))


@dataclass(frozen=True)
class GeneratedToken:
    token_id: int
    text: bytes
    logprobs: np.ndarray | None  # the full next-token log-probabilities, when asked for


class LlamaCppModel:
    """A GGUF model in llama-cpp-python. ``evaluated_tokens`` counts tokens actually run through
    the model (not served from the KV cache), for throughput accounting."""

    backend = "llamacpp"

    def __init__(self, path: str | Path, *, n_ctx: int = 4096, n_threads: int = 2, seed: int = 0):
        try:
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError as err:  # pragma: no cover - depends on the install
            raise ImportError("the embedded engine needs llama-cpp-python: pip install llama-cpp-python") from err
        self.path = Path(path)
        self.n_ctx = n_ctx
        self._llm = Llama(str(self.path), n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                          logits_all=False, seed=seed, verbose=False)
        template = self._llm.metadata.get("tokenizer.chat_template")
        if not template:
            raise ValueError(f"{self.path} carries no chat template (tokenizer.chat_template)")
        piece = lambda token: self._llm.detokenize([token], special=True).decode()  # noqa: E731
        self._format = Jinja2ChatFormatter(template, eos_token=piece(self._llm.token_eos()),
                                           bos_token=piece(self._llm.token_bos()))
        self._lock = threading.RLock()
        self._grammars: dict[str, object] = {}
        self.evaluated_tokens = 0
        self.reuse_prefix = True  # False re-evaluates every prompt from scratch (for benchmarks)

    @property
    def n_vocab(self) -> int:
        return self._llm.n_vocab()

    def render(self, messages: list[dict[str, str]], prefix: str = "") -> str:
        """The prompt text: the model's chat template with the assistant turn opened, then ``prefix``."""
        return self._format(messages=messages).prompt + prefix

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)

    def token_text(self, token_id: int) -> str:
        return self._llm.detokenize([token_id]).decode("utf-8", "replace")

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock:
            yield

    def _eval_from_cache(self, tokens: list[int]) -> int:
        """Bring the context to ``tokens``, evaluating only what the cached prefix lacks; returns reused count.

        At least two tokens are always evaluated: llama.cpp's single-token kernel gives logits up to
        0.4 nats away from the batched pass, while any batch of two or more gives identical ones,
        so a result never depends on what the previous call left in the cache.
        """
        llm = self._llm
        keep = max(0, min(llm.longest_token_prefix(llm._input_ids.tolist(), tokens), len(tokens) - 2))
        if not self.reuse_prefix:
            keep = 0
        llm._ctx.kv_cache_seq_rm(-1, keep, -1)
        llm.n_tokens = keep
        llm.eval(tokens[keep:])
        self.evaluated_tokens += len(tokens) - keep
        return keep

    def next_logprobs(self, tokens: list[int]) -> np.ndarray:
        """Log-probabilities of every next token after ``tokens`` (one forward pass over the new part)."""
        import llama_cpp

        if not tokens:
            raise ValueError("next_logprobs needs at least one token")
        if len(tokens) >= self.n_ctx:
            raise PromptTooLongError(f"prompt of {len(tokens)} tokens does not fit the context of {self.n_ctx}")
        with self._lock:
            self._eval_from_cache(tokens)
            raw = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._llm.ctx, -1), shape=(self.n_vocab,))
            return log_softmax(raw)

    def generate(self, tokens: list[int], *, max_tokens: int, temperature: float = 0.0, stop: tuple[str, ...] = (),
                 json_schema: dict | None = None, want_logprobs: bool = False,
                 seed: int | None = None) -> tuple[list[GeneratedToken], str, bytes]:
        """Generate after ``tokens``; returns (tokens, finish reason, text cut at the first stop string)."""
        import llama_cpp

        llm = self._llm
        with self._lock:
            if seed is not None:
                llm.set_seed(seed)
            max_tokens = min(max_tokens, self.n_ctx - len(tokens))
            if max_tokens < 1:
                raise PromptTooLongError(f"prompt of {len(tokens)} tokens fills the context of {self.n_ctx}")
            out: list[GeneratedToken] = []
            finish, text = "length", b""
            # The prompt is evaluated here (same rule as next_logprobs), so Llama.generate finds it
            # cached whole and samples the first token from these logits.
            self._eval_from_cache(tokens)
            steps = llm.generate(tokens, temp=temperature, top_k=40, top_p=0.95, min_p=0.05 if not temperature else 0.0,
                                 grammar=self._grammar(json_schema))
            for token in steps:
                if llama_cpp.llama_vocab_is_eog(llm._model.vocab, token):
                    finish = "stop"
                    break
                logprobs = None
                if want_logprobs:
                    raw = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(self.n_vocab,))
                    logprobs = log_softmax(raw)
                piece = llm.detokenize([token], prev_tokens=tokens + [t.token_id for t in out])
                out.append(GeneratedToken(int(token), piece, logprobs))
                self.evaluated_tokens += 1
                text = llm.detokenize([t.token_id for t in out], prev_tokens=tokens)
                hits = [text.index(s.encode()) for s in stop if s.encode() in text]
                if hits:
                    text, finish = text[: min(hits)], "stop"
                    break
                if len(out) >= max_tokens:
                    break
            steps.close()
            return out, finish, text

    def _grammar(self, json_schema: dict | None):
        from llama_cpp.llama_grammar import LlamaGrammar

        if json_schema is None:
            return None
        key = json.dumps(json_schema, sort_keys=True)
        if key not in self._grammars:
            self._grammars[key] = LlamaGrammar.from_json_schema(key, verbose=False)
        return self._grammars[key]

    def close(self) -> None:
        self._llm.close()
