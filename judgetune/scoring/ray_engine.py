"""``judgetune score --engine ray``: the same scoring on a Ray cluster (``pip install 'judgetune[ray]'``).

The driver validates the data file once (as in-process scoring does) and cuts it into chunks, each
named by where it starts (a byte offset in JSONL, a row in Parquet). A Ray Dataset of those chunks goes
through ``map_batches`` with :class:`ChunkScorer`, an actor class: each actor loads the frozen judge once
and, per chunk, reads its rows from the file with judgetune's own reader (the same ids and checks as
in-process) and scores them. The driver takes the scored chunks in input order and appends them to the
output exactly as in-process scoring does, so the output, its resume after a kill and the one-writer
lock are the same. On several nodes the data file and the judge.json must be readable at the same
path on every node (a shared filesystem).
"""

from __future__ import annotations

import json
import logging
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
from judgetune.scoring._run import ScoreRun, _Meter, file_source, open_part, validate_file

__all__ = ["ChunkScorer", "chunk_plan", "score_on_ray"]


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise JudgetuneError("--engine ray needs Ray: pip install 'judgetune[ray]'") from None
    return ray


def chunk_plan(path: str | Path, kind: str, first_row: int, chunk_size: int,
               fields: dict[str, str] | None, label: str | None) -> list[dict[str, Any]]:
    """Chunks of the rows from ``first_row`` (0-based) on: ``{"index", "start", "line", "rows"}`` where ``start``
    is the byte offset of the chunk's first line (JSONL) or its row number (Parquet) and ``line`` its line."""
    starts, count = [], 0
    for position, (line, _) in enumerate(datasets.iter_examples(path, [], fields=fields, label=label)):
        if position >= first_row and (position - first_row) % chunk_size == 0:
            starts.append(line)
        count = position + 1
    sizes = [min(chunk_size, count - first_row - i * chunk_size) for i in range(len(starts))]
    if kind == "parquet":
        return [{"index": i, "start": line - 1, "line": line, "rows": n}
                for i, (line, n) in enumerate(zip(starts, sizes))]
    offsets, wanted, offset = {}, set(starts), 0
    with open(path, "rb") as handle:
        for number, raw in enumerate(handle, 1):
            if number in wanted:
                offsets[number] = offset
            offset += len(raw)
    return [{"index": i, "start": offsets[line], "line": line, "rows": n} for i, (line, n) in enumerate(zip(starts, sizes))]


def _read_chunk(path: str, kind: str, chunk: dict[str, Any], fields: dict[str, str] | None,
                label: str | None) -> list[Example]:
    """The ``chunk["rows"]`` valid rows of a chunk, read from where it starts (the file was validated)."""
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
        pq = datasets.parquet_module()
        handle = pq.ParquetFile(path)
        start, first = chunk["start"], 0
        for group in range(handle.num_row_groups):
            count = handle.metadata.row_group(group).num_rows
            if first + count > start and len(out) < chunk["rows"]:
                for offset, row in enumerate(handle.read_row_group(group).to_pylist()):
                    if first + offset >= start and len(out) < chunk["rows"]:
                        add(first + offset + 1, {str(k): v for k, v in row.items() if v is not None})
            first += count
    else:
        with open(path, "rb") as handle:
            handle.seek(chunk["start"])
            for line, raw in enumerate(handle, chunk["line"]):
                if len(out) >= chunk["rows"]:
                    break
                text = raw.decode("utf-8-sig" if line == 1 else "utf-8")
                if not text.strip():
                    continue
                value, problem = parse_json(text, where=path, line=line, what="a JSON object")
                if problem or not isinstance(value, dict):
                    problems.append(problem or f"{path}:{line}: row: expected a JSON object")
                    continue
                add(line, value)
    if problems or len(out) != chunk["rows"]:
        raise JudgetuneError(f"{path}: the file changed while it was scored ({(problems or ['rows missing'])[0]})")
    return out


class ChunkScorer:
    """Ray Data actor: the frozen judge loaded once per actor; each batch of chunk descriptors read and scored."""

    def __init__(self, config_path: str, data: str, kind: str, fields: dict[str, str] | None, label: str | None,
                 timeout: float, server: dict[str, Any]):
        self.config = JudgeConfig.load(config_path)
        self.lm = load_config_lm(self.config, timeout=timeout, **server)
        self.judge = self.config.build_judge(self.lm)
        self.data, self.kind, self.fields, self.label = data, kind, fields, label

    def __call__(self, batch: dict[str, Any]) -> dict[str, Any]:
        indexes, payloads, failed, tokens = [], [], [], []
        for i in range(len(batch["index"])):
            chunk = {key: _plain(batch[key][i]) for key in ("index", "start", "line", "rows")}
            examples = _read_chunk(self.data, self.kind, chunk, self.fields, self.label)
            before = dict(getattr(getattr(self.lm, "client", None), "usage", {}) or {})
            verdicts = self.judge.judge_all(examples)
            scores = self.config.calibrated(verdicts, self.judge, examples)
            rows = [output_row(e, v, s) for e, v, s in zip(examples, verdicts, scores)]
            after = dict(getattr(getattr(self.lm, "client", None), "usage", {}) or {})
            indexes.append(chunk["index"])
            payloads.append(b"".join(encode_row(r) for r in rows))
            failed.append(json.dumps([r.get("failure") for r in rows if r["score"] is None][:1] +
                                     [sum(r["score"] is None for r in rows)]))
            tokens.append(json.dumps({k: int(after.get(k, 0)) - int(before.get(k, 0)) for k in after}))
        return {"index": indexes, "rows": payloads, "failed": failed, "tokens": tokens}


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def score_on_ray(config_path: str | Path, data: str | Path, out: str | Path, *, fields: dict[str, str] | None = None,
                 label: str | None = None, chunk_size: int = 1000, force: bool = False, address: str | None = None,
                 workers: int = 2, timeout: float = 60.0, server: dict[str, Any] | None = None,
                 progress: bool = False) -> ScoreRun:
    """Score a JSONL or Parquet file with a frozen judge on Ray into ``out``: the same output as in-process
    scoring, resumed the same way. ``address``: a running cluster (None: a local one with ``workers`` CPUs).

    Raises:
        JudgetuneError: Ray missing, a CSV/TSV input, or as in-process scoring (lock, existing out, another run).
    """
    ray = _ray()
    out, start = Path(out), time.monotonic()
    kind = datasets.stream_format(data)
    if kind not in ("jsonl", "parquet"):
        raise JudgetuneError(f"--engine ray: {data}: expected a .jsonl or .parquet file (a chunk of CSV cannot be "
                             "found by its offset); convert it, or score it in-process")
    config = JudgeConfig.load(config_path)
    source = file_source(data, fields=fields, label=label)
    run = ScoreRun(out)
    with open_part(out, config, source, run, force=force) as part:
        state = part.state
        if state.get("validated") != source["sha256"]:
            state["rows"] = validate_file(data, fields=fields, label=label)
            state["validated"] = source["sha256"]
            part.save_state(state)
        run.total = state["rows"]
        ids = part.ids()
        for _, (_, example) in zip(range(run.resumed), datasets.iter_examples(data, [], fields=fields, label=label)):
            if next(ids) != example.id:
                raise JudgetuneError(f"--out {out}: the rows written differ from the input's; pass --force to "
                                     "start over")
        plan = chunk_plan(data, kind, run.resumed, chunk_size, fields, label)
        usage = dict(state.get("usage") or {})
        if plan:
            for chunk_rows, failed, spent in _ray_chunks(ray, plan, str(Path(config_path).resolve()),
                                                         str(Path(data).resolve()), kind, fields, label, address,
                                                         workers, timeout, server or {}, run, progress):
                part.append_bytes(chunk_rows)
                run.scored += chunk_rows.count(b"\n")
                run.failed += failed[-1]
                run.first_failure = run.first_failure or (failed[0] if len(failed) > 1 else None)
                usage = {k: int(usage.get(k, 0)) + int(spent.get(k, 0)) for k in {*usage, *spent}}
                state["usage"] = usage
                part.save_state(state)
        run.rows = run.resumed + run.scored
        run.usage = {k: v for k, v in usage.items() if v}
        part.finish(chunk_size=chunk_size)
    run.seconds = time.monotonic() - start
    return run


def _ray_chunks(ray: Any, plan: list[dict[str, Any]], config_path: str, data: str, kind: str,
                fields: dict[str, str] | None, label: str | None, address: str | None, workers: int, timeout: float,
                server: dict[str, Any], run: ScoreRun, progress: bool) -> Iterator[tuple[bytes, list, dict]]:
    """Scored chunks from the cluster, in input order."""
    started = False
    if not ray.is_initialized():
        options: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                   "logging_level": logging.WARNING}
        logging.getLogger("ray").setLevel(logging.WARNING)
        if address:
            ray.init(address=address, **options)
        else:
            ray.init(num_cpus=workers, **options)
        started = True
    try:
        context = ray.data.DataContext.get_current()
        context.execution_options.preserve_order = True
        context.enable_progress_bars = False
        dataset = ray.data.from_items(plan, override_num_blocks=min(len(plan), max(1, workers * 4)))
        scored = dataset.map_batches(ChunkScorer, batch_size=1, concurrency=workers, num_cpus=1,
                                     fn_constructor_kwargs={"config_path": config_path, "data": data, "kind": kind,
                                                            "fields": fields, "label": label, "timeout": timeout,
                                                            "server": server})
        with _Meter(run.total, run.resumed, enabled=progress, stream=sys.stderr) as meter:
            expected = 0
            for row in scored.iter_rows():
                if int(row["index"]) != expected:
                    raise JudgetuneError(f"ray: chunk {row['index']} arrived where chunk {expected} was due")
                expected += 1
                payload = bytes(row["rows"])
                meter.update(payload.count(b"\n"))
                yield payload, json.loads(row["failed"]), json.loads(row["tokens"])
    finally:
        if started:
            ray.shutdown()
