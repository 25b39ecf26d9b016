"""``judgetune score --engine ray``: the same scoring on a Ray cluster (``pip install 'judgetune[ray]'``).

The driver loads the judge.json once, checks that its LM loads (as in-process scoring does, before any
work), validates the data file once and cuts it into chunks, each named by where it starts (a byte offset in
JSONL, a row in Parquet). A Ray Dataset of those chunks goes through ``map_batches`` with
:class:`ChunkScorer`, an actor class: each actor builds the judge from the driver's copy of the config (a
judge.json edited after the run started changes nothing) and, per chunk, reads its rows from the file with
judgetune's own checks and scores them. The driver takes the scored chunks in input order and appends them
to the output exactly as in-process scoring does, so the output, its identity, its resume after a kill and the
one-writer lock are the same. On several nodes the data file must be readable at the same path on every node
(a shared filesystem), and each node's environment gives the actors there their key and trust settings.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from judgetune import datasets
from judgetune.config import JudgeConfig
from judgetune.datasets import Example, example_from_record, parse_json
from judgetune.errors import JudgetuneError
from judgetune.scoring._output import encode_row, output_row
from judgetune.scoring._protocol import load_config_lm
from judgetune.scoring._run import ScoreRun, _Meter, _skip_written, _tally, _validated_rows, file_source, open_part

__all__ = ["ChunkScorer", "actor_threads", "chunk_plan", "score_on_ray"]


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise JudgetuneError("--engine ray needs Ray: pip install 'judgetune[ray]'") from None
    return ray


def chunk_plan(path: str | Path, kind: str, first_row: int, rows: int, chunk_size: int) -> list[dict[str, Any]]:
    """Chunks of the ``rows`` rows of a validated file from ``first_row`` (0-based) on: ``{"index", "start",
    "line", "rows"}`` where ``start`` is the byte offset of the chunk's first line (JSONL) or its row number
    (Parquet) and ``line`` its line. One pass over a JSONL file's bytes; none over a Parquet file."""
    firsts = list(range(first_row, rows, chunk_size))
    sizes = [min(chunk_size, rows - first) for first in firsts]
    if kind == "parquet":
        return [{"index": i, "start": first, "line": first + 1, "rows": n}
                for i, (first, n) in enumerate(zip(firsts, sizes))]
    wanted, found, position, offset = set(firsts), {}, 0, 0
    with open(path, "rb") as handle:  # every non-blank line of a validated JSONL file is a row
        for number, raw in enumerate(handle, 1):
            if raw.decode("utf-8-sig" if number == 1 else "utf-8", errors="replace").strip():  # as the reader
                if position in wanted:
                    found[position] = (offset, number)
                position += 1
            offset += len(raw)
    return [{"index": i, "start": found[first][0], "line": found[first][1], "rows": n}
            for i, (first, n) in enumerate(zip(firsts, sizes))]


class _ParquetSlices:
    """Rows of a Parquet file by position, each row group decoded once and kept while chunks read from it
    (a chunk converts only its own rows to Python: reading is linear in the file, not in chunks x group)."""

    def __init__(self, path: str):
        self.file = datasets.parquet_module().ParquetFile(path)
        sizes = [self.file.metadata.row_group(g).num_rows for g in range(self.file.num_row_groups)]
        self.firsts = [sum(sizes[:g]) for g in range(len(sizes))]
        self.sizes = sizes
        self._group: tuple[int, Any] | None = None

    def rows(self, start: int, count: int) -> Iterator[tuple[int, dict[str, Any]]]:
        """``(row number, row)`` of ``count`` rows from ``start`` (0-based)."""
        position, end = start, start + count
        for group, (first, size) in enumerate(zip(self.firsts, self.sizes)):
            if position >= end:
                return
            if first + size <= position:
                continue
            if self._group is None or self._group[0] != group:
                self._group = (group, self.file.read_row_group(group))
            table = self._group[1]
            piece = table.slice(position - first, min(end, first + size) - position)
            for offset, row in enumerate(piece.to_pylist()):
                yield position + offset, row
            position = min(end, first + size)


def _read_chunk(path: str, kind: str, chunk: dict[str, Any], fields: dict[str, str] | None, label: str | None,
                parquet: _ParquetSlices | None = None) -> list[Example]:
    """The ``chunk["rows"]`` rows of a chunk, read from where it starts (the file was validated)."""
    mapping = datasets.FieldMap(fields or {}, label)
    names, stem, problems, out = mapping.names(), Path(path).stem, [], []

    def add(line: int, record: dict[str, Any]) -> None:
        if mapping:
            record, _ = mapping.apply(record)
        example = example_from_record(record, where=f"{path}:{line}", default_id=f"{stem}:{line}",
                                      require_label=False, problems=problems, names=names)
        if example is not None:
            out.append(example)

    if kind == "parquet":
        for number, row in (parquet or _ParquetSlices(path)).rows(chunk["start"], chunk["rows"]):
            add(number + 1, {str(k): v for k, v in row.items() if v is not None})
    else:
        with open(path, "rb") as handle:
            handle.seek(chunk["start"])
            for line, raw in enumerate(handle, chunk["line"]):
                if len(out) >= chunk["rows"]:
                    break
                text = raw.decode("utf-8-sig" if line == 1 else "utf-8")
                if not text.strip():
                    continue
                value, problem = parse_json(text.rstrip("\r\n"), where=path, line=line, what="a JSON object")
                if problem or not isinstance(value, dict):
                    problems.append(problem or f"{path}:{line}: row: expected a JSON object")
                    continue
                add(line, value)
    if problems or len(out) != chunk["rows"]:
        raise JudgetuneError(f"{path}: the file changed while it was scored ({(problems or ['rows missing'])[0]})")
    return out


class ChunkScorer:
    """Ray Data actor: the judge built once per actor from the driver's config; each batch of chunk
    descriptors read and scored. ``server`` holds the LM's options (``n_threads`` for an in-process model)."""

    def __init__(self, config: dict[str, Any], where: str, data: str, kind: str, fields: dict[str, str] | None,
                 label: str | None, timeout: float, server: dict[str, Any]):
        self.config = JudgeConfig.from_dict(config, where=where)
        self.lm = load_config_lm(self.config, timeout=timeout, where=where, **server)
        self.judge = self.config.build_judge(self.lm, where=where)
        self.data, self.kind, self.fields, self.label = data, kind, fields, label
        self.parquet = _ParquetSlices(data) if kind == "parquet" else None

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        indexes, payloads, counts, tokens = [], [], [], []
        for i in range(len(batch["index"])):
            chunk = {key: _plain(batch[key][i]) for key in ("index", "start", "line", "rows")}
            examples = _read_chunk(self.data, self.kind, chunk, self.fields, self.label, self.parquet)
            before = dict(getattr(getattr(self.lm, "client", None), "usage", {}) or {})
            verdicts = self.judge.judge_all(examples)
            scores = self.config.calibrated(verdicts, self.judge, examples)
            rows = [output_row(e, v, s) for e, v, s in zip(examples, verdicts, scores)]
            after = dict(getattr(getattr(self.lm, "client", None), "usage", {}) or {})
            tally = ScoreRun(Path(self.data))
            _tally(tally, verdicts, scores)
            indexes.append(chunk["index"])
            payloads.append(b"".join(encode_row(r) for r in rows))
            counts.append(json.dumps({"failed": tally.failed, "first_failure": tally.first_failure,
                                      "degraded": tally.degraded, "first_degraded": tally.first_degraded}))
            tokens.append(json.dumps({k: int(after.get(k, 0)) - int(before.get(k, 0)) for k in after}))
        return {"index": indexes, "rows": payloads, "counts": counts, "tokens": tokens}


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def actor_threads(lm: Any, workers: int, address: str | None) -> int:
    """CPUs each actor reserves and runs on: an in-process model's threads (``$JUDGETUNE_THREADS``, else 2; on
    a local cluster no more than this machine's cores shared by the workers), 1 for any other judge."""
    if lm is None or getattr(lm, "client", None) is not None:
        return 1
    from judgetune.lm import embedded_threads

    threads = embedded_threads()
    if address is None:
        threads = min(threads, max(1, (os.cpu_count() or 1) // workers))
    return threads


def score_on_ray(config_path: str | Path, data: str | Path, out: str | Path, *, fields: dict[str, str] | None = None,
                 label: str | None = None, chunk_size: int = 1000, force: bool = False, address: str | None = None,
                 workers: int = 2, timeout: float = 60.0, server: dict[str, Any] | None = None,
                 progress: bool = False) -> ScoreRun:
    """Score a JSONL or Parquet file with a frozen judge on Ray into ``out``: the same output as in-process
    scoring, resumed the same way. ``address``: a running cluster (None: a local one with ``workers`` actors).

    Raises:
        JudgetuneError: Ray missing, a CSV/TSV input, an LM that does not load, or as in-process scoring (lock,
            existing out, another run).
    """
    ray = _ray()
    out, start = Path(out), time.monotonic()
    kind = datasets.stream_format(data)
    if kind not in ("jsonl", "parquet"):
        raise JudgetuneError(f"--engine ray: {data}: expected a .jsonl or .parquet file (a chunk of CSV cannot be "
                             "found by its offset); convert it, or score it in-process")
    config = JudgeConfig.load(config_path)
    server = dict(server or {})
    where = str(server.pop("where", config_path))
    lm = load_config_lm(config, timeout=timeout, where=where, **server)  # fails here, in one line, as in-process
    try:  # the driver's LM names the run's identity (as in-process) and is closed before the actors start
        config.freeze_label_position(lm, where=where)  # a label position the server no longer offers: one line here
        threads = actor_threads(lm, workers, address)
        in_process_model = lm is not None and getattr(lm, "client", None) is None
        source = file_source(data, fields=fields, label=label)
        run = ScoreRun(out)
        with open_part(out, config, source, run, force=force, lm=lm) as part:
            lm = _closed(lm)
            run.total = _validated_rows(part, source, run)
            state = part.state
            if run.resumed:  # the rows written must be the input's first rows
                rest = _skip_written(iter(example for _, example in datasets.iter_examples(
                    data, [], fields=fields, label=label)), part, run.resumed)
                next(rest, None)
            plan = chunk_plan(data, kind, run.resumed, run.total, chunk_size)
            usage = dict(state.get("usage") or {})
            if in_process_model:
                server["n_threads"] = threads
            for chunk_rows, counts, spent in _ray_chunks(ray, plan, config.to_dict(), where,
                                                         str(Path(data).resolve()), kind, fields, label, address,
                                                         workers, threads, timeout, server, run, progress):
                usage = {k: int(usage.get(k, 0)) + int(spent.get(k, 0)) for k in {*usage, *spent}}
                if any(spent.values()):
                    state["usage"] = usage
                    part.save_state(state)
                part.append_bytes(chunk_rows)
                run.scored += chunk_rows.count(b"\n")
                run.failed += counts["failed"]
                run.first_failure = run.first_failure or counts["first_failure"]
                run.degraded += counts["degraded"]
                run.first_degraded = run.first_degraded or counts["first_degraded"]
            run.rows = run.resumed + run.scored
            run.usage = {k: v for k, v in usage.items() if v}
            part.finish(chunk_size=chunk_size)
    finally:
        _closed(lm)
    run.seconds = time.monotonic() - start
    return run


def _closed(lm: Any) -> None:
    if lm is not None:
        lm.close()


def _ray_chunks(ray: Any, plan: list[dict[str, Any]], config: dict[str, Any], where: str, data: str, kind: str,
                fields: dict[str, str] | None, label: str | None, address: str | None, workers: int, threads: int,
                timeout: float, server: dict[str, Any], run: ScoreRun,
                progress: bool) -> Iterator[tuple[bytes, dict[str, Any], dict[str, int]]]:
    """Scored chunks from the cluster, in input order. A local cluster is shut down when the run ends, however it
    ends (SIGTERM included); an actor's failure becomes one line."""
    if not plan:
        return
    started = False
    if not ray.is_initialized():
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                   "logging_level": logging.WARNING}
        logging.getLogger("ray").setLevel(logging.WARNING)
        if address:
            ray.init(address=address, **options)
        else:
            ray.init(num_cpus=workers * threads, **options)
        started = True
    previous = _terminate_as_exit() if started else None
    try:
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True
        context.enable_progress_bars = False
        dataset = ray.data.from_items(plan, override_num_blocks=min(len(plan), max(1, workers * 4)))
        # one chunk in flight per actor: with Ray's default (several), the first actor up took every chunk of a
        # short run while the others idled (measured: 2 chunks, 2 actors, 1 used)
        pool = ray.data.ActorPoolStrategy(size=workers, max_tasks_in_flight_per_actor=1)
        scored = dataset.map_batches(ChunkScorer, batch_size=1, compute=pool, num_cpus=threads,
                                     fn_constructor_kwargs={"config": config, "where": where, "data": data,
                                                            "kind": kind, "fields": fields, "label": label,
                                                            "timeout": timeout, "server": server})
        with _Meter(run.total, run.resumed, enabled=progress, stream=sys.stderr) as meter:
            expected = 0
            for row in _actor_errors_as_one_line(scored.iter_rows()):
                if int(row["index"]) != expected:
                    raise JudgetuneError(f"ray: chunk {row['index']} arrived where chunk {expected} was due")
                expected += 1
                payload = bytes(row["rows"])
                meter.update(payload.count(b"\n"))
                yield payload, json.loads(row["counts"]), json.loads(row["tokens"])
    finally:
        if started:
            ray.shutdown()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)


def _actor_errors_as_one_line(rows: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Ray wraps an actor's exception in its own, with the remote traceback: a judgetune error (an LM that a
    worker cannot load, a file changed mid-run) is raised again as itself, one line."""
    try:
        yield from rows
    except JudgetuneError:
        raise
    except Exception as err:  # noqa: BLE001  (Ray's wrappers have no common public base to catch)
        cause = err
        while cause is not None and not isinstance(cause, JudgetuneError):
            cause = getattr(cause, "cause", None) or cause.__cause__
        if cause is None:
            raise
        raise JudgetuneError(f"ray worker: {str(cause).splitlines()[0]}") from None


def _terminate_as_exit() -> Any:
    """Turn SIGTERM into SystemExit while a local cluster runs, so that it is shut down (its daemons would
    otherwise outlive the driver); the previous handler, or None off the main thread."""
    try:
        return signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    except ValueError:  # not the main thread
        return None
