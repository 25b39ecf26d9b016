"""Run one LM call per item over a thread pool, keeping every item: answered or failed with a reason
(items of one source one after another); and gather the calls of such threads into batches (``Coalescer``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from judgetune._progress import progress as progress_lines
from judgetune.errors import ItemError

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """The result of one item: ``value`` when it was answered, else ``error`` says why not."""

    index: int
    value: R | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def source_order(items: Sequence[T], key: Callable[[T], Hashable | None]) -> list[int]:
    """Indices of ``items`` with those of one key together, groups in order of first appearance and items
    in their own order inside a group (``None`` keys stay where they are, each a group of its own)."""
    first: dict[Hashable, int] = {}
    rank = []
    for i, item in enumerate(items):
        k = key(item)
        rank.append(i if k is None else first.setdefault(k, i))
    return sorted(range(len(items)), key=lambda i: (rank[i], i))


def run_items(fn: Callable[[T], R], items: Sequence[T], *, concurrency: int = 1, progress: bool = False,
              description: str = "LM calls") -> list[Outcome[R]]:
    """``fn`` on every item, ``concurrency`` at a time; results in item order.

    Items that carry a ``group`` (Examples: the question, article or context they share) are started
    group by group, so the prompts of one source reach the model one after another: an in-process
    model then scores them over that source's cached KV state, a server's prompt cache keeps it.
    An ItemError (a failed LM call, a prompt too long for the model) becomes a failed Outcome; any
    other exception is a bug and propagates.
    """

    def one(index: int) -> Outcome[R]:
        try:
            return Outcome(index, value=fn(items[index]))
        except ItemError as err:
            return Outcome(index, error=str(err))

    order = source_order(items, lambda item: getattr(item, "group", None))
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        results = list(progress_lines(pool.map(one, order), total=len(items), desc=description, enabled=progress))
    return sorted(results, key=lambda outcome: outcome.index)


class Coalescer(Generic[T, R]):
    """Requests from several threads computed together, up to ``size`` per ``compute_many`` call.

    A thread that submits a request while a batch is running waits; when the batch ends, one waiting
    thread takes every pending request (up to ``size``) and computes them as the next batch. With twice
    ``size`` threads submitting, batches run full. ``compute_many`` returns, per request, its result
    or the exception that request raises in its own thread.
    """

    def __init__(self, compute_many: Callable[[list[T]], list[R | Exception]], size: int):
        self.compute_many, self.size = compute_many, size
        self._pending: list[_Pending] = []
        self._queue = threading.Lock()  # guards _pending
        self._running = threading.Lock()  # one batch at a time
        self.batches: list[int] = []  # the size of every batch computed

    def submit(self, request: T) -> R:
        mine = _Pending(request)
        with self._queue:
            self._pending.append(mine)
        while not mine.done:
            with self._running:
                if mine.done:
                    break
                with self._queue:
                    batch, self._pending = self._pending[:self.size], self._pending[self.size:]
                try:
                    results = self.compute_many([p.request for p in batch])
                except BaseException as err:  # a bug: every request of the batch raises it
                    results = [err] * len(batch)
                self.batches.append(len(batch))
                for pending, result in zip(batch, results):
                    pending.result, pending.done = result, True
        if isinstance(mine.result, BaseException):
            raise mine.result
        return mine.result


class _Pending:
    def __init__(self, request):
        self.request, self.result, self.done = request, None, False
