"""llama.cpp's second context for scoring target texts: a shared prefix decoded once, copied to item sequences
decoded side by side in groups of near-equal length."""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from judgetune.lm._prefix import common_prefix, plan_phases

SCORE_BATCH = 512  # tokens per llama_decode of the scoring context (one micro-batch)
SCORE_SEQUENCES = 4  # sequences in the scoring context: the shared prefix (0) and 3 items beside it

# Prefixes (instruction, demos) evaluated in sequence 0 are saved as its KV state, up to this many bytes, most
# recently used kept: a prefix met again (the gate judges each candidate, each with its own demos, block by block)
# is copied back, not evaluated again
PREFIX_STATES_BYTES = 256 * 2 ** 20
PREFIX_STATE_TOKENS = 32  # shorter prefixes are evaluated again (cheaper than a state's copy)

# Items decoded side by side run equally many tokens (a shorter one reruns part of its prefix): at most
# this much padding per item, else it goes to another decode (long items gain little from sharing one)
PAD_TOKENS, PAD_SHARE = 8, 0.1


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

    def __init__(self, owner: Any):  # the LlamaCppModel whose model this context scores with
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
        self._states: OrderedDict[tuple[int, ...], ctypes.Array] = OrderedDict()  # prefix -> sequence 0's state
        self._state_bytes = 0  # the saved states' total size
        self.restored = 0  # prefixes copied back from a saved state

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
        if len(prefix) - keep >= PREFIX_STATE_TOKENS:
            if self._restore(prefix):
                return
            keep = common_prefix(self.prefix, prefix)  # a failed copy leaves sequence 0 empty
        if len(prefix) - keep == 1:
            keep = max(0, keep - 1)
        llama_cpp.llama_memory_seq_rm(self._memory, 0, keep, -1)
        self.prefix = prefix[:keep]
        if len(prefix) > keep:
            self._run([(0, keep, prefix[keep:], len(prefix))])
        self.prefix = list(prefix)
        if len(prefix) - keep >= PREFIX_STATE_TOKENS:
            self._save(prefix)

    def _save(self, prefix: list[int]) -> None:
        """Keep sequence 0's state (it holds ``prefix``), the least recently used dropped past the bound."""
        import llama_cpp

        ctx = self._context.ctx
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        if not 0 < size <= PREFIX_STATES_BYTES:
            return
        state = (ctypes.c_uint8 * size)()
        if llama_cpp.llama_state_seq_get_data(ctx, state, size, 0) != size:
            return
        old = self._states.pop(tuple(prefix), None)
        self._state_bytes += size - (0 if old is None else len(old))
        self._states[tuple(prefix)] = state
        while self._state_bytes > PREFIX_STATES_BYTES:
            self._state_bytes -= len(self._states.popitem(last=False)[1])

    def _restore(self, prefix: list[int]) -> bool:
        """Sequence 0 holds ``prefix`` copied back from its saved state; False when none is saved (or it fails)."""
        import llama_cpp

        state = self._states.get(tuple(prefix))
        if state is None:
            return False
        llama_cpp.llama_memory_seq_rm(self._memory, 0, -1, -1)
        self.prefix = []
        if llama_cpp.llama_state_seq_set_data(self._context.ctx, state, len(state), 0) != len(state):
            llama_cpp.llama_memory_seq_rm(self._memory, 0, -1, -1)
            self._state_bytes -= len(self._states.pop(tuple(prefix)))
            return False
        self._states.move_to_end(tuple(prefix))
        self.prefix = list(prefix)
        self.restored += 1
        return True

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

    def score_shared(self, items: Sequence[tuple[list[int], int]], *, tree: bool = True,
                     reduce: Callable[[int, np.ndarray], Any] | None = None) -> list[Any]:
        """The logits rows of ``tokens[out_from:]`` for every ``(tokens, out_from)`` item, ``SCORE_SEQUENCES - 1``
        items per decode, each continuing from a prefix that sequence 0 holds. ``reduce(i, rows)``, when given,
        replaces item ``i``'s rows as soon as they are computed (a vocabulary-wide row per token would otherwise
        be held for every item of the call: gigabytes for a thousand items).

        With ``tree`` the items are scored phase by phase down their prefix tree (``plan_phases``): a
        prefix that several items share beyond the instruction (their source) is evaluated once, in
        sequence 0, and each item continues from a copy of it. Without it, the items' common prefix only.
        An item sequence keeps what its last item left, so items of one source need no further copy.
        """
        if not items:
            return []
        # each item runs its first output position itself, and at least two tokens of its own
        caps = [min(o, len(t) - 2) for t, o in items]
        out: list[Any] = [None] * len(items)
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
                    out[i] = rows if reduce is None else reduce(i, rows)
                    self.held[seq] = list(items[i][0])
        return out
