"""Progress on long work: a tqdm bar on a terminal, plain lines otherwise (logs, CI, pipes).

    for item in progress(items, desc="rubric"):
        ...

Off a terminal it prints ``desc: 0/80`` at the start, then a line at every tenth of the work and at the
end (``desc: 40/80 (50%), 12 s``), all on standard error, so a log shows the work moving without
carriage returns.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import IO, TypeVar

__all__ = ["HEARTBEAT_SECONDS", "progress", "stage"]
HEARTBEAT_SECONDS = 30.0  # a long stage says it is still running at least this often
T = TypeVar("T")


def progress(iterable: Iterable[T], *, total: int | None = None, desc: str = "items", enabled: bool = True,
             stream: IO[str] | None = None) -> Iterator[T]:
    """Yield from ``iterable`` while showing how far it is (nothing at all when ``enabled`` is False)."""
    stream = stream if stream is not None else sys.stderr
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)  # type: ignore[arg-type]
    if not enabled:
        yield from iterable
        return
    if _is_terminal(stream):
        from tqdm.auto import tqdm

        yield from tqdm(iterable, total=total, desc=desc, file=stream, leave=False)
        return
    yield from _lines(iterable, total, desc, stream)


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _lines(iterable: Iterable[T], total: int | None, desc: str, stream: IO[str]) -> Iterator[T]:
    start = time.monotonic()
    of = f"/{total}" if total else ""
    print(f"{desc}: 0{of}", file=stream, flush=True)
    step = max(1, (total or 10) // 10)
    done = 0
    for item in iterable:
        yield item
        done += 1
        if done % step == 0 and done != total:
            share = f" ({100 * done // total}%)" if total else ""
            print(f"{desc}: {done}{of}{share}, {time.monotonic() - start:.0f} s", file=stream, flush=True)
    print(f"{desc}: {done}{of} done, {time.monotonic() - start:.0f} s", file=stream, flush=True)


@contextmanager
def stage(desc: str, *, enabled: bool = True, every: float = HEARTBEAT_SECONDS, stream: IO[str] | None = None,
          clock: Callable[[], float] = time.monotonic,
          wait: Callable[[threading.Event, float], bool] = threading.Event.wait,
          seconds: dict[str, float] | None = None, key: str | None = None) -> Iterator[None]:
    """A long step that prints no lines of its own: once it has run ``every`` seconds, ``desc: still running, N s``
    (from a background thread) and again every ``every`` seconds, then ``desc: done in N s``, on standard error. A
    step shorter than ``every`` prints nothing (a quick command, or an error at once, stays one line).

    ``clock`` (seconds) and ``wait`` (``wait(stop, seconds)``: True once ``stop`` is set, False when the seconds
    passed first) are the time it reads and waits on; a test gives its own to drive the beats. ``seconds``: a
    record the step's wall time is added to, under ``key`` (default ``desc``)."""
    stream = stream if stream is not None else sys.stderr
    start = clock()
    if not enabled:
        try:
            yield
        finally:
            _add_time(seconds, key or desc, clock() - start)
        return
    stop, beats = threading.Event(), []

    def beat() -> None:
        while not wait(stop, every):
            beats.append(1)
            print(f"{desc}: still running, {clock() - start:.0f} s", file=stream, flush=True)

    thread = threading.Thread(target=beat, name="judgetune-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        _add_time(seconds, key or desc, clock() - start)
    if beats:
        print(f"{desc}: done in {clock() - start:.0f} s", file=stream, flush=True)


def _add_time(seconds: dict[str, float] | None, key: str, elapsed: float) -> None:
    if seconds is not None:
        seconds[key] = round(seconds.get(key, 0.0) + elapsed, 3)
