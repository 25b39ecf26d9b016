"""The embedded llama.cpp backend: chat template, next-token log-probabilities with KV-cache prefix
reuse, generation with stop strings, logprobs and JSON-schema grammars; and, scored several items per
decode over a shared, cached prompt prefix, next-token log-probabilities (``next_logprobs_many``) and
target-text log-probabilities (``target_logprobs``).
Thread-safe: one lock guards both llama.cpp contexts (generation and scoring)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from judgetune.errors import LMSpecError, PromptTooLongError
from judgetune.lm._prefix import common_prefix
from judgetune.lm._scoring_context import SCORE_SEQUENCES, _ScoringContext


def no_template_message(path: str | Path) -> str:
    return (f"{path} carries no chat template (GGUF field tokenizer.chat_template): judgetune's LM judges prompt "
            "a chat model; use an instruction-tuned (chat) GGUF, such as local:smollm2 or local:qwen1.5b")


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
    batch_size = SCORE_SEQUENCES - 1  # items scored side by side in one decode

    def __init__(self, path: str | Path, *, n_ctx: int = 4096, n_threads: int = 2, seed: int = 0):
        from judgetune.lm.llama_build import amx_problem, prepare_import

        prepare_import()  # llama.cpp's OpenMP threads would spin between calls, stalling the other core
        try:
            from llama_cpp import Llama
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        except ImportError as err:  # pragma: no cover - depends on the install
            raise ImportError("the embedded engine needs llama-cpp-python: pip install llama-cpp-python") from err
        if (problem := amx_problem()) is not None:  # it would die with SIGILL in the first decode
            raise LMSpecError(problem)
        self.path = Path(path)
        self.n_ctx = n_ctx
        try:
            self._llm = Llama(str(self.path), n_ctx=n_ctx, n_threads=n_threads, n_threads_batch=n_threads,
                              logits_all=False, seed=seed, verbose=False)
        except ValueError:  # llama.cpp says only "Failed to load model from file"
            raise LMSpecError(f"{self.path}: llama.cpp could not load this file as a model (not a GGUF model, "
                              "truncated or damaged); download it again") from None
        template = self._llm.metadata.get("tokenizer.chat_template")
        if not template:
            self._llm.close()
            raise LMSpecError(no_template_message(self.path))
        piece = lambda token: self._llm.detokenize([token], special=True).decode()  # noqa: E731
        self._format = Jinja2ChatFormatter(template, eos_token=piece(self._llm.token_eos()),
                                           bos_token=piece(self._llm.token_bos()))
        self._lock = threading.RLock()
        self._grammars: dict[str, object] = {}
        self.evaluated_tokens = 0
        self.reuse_prefix = True  # False re-evaluates every prompt from scratch (for benchmarks)
        # False shares only the prefix common to a whole batch (instruction, demos), not each source's (benchmarks)
        self.share_sources = True
        self.n_threads = n_threads
        self._scoring: _ScoringContext | None = None
        # how many leading tokens of the generation context hold KV entries from a batched pass; the
        # tokens generation appends one at a time (single-token kernel) are never reused
        self._batched = 0

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

        At least two tokens are always evaluated, and tokens that generation evaluated one at a time
        are evaluated again: llama.cpp's single-token kernel gives logits up to 0.4 nats away from the
        batched pass, while any batch of two or more gives identical ones, so a result never depends
        on what the previous call left in the cache.
        """
        llm = self._llm
        keep = max(0, min(self._reusable(tokens), len(tokens) - 2))
        if not self.reuse_prefix:
            keep = 0
        llm._ctx.kv_cache_seq_rm(-1, keep, -1)
        llm.n_tokens = keep
        llm.eval(tokens[keep:])
        self._batched = len(tokens)
        self.evaluated_tokens += len(tokens) - keep
        return keep

    def _reusable(self, tokens: list[int]) -> int:
        """Leading tokens of ``tokens`` whose batched KV entries the generation context holds."""
        llm = self._llm
        return min(llm.longest_token_prefix(llm._input_ids.tolist(), tokens), self._batched)

    def next_logprobs(self, tokens: list[int]) -> np.ndarray:
        """Log-probabilities of every next token after ``tokens`` (one forward pass over the new part).

        The pass runs in whichever context already holds the longer part of ``tokens``: the generation
        context (e.g. a reasoning just generated) or the scoring context's shared prefix (e.g. the
        instruction and demos that batched items shared). Both give the same numbers.
        """
        import llama_cpp

        if not tokens:
            raise ValueError("next_logprobs needs at least one token")
        if len(tokens) >= self.n_ctx:
            raise PromptTooLongError(f"prompt of {len(tokens)} tokens does not fit the context of {self.n_ctx}")
        with self._lock:
            if len(tokens) >= 4 and self._scoring_holds_more(tokens):
                return self.next_logprobs_many([tokens])[0]
            self._eval_from_cache(tokens)
            raw = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._llm.ctx, -1), shape=(self.n_vocab,))
            return log_softmax(raw)

    def _scoring_holds_more(self, tokens: list[int]) -> bool:
        """Whether the scoring context's cached prefix covers more of ``tokens`` than the generation context's."""
        if self._scoring is None or not self.reuse_prefix:
            return False
        return common_prefix(self._scoring.prefix, tokens) > self._reusable(tokens)

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

    def target_logprobs(self, items: Sequence[tuple[list[int], list[int]]], *,
                        reuse: bool | None = None) -> list[np.ndarray]:
        """log p(target[j] | prompt, target[:j]) for every token of every (prompt, target) item.

        With ``reuse`` (default: ``reuse_prefix``) the prompts' common token prefix is evaluated once
        and kept in the KV cache (sequence 0) for later calls; each item's own tokens then run beside
        other items' in one ``llama_decode``, on a copy of that prefix. Without it every item is
        evaluated alone from an empty cache. Both give the same numbers (see tests/test_likelihood.py).
        """
        for prompt, target in items:
            if not prompt or not target:
                raise ValueError("target_logprobs needs a non-empty prompt and target")
            if len(prompt) + len(target) > self.n_ctx:
                raise ValueError(f"prompt and target of {len(prompt) + len(target)} tokens do not fit the context "
                                 f"of {self.n_ctx}")
            if len(prompt) + len(target) < 3:
                raise ValueError("a one-token prompt with a one-token target cannot be scored in a batched pass")
        return self._score([(prompt + target[:-1], len(prompt) - 1) for prompt, target in items], reuse,
                           lambda i, rows: _token_logprobs(rows, items[i][1]))

    def next_logprobs_many(self, prompts: Sequence[list[int]], *, reuse: bool | None = None) -> list[np.ndarray]:
        """``next_logprobs`` of every prompt, several prompts per ``llama_decode`` over their shared, cached
        prefix (as ``target_logprobs``); the same numbers as one prompt at a time (tests/test_lm_batch.py)."""
        return [first for first, _ in self.path_logprobs_many([(prompt, []) for prompt in prompts], reuse=reuse)]

    def path_logprobs_many(self, items: Sequence[tuple[list[int], list[int]]], *,
                           reuse: bool | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
        """For every ``(prompt, path)``: ``next_logprobs(prompt)`` and log p(path[j] | prompt, path[:j]) for
        j >= 1, from one pass over ``prompt + path[:-1]`` (so a label of several tokens costs no second
        pass over the prompt's own tokens); several items per decode as ``next_logprobs_many``."""
        for prompt, path in items:
            if len(prompt) < 2:
                raise ValueError("scoring next tokens needs prompts of two tokens or more")
            if len(prompt) + max(len(path) - 1, 0) >= self.n_ctx:
                raise PromptTooLongError(f"prompt of {len(prompt)} tokens does not fit the context of {self.n_ctx}")
        def reduce(i: int, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            path = items[i][1]
            return log_softmax(rows[0]), _token_logprobs(rows[1:], path[1:]) if len(path) > 1 else np.zeros(0)

        return self._score([(prompt + path[:-1], len(prompt) - 1) for prompt, path in items], reuse, reduce)

    def _score(self, items: list[tuple[list[int], int]], reuse: bool | None,
               reduce: Callable[[int, np.ndarray], Any]) -> list[Any]:
        """``reduce(i, logits rows)`` of every ``(tokens, out_from)`` item ``i``, each item's rows reduced as soon as
        they are computed (see ``_ScoringContext``)."""
        with self._lock:
            if self._scoring is None:

                self._scoring = _ScoringContext(self)
            scoring = self._scoring
            before = scoring.fed
            reuse = self.reuse_prefix if reuse is None else reuse
            try:
                if not reuse:
                    out = [reduce(i, scoring.score_alone(t, o)) for i, (t, o) in enumerate(items)]
                else:
                    out = scoring.score_shared(items, tree=self.share_sources, reduce=reduce)
            except BaseException:
                scoring.clear()  # what the sequences hold is unknown after a failed decode
                raise
            finally:
                self.evaluated_tokens += scoring.fed - before
            return out

    def _grammar(self, json_schema: dict | None):
        from llama_cpp.llama_grammar import LlamaGrammar

        if json_schema is None:
            return None
        key = json.dumps(json_schema, sort_keys=True)
        if key not in self._grammars:
            self._grammars[key] = LlamaGrammar.from_json_schema(key, verbose=False)
        return self._grammars[key]

    def close(self) -> None:
        if self._scoring is not None:
            self._scoring.close()
            self._scoring = None
        self._llm.close()


def _token_logprobs(rows: np.ndarray, tokens: list[int]) -> np.ndarray:
    """log p(tokens[j]) under logits row j. The vocabulary-wide exponentials stay in the rows' float32 (a
    float64 copy of every row took most of a likelihood item's Python time) and are summed in float64: within
    1e-7 nats of an all-float64 pass (tests/test_token_logprobs.py)."""
    top = rows.max(axis=1, keepdims=True)
    norm = top[:, 0].astype(np.float64) + np.log(np.exp(rows - top).sum(axis=1, dtype=np.float64))
    return rows[np.arange(len(tokens)), tokens].astype(np.float64) - norm


