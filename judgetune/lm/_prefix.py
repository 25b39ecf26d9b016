"""Plan the scoring of many token sequences over the prefixes they share (a prefix tree), and read how
many prompt tokens a server's prompt cache served (the order that brings items of one source to a model
one after another is ``_batch.source_order``).

Grouped data (one article with many summaries, one context with many claims, one question with
many answers) gives prompts that share much more than the instruction and demos. Sorted by their
tokens, such prompts sit next to each other, and the nodes of their prefix tree are the shared
sources. :func:`plan_phases` walks that tree: each phase names a prefix that the shared KV sequence
must hold and the items that continue from it, so every shared source is evaluated once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

# A branch of the tree becomes a phase of its own when sharing its prefix saves at least this many
# tokens of evaluation; below that, its items run over the parent's prefix (fewer, fuller decodes).
MIN_SAVED = 16


@dataclass(frozen=True)
class Phase:
    """``prefix``: what the shared sequence must start with; ``members``: the items (indices) scored over it."""

    prefix: list[int]
    members: list[int]


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The number of leading tokens ``a`` and ``b`` share."""
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def plan_phases(sequences: Sequence[list[int]], caps: Sequence[int], cached: Sequence[int] = (), *,
                tree: bool = True, min_saved: int = MIN_SAVED) -> list[Phase]:
    """Phases that score every sequence once, over the prefixes the sequences share.

    Args:
        sequences: the items' tokens.
        caps: per item, the most leading tokens it may take from a shared prefix (it evaluates the rest).
        cached: what the shared sequence holds now (a branch it already holds costs nothing to enter).
        tree: False gives one phase over the prefix common to all items (the instruction and demos).
        min_saved: a branch of the tree gets its own phase when that saves at least this many tokens.

    A phase prefix is never one token long (llama.cpp's single-token pass gives other numbers). The
    phases of one branch follow each other (depth first); the branch the shared sequence already holds
    comes first.
    """
    if not sequences:
        return []
    order = sorted(range(len(sequences)), key=lambda i: sequences[i])
    first, last = sequences[order[0]], sequences[order[-1]]
    depth = min(common_prefix(first, last), *caps)
    depth = depth if depth >= 2 else 0
    if not tree:
        return [Phase(list(first[:depth]), sorted(order))]

    def visit(run: list[int], depth: int) -> list[Phase]:
        leaves = [i for i in run if caps[i] <= depth]
        branches: list[tuple[int, list[int], int]] = []
        for child in _runs([i for i in run if caps[i] > depth], lambda i: sequences[i][depth]):
            shared = min(common_prefix(sequences[child[0]], sequences[child[-1]]), *(caps[i] for i in child))
            known = min(common_prefix(cached, sequences[child[0]]), shared)
            if len(child) == 1:  # a lone item enters only what is cached; it runs the rest in its own sequence
                shared = max(depth, known)
            saved = len(child) * (shared - depth) - (shared - max(depth, known))
            if shared >= 2 and saved >= min_saved:
                branches.append((known, child, shared))
            else:
                leaves += child
        phases = [Phase(list(sequences[run[0]][:depth]), sorted(leaves))] if leaves else []
        for _, child, shared in sorted(branches, key=lambda b: -b[0]):
            phases += visit(child, shared)
        return phases

    return visit(order, depth)


def _runs(items: list[T], key: Callable[[T], Hashable]) -> list[list[T]]:
    """Maximal runs of consecutive items with equal keys."""
    runs: list[list[T]] = []
    for item in items:
        if runs and key(runs[-1][-1]) == key(item):
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


def reported_usage(body: dict) -> dict[str, int]:
    """A server answer's token counts: ``prompt_tokens``, ``completion_tokens`` and, where the server says how
    many prompt tokens its prompt cache served, ``cached_tokens`` (OpenAI, vLLM and llama.cpp's server:
    ``usage.prompt_tokens_details.cached_tokens``; llama.cpp's server also ``timings.cache_n``).
    llama-cpp-python's server reuses the previous prompt's KV cache but reports none of this."""
    usage = body.get("usage") or {}
    out = {k: int(usage[k]) for k in ("prompt_tokens", "completion_tokens") if _count(usage.get(k))}
    details, timings = usage.get("prompt_tokens_details"), body.get("timings")
    for cached in (details.get("cached_tokens") if isinstance(details, dict) else None,
                   timings.get("cache_n") if isinstance(timings, dict) else None):
        if _count(cached):
            out["cached_tokens"] = int(cached)
            break
    return out


def _count(value: object) -> bool:
    """Whether a reported value is a token count (a non-negative number, not a flag)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
