"""Scoring a stream of items with a frozen judge into one output file: chunk by chunk, resumable, one writer.

Memory holds one chunk at a time whatever the number of rows. A data file is first read once to
validate every row (bad rows stop the run before any work, as everywhere in judgetune) and to count
them; a resumed run whose input has not changed skips that pass. Each scored chunk is appended to
``OUT.part/rows.jsonl`` (see ``_output``); ``--out`` appears, whole, when the last chunk is in.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from array import array
from collections.abc import Iterable, Iterator, Sized
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, TextIO

from judgetune import datasets
from judgetune._files import OutputLock, remove_stale_temps, sha256_of
from judgetune.datasets import Example
from judgetune.errors import DataValidationError, JudgetuneError
from judgetune.scoring._output import PartFile, completed, done_marker, identity_of, item_digest, output_row, part_folder

__all__ = ["ScoreRun", "file_source", "finished_before", "score_stream", "validate_file", "write_scored"]

PROBLEMS_KEPT = 1000  # problems of a bad file listed at most (the rest counted)
BUDGET_MARGIN = 1.2  # an item is taken under --max-tokens when 1.2x the largest item so far still fits


@dataclass
class ScoreRun:
    """What one ``score`` run did. ``rows``: rows in the output now; ``resumed``: rows an earlier run had
    written and this one kept; ``usage``: tokens of every run on this output (a server's own counts);
    ``stopped``: None when the output is complete, ``"budget"`` when ``max_tokens`` stopped it."""

    out: Path
    rows: int = 0
    resumed: int = 0
    scored: int = 0
    failed: int = 0
    first_failure: str | None = None
    degraded: int = 0  # items of this run scored without some of their signals
    first_degraded: str | None = None
    usage: dict[str, int] = field(default_factory=dict)
    cost: float | None = None
    stopped: str | None = None
    seconds: float = 0.0
    total: int | None = None

    @property
    def complete(self) -> bool:
        return self.stopped is None


class _Problems(list):
    """A list of problems that keeps the first ``PROBLEMS_KEPT`` and counts the rest."""

    more = 0

    def append(self, item: str) -> None:
        if len(self) < PROBLEMS_KEPT:
            super().append(item)
        else:
            self.more += 1

    def extend(self, items: Iterable[str]) -> None:
        for item in items:
            self.append(item)

    def raise_if_any(self) -> None:
        if self:
            raise DataValidationError(list(self) + ([f"... and {self.more} more problem(s)"] if self.more else []))


def validate_file(path: str | Path, *, fields: dict[str, str] | None = None, label: str | None = None) -> int:
    """Read a data file once, validating every row and that ids are unique, in memory that does not grow
    with the rows (8 bytes per row for the ids); the number of rows.

    Raises:
        DataValidationError: every problem at once (the first thousand listed).
    """
    problems = _Problems()
    hashes = array("q")
    count = 0
    for _, example in datasets.iter_examples(path, problems, fields=fields, label=label):
        hashes.append(hash(example.id))
        count += 1
    problems.raise_if_any()
    if count == 0:
        raise DataValidationError([f"{path}: expected at least one row, found none"])
    if _has_duplicates(hashes):
        _raise_duplicates(path, fields, label)
    return count


def _has_duplicates(hashes: array) -> bool:
    import numpy as np

    values = np.frombuffer(hashes, dtype=np.int64).copy()
    values.sort()
    return bool(values.size > 1 and (values[1:] == values[:-1]).any())


def _raise_duplicates(path: str | Path, fields: dict[str, str] | None, label: str | None) -> None:
    """Name the lines of repeated ids (a second pass, taken only when the hashes collide)."""
    seen: dict[int, list[tuple[int, str]]] = {}
    for line, example in datasets.iter_examples(path, [], fields=fields, label=label):
        seen.setdefault(hash(example.id), []).append((line, example.id))
    problems = _Problems()
    for entries in seen.values():
        first: dict[str, int] = {}
        for line, id_ in entries:
            if id_ in first:
                problems.append(f"{path}:{line}: id: expected a unique id, found {id_!r} already used on line "
                                f"{first[id_]}")
            else:
                first[id_] = line
    problems.raise_if_any()


def file_source(path: str | Path, *, fields: dict[str, str] | None = None,
                label: str | None = None) -> dict[str, Any]:
    """The record of a data file as an input (its path, fingerprint and the columns read).

    Raises:
        DataValidationError: not a regular file of a known format (a device or FIFO is never read).
        FileNotFoundError: no such file.
    """
    datasets.stream_format(path)
    return {"file": str(Path(path).resolve()), "sha256": sha256_of(Path(path)), "fields": dict(fields or {}),
            "label": label}


def _budget_take(pending: int, max_tokens: int | None, usage: dict[str, int], largest: int) -> int:
    """How many of the ``pending`` items fit in what is left of ``max_tokens`` (0: stop): the first item measures the
    cost; then the largest item so far, with a margin."""
    if max_tokens is None:
        return pending
    room = max_tokens - usage.get("prompt_tokens", 0) - usage.get("completion_tokens", 0)
    if room <= 0:
        return 0
    return min(pending, 1) if largest == 0 else min(pending, int(room // (largest * BUDGET_MARGIN)))


def _items_record(record: dict[str, Any] | None, batch: list[Example], count: int) -> dict[str, Any]:
    """The scored Python items' running digest after ``batch`` (no file digest to compare a resume with)."""
    digest = (record or {}).get("sha256", "")
    for item in batch:
        digest = item_digest(digest, item)
    return {"count": count, "sha256": digest}


def score_stream(config: Any, judge: Any, lm: Any, items: Iterable[Example] | None, out: str | Path, *,
                 source: dict[str, Any], chunk_size: int = 1000, force: bool = False,
                 max_tokens: int | None = None, prices: tuple[float, float] | None = None,
                 progress: bool = False, stream: TextIO | None = None) -> ScoreRun:
    """Score ``items`` (or, with ``items`` None, the data file ``source["file"]``) with a frozen judge into ``out``.

    ``config``: the JudgeConfig; ``judge``: its built judge; ``lm``: its LM (None for signal judges).
    A re-run with the same judge, input and ``out`` after a kill keeps the rows written and scores the
    rest; another judge or input is refused. ``max_tokens`` stops before the tokens of the run (all its
    resumes together) would pass it, keeping what was scored in ``OUT.part``; ``prices`` (per million
    prompt and completion tokens) gives the cost.

    Raises:
        JudgetuneError: another writer on ``out``, ``out`` exists (without ``force``), a run in progress
            of another judge or input, or rows that differ from the ones the part was written from.
        DataValidationError: bad rows in the data file (before any work).
    """
    out = Path(out)
    start = time.monotonic()
    run = ScoreRun(out)
    with open_part(out, config, source, run, force=force, lm=lm) as part:
        from_python = items is not None and "file" not in source  # no file digest: the items' own is kept
        if items is None:
            run.total = _validated_rows(part, source, run)
            items = _file_examples(source["file"], source)
        elif isinstance(items, Sized):  # a list of items: its length is the progress line's total
            run.total = len(items)
        state = part.state  # read after the validation saved its record in it (kept when the usage is saved)
        usage, client = dict(state.get("usage") or {}), getattr(lm, "client", None)
        examples = _skip_written(iter(items), part, run.resumed, state.get("items") if from_python else None)
        meter = _Meter(run.total, run.resumed, enabled=progress, stream=stream or sys.stderr)
        largest = 0  # the most tokens one item took so far (the budget's estimate per item)
        with meter:
            for chunk in _chunks(examples, chunk_size):
                while chunk:
                    take = _budget_take(len(chunk), max_tokens, usage, largest)
                    if take <= 0:
                        run.stopped = "budget"
                        break
                    batch, chunk = chunk[:take], chunk[take:]
                    rows, spent, per_item = _score_chunk(config, judge, client, batch, run)
                    largest = max(largest, per_item)
                    if any(spent.values()):  # tokens spent count against --max-tokens across resumes: saved before
                        usage = _add(usage, spent)  # the rows, so a kill between never lets a resume overshoot
                        state["usage"] = usage
                        part.save_state(state)
                    part.append(rows)
                    run.scored += len(batch)
                    if from_python:  # no file digest: the items' own, saved with the rows
                        state["items"] = _items_record(state.get("items"), batch, run.resumed + run.scored)
                        part.save_state(state)
                    meter.update(len(batch))
                if run.stopped:
                    break
        run.rows = run.resumed + run.scored
        run.usage = usage
        if prices is not None:  # per million prompt and completion tokens
            run.cost = (usage.get("prompt_tokens", 0) * prices[0] + usage.get("completion_tokens", 0) * prices[1]) / 1e6
        if run.stopped is None:
            if run.rows == 0:  # no item given: no part folder is left behind
                part.discard()
                raise JudgetuneError("no items to score")
            part.finish(chunk_size=chunk_size)
    run.seconds = time.monotonic() - start
    return run


def _validated_rows(part: Any, source: dict[str, Any], run: ScoreRun) -> int:
    """The data file's row count, validated once per file content (a resumed run skips this)."""
    state = part.state
    if state.get("validated") != source["sha256"]:
        try:
            state["rows"] = validate_file(source["file"], fields=source["fields"], label=source["label"])
        except DataValidationError:
            if run.resumed == 0:  # a run that never started leaves nothing behind
                part.discard()
            raise
        state["validated"] = source["sha256"]
        part.save_state(state)
    return state["rows"]


def _file_examples(path: str, source: dict[str, Any]) -> Iterator[Example]:
    problems: list[str] = []
    for _, example in datasets.iter_examples(path, problems, fields=source["fields"], label=source["label"]):
        yield example
    if problems:  # the file changed since it was validated
        raise DataValidationError([f"{path}: the file changed while it was scored; re-run the command",
                                   *problems[:10]])


def _skip_written(items: Iterator[Example], part: PartFile, written: int,
                  recorded: dict[str, Any] | None = None) -> Iterator[Example]:
    """``items`` after the first ``written``, whose ids must be those of the rows already in the part, and (items given
    from Python, ``recorded``) whose contents must chain to the digest the run recorded over its first items."""
    if written:
        digest = ""
        for position, (example, id_) in enumerate(zip(items, part.ids()), 1):
            if example.id != id_:
                raise JudgetuneError(f"--out {part.out}: item {position} of the input has id {example.id!r} where the "
                                     f"run in progress wrote {id_!r}: the items changed; pass --force to start over")
            if recorded and position <= recorded["count"]:
                digest = item_digest(digest, example)
                if position == recorded["count"] and digest != recorded["sha256"]:
                    raise JudgetuneError(f"--out {part.out}: the first {position} items differ from the ones the run in "
                                         "progress scored (same ids, other contents): the items changed; pass --force "
                                         "to start over")
            if position == written:
                break
        else:
            raise JudgetuneError(f"--out {part.out}: the input has fewer items than the {written} rows already "
                                 "written; pass --force to start over")
    yield from items


def _chunks(items: Iterator[Example], size: int) -> Iterator[list[Example]]:
    while True:
        chunk = list(islice(items, size))
        if not chunk:
            return
        yield chunk


@contextlib.contextmanager
def open_part(out: Path, config: Any, source: dict[str, Any], run: ScoreRun, *, force: bool,
              lm: Any = None) -> Iterator[PartFile]:
    """``out``'s part file, opened under its writer lock with stale temporary files removed: resumed unless
    ``force`` (the kept rows' counts go into ``run``), closed when the block ends, finished or not.

    Raises:
        JudgetuneError: another writer on ``out``, or ``out`` exists (without ``force``).
    """
    with OutputLock(out, what="another judgetune score"):
        remove_stale_temps(out)
        if out.exists() and not force:
            raise JudgetuneError(f"--out {out}: the file exists and is not a finished run of this judge and input; "
                                 "pass --force to replace it")
        done_marker(out).unlink(missing_ok=True)  # written again when this run finishes
        part = PartFile(out, identity_of(config.to_dict(), source, out, lm))
        run.resumed = part.open(restart=force)
        run.failed, run.first_failure = part.kept_failed, part.kept_first_failure
        try:
            yield part
        finally:
            part.close()


def finished_before(out: Path, config: Any, source: dict[str, Any]) -> bool:
    """Whether ``out`` already holds the finished scores of this judge and input (a re-run has nothing to do); a part
    folder left by a run killed after its output was complete is removed."""
    done = out.exists() and completed(out, identity_of(config.to_dict(), source, out))
    part = part_folder(out)
    if done and part.is_dir():
        with OutputLock(out, what="another judgetune score"):
            shutil.rmtree(part, ignore_errors=True)
    return done


def _tally(run: ScoreRun, verdicts: list, scores: list[float | None]) -> None:
    """Count the failed and the degraded judgments of a batch, keeping the first reason of each."""
    for verdict, score in zip(verdicts, scores):
        if score is None:
            run.failed += 1
            run.first_failure = run.first_failure or (verdict.raw or "no score")
        elif verdict.degraded:
            run.degraded += 1
            run.first_degraded = run.first_degraded or "; ".join(verdict.degraded)


def _score_chunk(config: Any, judge: Any, client: Any, batch: list[Example],
                 run: ScoreRun) -> tuple[list[dict[str, Any]], dict[str, int], int]:
    """Score one batch: ``(its output rows, tokens spent, the most tokens one item took)``; the caller appends."""
    before = dict(getattr(client, "usage", {}) or {}) if client is not None else None
    verdicts = judge.judge_all(batch)
    scores = config.calibrated(verdicts, judge, batch)
    rows = [output_row(e, v, s) for e, v, s in zip(batch, verdicts, scores)]
    _tally(run, verdicts, scores)
    item_tokens = [v.tokens for v in verdicts]
    if before is not None:  # a server: what it reported spending (answers from the cache cost nothing)
        now = client.usage
        spent = {k: int(now.get(k, 0)) - int(before.get(k, 0)) for k in now}
        per_item = max(max(item_tokens, default=0), -(-sum(spent.get(k, 0) for k in
                                                             ("prompt_tokens", "completion_tokens")) // len(batch)))
    else:
        spent = {}
        for verdict in verdicts:
            for key in ("prompt_tokens", "completion_tokens"):
                if verdict.usage.get(key):
                    spent[key] = spent.get(key, 0) + int(verdict.usage[key])
        per_item = max(item_tokens, default=0)
    return rows, spent, per_item


def _add(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: int(a.get(k, 0)) + int(b.get(k, 0)) for k in {*a, *b}}


class _Meter:
    """Progress over rows: a tqdm bar on a terminal; off one, a line at every tenth of the rows (standard error)."""

    def __init__(self, total: int | None, done: int, *, enabled: bool, stream: TextIO):
        self.total, self.done, self.enabled, self.stream = total, done, enabled, stream
        self.start = time.monotonic()
        self._bar = None
        self._next = 0

    def __enter__(self) -> _Meter:
        if not self.enabled:
            return self
        try:
            terminal = self.stream.isatty()
        except (AttributeError, ValueError):
            terminal = False
        if terminal:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, initial=self.done, desc="scoring", unit="item", file=self.stream,
                             leave=False, dynamic_ncols=True)
        else:
            of = f"/{self.total}" if self.total else ""
            print(f"scoring: {self.done}{of}" + (" (resumed)" if self.done else ""), file=self.stream, flush=True)
            self._next = self._step(self.done)
        return self

    def _step(self, done: int) -> int:
        step = max(1, (self.total or 100_000) // 10)
        return (done // step + 1) * step

    def update(self, n: int) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.enabled and self.done >= self._next and self.done != self.total:
            share = f" ({100 * self.done // self.total}%)" if self.total else ""
            of = f"/{self.total}" if self.total else ""
            print(f"scoring: {self.done}{of}{share}, {time.monotonic() - self.start:.0f} s", file=self.stream,
                  flush=True)
            self._next = self._step(self.done)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


def write_scored(out: str | Path, examples: list[Example], verdicts: list[Any], scores: list[float | None], *,
                 force: bool = False) -> ScoreRun:
    """Write scores computed in memory (under a protocol) to ``out`` in its format, as the only writer."""
    out = Path(out)
    run = ScoreRun(out, rows=len(examples), scored=len(examples), total=len(examples))
    with OutputLock(out, what="another judgetune score"):
        remove_stale_temps(out)
        if out.exists() and not force:
            raise JudgetuneError(f"--out {out}: the file exists; pass --force to replace it")
        part = PartFile(out, {"judge": None, "input": {"in memory": True}, "format": None})
        part.open(restart=True)
        try:
            part.append(output_row(e, v, s) for e, v, s in zip(examples, verdicts, scores))
            part.finish()
        finally:
            part.close()
    _tally(run, verdicts, scores)
    return run
