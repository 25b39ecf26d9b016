"""Run one LM call per item over a thread pool, keeping every item: answered or failed with a reason."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Generic, TypeVar

from tqdm.auto import tqdm

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


def run_items(fn: Callable[[T], R], items: Sequence[T], *, concurrency: int = 1, progress: bool = False,
              description: str = "LM calls") -> list[Outcome[R]]:
    """``fn`` on every item, ``concurrency`` at a time; results in item order.

    An ItemError (a failed LM call, a prompt too long for the model) becomes a failed Outcome; any
    other exception is a bug and propagates.
    """

    def one(index: int) -> Outcome[R]:
        try:
            return Outcome(index, value=fn(items[index]))
        except ItemError as err:
            return Outcome(index, error=str(err))

    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        results = pool.map(one, range(len(items)))
        return list(tqdm(results, total=len(items), desc=description, disable=not progress))
