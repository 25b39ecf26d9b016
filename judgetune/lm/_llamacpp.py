"""The embedded llama.cpp backend: chat template, next-token log-probabilities with KV-cache prefix
reuse, generation with stop strings, logprobs and JSON-schema grammars; and, scored several items per
decode over a shared, cached prompt prefix, next-token log-probabilities (``next_logprobs_many``) and
target-text log-probabilities (``target_logprobs``).
Thread-safe: one lock guards both llama.cpp contexts (generation and scoring)."""

from __future__ import annotations

import ctypes
import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from judgetune.errors import PromptTooLongError
from judgetune.lm._prefix import common_prefix, plan_phases
from judgetune.lm._spec import LMSpecError

# llama.cpp's OpenMP threads spin between calls unless told otherwise, stalling the other core.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
SCORE_BATCH = 512  # tokens per llama_decode of the scoring context (one micro-batch)
SCORE_SEQUENCES = 4  # sequences in the scoring context: the shared prefix (0) and 3 items beside it
# Items decoded side by side run equally many tokens (a shorter one reruns part of its prefix): at most
# this much padding per item, else it goes to another decode (long items gain little from sharing one)
PAD_TOKENS, PAD_SHARE = 8, 0.1


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
        rows = self._score([(prompt + target[:-1], len(prompt) - 1) for prompt, target in items], reuse)
        return [_token_logprobs(r, target) for r, (_, target) in zip(rows, items)]

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
        rows = self._score([(prompt + path[:-1], len(prompt) - 1) for prompt, path in items], reuse)
        return [(log_softmax(r[0]), _token_logprobs(r[1:], path[1:]) if len(path) > 1 else np.zeros(0))
                for r, (_, path) in zip(rows, items)]

    def _score(self, items: list[tuple[list[int], int]], reuse: bool | None) -> list[np.ndarray]:
        """The scoring context's logits rows for ``(tokens, out_from)`` items (see ``_ScoringContext``)."""
        with self._lock:
            if self._scoring is None:
                self._scoring = _ScoringContext(self)
            scoring = self._scoring
            before = scoring.fed
            reuse = self.reuse_prefix if reuse is None else reuse
            try:
                if not reuse:
                    out = [scoring.score_alone(t, o) for t, o in items]
                else:
                    out = scoring.score_shared(items, tree=self.share_sources)
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
    """log p(tokens[j]) under logits row j."""
    z = rows.astype(np.float64)
    top = z.max(axis=1, keepdims=True)
    norm = top[:, 0] + np.log(np.exp(z - top).sum(axis=1))
    return z[np.arange(len(tokens)), tokens] - norm


def _equal_groups(own: list[int], shared: int, size: int) -> list[list[int]]:
    """Items in groups of at most ``size`` that can run equally many tokens: longest first, an item
    joins a group when its ``own`` tokens plus the ``shared`` prefix reach the group's longest and the
    tokens it then runs again (its padding) stay within PAD_TOKENS or PAD_SHARE of that longest."""
    groups: list[list[int]] = []
    for i in sorted(range(len(own)), key=lambda i: -own[i]):
        longest = own[groups[-1][0]] if groups else 0
        if (groups and len(groups[-1]) < size and own[i] + shared >= longest
                and longest - own[i] <= max(PAD_TOKENS, PAD_SHARE * longest)):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


class _ScoringContext:
    """A second llama.cpp context on the same weights for scoring target texts: sequence 0 holds the
    last shared prefix, copied to up to ``SCORE_SEQUENCES - 1`` item sequences decoded side by side.

    Every ``llama_decode`` carries at least two tokens: llama.cpp's single-token kernel gives logits
    that differ from any batched pass (see ``LlamaCppModel._eval_from_cache``).
    """

    def __init__(self, owner: LlamaCppModel):
        import llama_cpp
        from llama_cpp._internals import LlamaContext

        # The generation context's settings (flash attention off, ...) with one KV stream per sequence,
        # each as long as the generation context. A stream lays out prefix and item as a from-scratch
        # pass does; in one unified cache an item's cells sit apart from its prefix, and llama.cpp's
        # attention then gives logits up to 0.2 nats away (measured).
        params = llama_cpp.llama_context_params.from_buffer_copy(owner._llm.context_params)
        params.n_batch, params.n_ubatch = SCORE_BATCH, SCORE_BATCH
        params.n_seq_max, params.kv_unified = SCORE_SEQUENCES, False
        params.n_ctx = owner.n_ctx * SCORE_SEQUENCES
        self.n_ctx, self.n_vocab = owner.n_ctx, owner.n_vocab
        self._context = LlamaContext(model=owner._llm._model, params=params, verbose=False)
        self._memory = llama_cpp.llama_get_memory(self._context.ctx)
        self._batch = llama_cpp.llama_batch_init(SCORE_BATCH, 0, 1)
        self.prefix: list[int] = []  # what sequence 0 holds
        self.held: list[list[int]] = [[] for _ in range(SCORE_SEQUENCES)]  # what each item sequence holds
        self.fed = 0  # tokens run through the model

    def close(self) -> None:
        import llama_cpp

        llama_cpp.llama_batch_free(self._batch)
        self._context.close()

    def _run(self, jobs: list[tuple[int, int, list[int], int]]) -> list[np.ndarray]:
        """Feed jobs ``(sequence, first position, tokens, outputs from index)``; each job's logits rows.

        The jobs hold equally many tokens, and every decode takes the same slice of each: llama.cpp
        splits a batch of several KV streams into micro-batches of equally many tokens per sequence,
        and a sequence left with one token in a micro-batch gets logits up to 0.8 nats off (measured).
        A slice holds two tokens or more (see ``LlamaCppModel._eval_from_cache``).
        """
        import llama_cpp

        length = len(jobs[0][2])
        if any(len(tokens) != length for _, _, tokens, _ in jobs) or length < 2:
            raise ValueError(f"jobs of unequal or too few tokens: {[len(t) for _, _, t, _ in jobs]}")
        step = SCORE_BATCH // len(jobs)
        cuts = list(range(0, length, step)) + [length]
        if len(cuts) > 2 and cuts[-1] - cuts[-2] == 1:
            cuts[-2] -= 1  # the last slice takes one token of the one before, so it holds two
        rows: list[list[np.ndarray]] = [[] for _ in jobs]
        batch = self._batch
        for start, end in zip(cuts, cuts[1:]):
            want, n = [], 0
            for j, (seq, pos, tokens, out_from) in enumerate(jobs):
                for i in range(start, end):
                    batch.token[n], batch.pos[n], batch.n_seq_id[n] = tokens[i], pos + i, 1
                    batch.seq_id[n][0], batch.logits[n] = seq, i >= out_from
                    if i >= out_from:
                        want.append((j, n))
                    n += 1
            batch.n_tokens = n
            code = llama_cpp.llama_decode(self._context.ctx, batch)
            if code != 0:
                raise RuntimeError(f"llama_decode returned {code}")
            self.fed += n
            if want:  # every output row of this decode in one view, each job's rows copied out at once
                ctx = self._context.ctx
                base = ctypes.cast(llama_cpp.llama_get_logits(ctx), ctypes.c_void_p).value
                at = [(ctypes.cast(llama_cpp.llama_get_logits_ith(ctx, k), ctypes.c_void_p).value - base)
                      // (4 * self.n_vocab) for _, k in want]
                block = np.ctypeslib.as_array(llama_cpp.llama_get_logits(ctx), shape=(max(at) + 1, self.n_vocab))
                for j in range(len(jobs)):
                    mine = [row for (owner, _), row in zip(want, at) if owner == j]
                    if mine:
                        rows[j].append(block[mine])
        return [(r[0] if len(r) == 1 else np.concatenate(r)) if r else np.empty((0, self.n_vocab), np.float32)
                for r in rows]

    def _set_prefix(self, prefix: list[int]) -> None:
        """Sequence 0 holds ``prefix``: its cached part kept, the rest evaluated (two tokens at least)."""
        import llama_cpp

        keep = common_prefix(self.prefix, prefix)
        if keep == len(prefix) and keep == len(self.prefix):
            return
        if len(prefix) - keep == 1:
            keep = max(0, keep - 1)
        llama_cpp.llama_memory_seq_rm(self._memory, 0, keep, -1)
        self.prefix = prefix[:keep]
        if len(prefix) > keep:
            self._run([(0, keep, prefix[keep:], len(prefix))])
        self.prefix = list(prefix)

    def score_alone(self, tokens: list[int], out_from: int) -> np.ndarray:
        """The logits rows of ``tokens[out_from:]`` from an empty cache, as one sequence (the from-scratch path)."""
        if len(tokens) < 2:
            raise ValueError("one token alone cannot be scored in a batched pass")
        self.clear()
        (rows,) = self._run([(0, 0, tokens, out_from)])
        self.clear()
        return rows

    def clear(self) -> None:
        """Empty every sequence."""
        import llama_cpp

        llama_cpp.llama_memory_clear(self._memory, True)
        self.prefix = []
        self.held = [[] for _ in range(SCORE_SEQUENCES)]

    def _hold(self, seq: int, tokens: list[int], start: int) -> None:
        """Item sequence ``seq`` holds ``tokens[:start]``: what it kept from its last item when that covers
        it, else a copy of sequence 0 (which holds at least that much), cut at ``start``."""
        import llama_cpp

        if common_prefix(self.held[seq], tokens) < start:
            # a copy across KV streams takes the whole of sequence 0 (and costs a copy of the stream's buffer)
            llama_cpp.llama_memory_seq_cp(self._memory, 0, seq, -1, -1)
            self.held[seq] = list(self.prefix)
        llama_cpp.llama_memory_seq_rm(self._memory, seq, start, -1)
        self.held[seq] = self.held[seq][:start]

    def score_shared(self, items: Sequence[tuple[list[int], int]], *, tree: bool = True) -> list[np.ndarray]:
        """The logits rows of ``tokens[out_from:]`` for every ``(tokens, out_from)`` item, ``SCORE_SEQUENCES - 1``
        items per decode, each continuing from a prefix that sequence 0 holds.

        With ``tree`` the items are scored phase by phase down their prefix tree (``plan_phases``): a
        prefix that several items share beyond the instruction (their source) is evaluated once, in
        sequence 0, and each item continues from a copy of it. Without it, the items' common prefix only.
        An item sequence keeps what its last item left, so items of one source need no further copy.
        """
        if not items:
            return []
        # each item runs its first output position itself, and at least two tokens of its own
        caps = [min(o, len(t) - 2) for t, o in items]
        out: list[np.ndarray | None] = [None] * len(items)
        for phase in plan_phases([t for t, _ in items], caps, self.prefix, tree=tree):
            if not phase.prefix:
                self.clear()
            elif self.prefix[:len(phase.prefix)] != phase.prefix:
                self._set_prefix(phase.prefix)
            shared = len(phase.prefix)
            members = phase.members
            for group in _equal_groups([len(items[i][0]) - shared for i in members], shared, SCORE_SEQUENCES - 1):
                # every item of a group runs as many tokens as the group's longest: a shorter one starts
                # that many tokens earlier, on a shorter copy of the prefix
                group = [members[g] for g in group]
                length = max(len(items[i][0]) - shared for i in group)
                jobs = []
                for seq, i in enumerate(group, start=1):
                    tokens, out_from = items[i]
                    start = len(tokens) - length
                    self._hold(seq, tokens, start)
                    jobs.append((seq, start, tokens[start:], out_from - start))
                for seq, i, rows in zip(range(1, len(group) + 1), group, self._run(jobs)):
                    out[i] = rows
                    self.held[seq] = list(items[i][0])
        return out
