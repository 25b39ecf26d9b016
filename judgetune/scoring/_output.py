"""The scored output of a run: rows appended chunk by chunk to a part file, resumed after a kill, and moved
(JSONL) or converted (CSV, Parquet) to ``--out`` when the last chunk is written.

While a run goes on, ``OUT.part/`` beside ``--out`` holds ``run.json`` (what is being scored: the judge's
and the input's fingerprints) and ``rows.jsonl`` (the rows scored so far, in input order, each chunk
appended and fsynced). A run that finds ``OUT.part/`` of the same judge and input keeps every complete
row in it and continues after them; a partial last line (a kill during a write) is cut off.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from judgetune._files import atomic_write, write_text
from judgetune.datasets import Example, parquet_module
from judgetune.errors import JudgetuneError, redact, shown
from judgetune.judges import Verdict

__all__ = ["COLUMNS", "OUT_FORMATS", "PartFile", "completed", "done_marker", "encode_row", "identity_of", "item_digest",
           "out_format", "output_row", "part_folder"]

OUT_FORMATS = {".jsonl": "jsonl", ".csv": "csv", ".parquet": "parquet"}
COLUMNS = ("id", "score", "raw_score", "parsed", "human", "distribution", "failure", "degraded")
PART_VERSION = 1


def out_format(path: str | Path) -> str:
    """``jsonl``, ``csv`` or ``parquet`` from ``--out``'s suffix.

    Raises:
        JudgetuneError: another suffix (a .tsv or .txt would be written as something else than it says).
    """
    kind = OUT_FORMATS.get(Path(path).suffix.lower())
    if kind is None:
        raise JudgetuneError(f"--out {shown(path)}: expected a file named .jsonl, .csv or .parquet (the format is "
                             f"chosen by the suffix), found {Path(path).suffix or 'no suffix'!r}")
    return kind


def output_row(example: Example, verdict: Verdict, score: float | None) -> dict[str, Any]:
    """One scored item as ``--out`` holds it (a failure says why, with any key redacted)."""
    row = {"id": example.id, "score": score, "raw_score": verdict.score, "parsed": verdict.parsed,
           "human": example.judgment, "distribution": verdict.distribution}
    if score is None:
        row["failure"] = redact(verdict.raw or "no score")
    if verdict.degraded:  # scored without some of its signals (e.g. a reference-based one, no reference)
        row["degraded"] = list(verdict.degraded)
    return row


def encode_row(row: dict[str, Any]) -> bytes:
    """A JSON line in UTF-8. Text that UTF-8 cannot carry (a lone surrogate) is written as a JSON escape
    (``\\ud800``), so it reads back as it was and never fails the run at write time."""
    text = json.dumps(row, ensure_ascii=False) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(row, ensure_ascii=True) + "\n").encode("ascii")


class PartFile:
    """``OUT.part/``: the rows scored so far and what they were scored with (see the module docstring)."""

    def __init__(self, out: str | Path, identity: dict[str, Any]):
        self.out = Path(out)
        self.folder = part_folder(self.out)
        self.rows_path = self.folder / "rows.jsonl"
        self.identity = {"version": PART_VERSION, **identity}
        self._handle: Any = None
        self.kept_failed, self.kept_first_failure = 0, None  # failed judgments among the rows kept

    @property
    def exists(self) -> bool:
        return self.folder.is_dir()

    def open(self, *, restart: bool = False) -> int:
        """Start the part (``restart``: afresh, dropping an old one), or resume it: the number of complete rows
        kept. A part made by another judge, input or format is refused with one line."""
        if restart and self.folder.exists():
            shutil.rmtree(self.folder)
        if self.folder.is_dir() and not any(self.folder.iterdir()):  # a start killed between mkdir and its record
            self.folder.rmdir()
        kept = 0
        if self.folder.is_dir():
            recorded = self._recorded()
            if recorded.get("version") != PART_VERSION or any(
                    recorded.get(k) != v for k, v in self.identity.items() if k != "state"):
                changed = sorted(k for k in self.identity if k != "state" and recorded.get(k) != self.identity[k])
                raise JudgetuneError(
                    f"--out {self.out}: {self.folder} holds a run in progress with a different "
                    f"{' and '.join(changed) or 'version'}; re-run that command to finish it, pass --force to start "
                    "over, or choose another --out")
            kept = self._cut_to_complete_rows()
            self.identity = {**recorded, **{k: v for k, v in self.identity.items() if k != "state"}}
        else:
            self.folder.mkdir()
            self.save_state({})
        self._handle = open(self.rows_path, "ab")  # noqa: SIM115 - closed in close()/finish()
        return kept

    def _recorded(self) -> dict[str, Any]:
        try:
            value = json.loads((self.folder / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            value = None
        if not isinstance(value, dict):
            raise JudgetuneError(f"--out {self.out}: {self.folder} is not a judgetune run in progress (no readable "
                                 "run.json); remove it, or pass --force to start over")
        return value

    @property
    def state(self) -> dict[str, Any]:
        """What a run records as it goes (tokens spent, the input validated), kept across a resume."""
        return dict(self.identity.get("state") or {})

    def save_state(self, state: dict[str, Any]) -> None:
        self.identity["state"] = state
        with atomic_write(self.folder / "run.json") as handle:
            json.dump(self.identity, handle, indent=1)

    def _cut_to_complete_rows(self) -> int:
        """Keep the complete rows (whole lines that parse as an object with an id) and cut the rest off."""
        if not self.rows_path.exists():
            return 0
        good, count = 0, 0
        with open(self.rows_path, "rb") as handle:
            for line in handle:
                if not line.endswith(b"\n"):
                    break
                try:
                    row = json.loads(line)
                except ValueError:
                    break
                if not isinstance(row, dict) or "id" not in row:
                    break
                if row.get("score") is None:
                    self.kept_failed += 1
                    self.kept_first_failure = self.kept_first_failure or row.get("failure") or "no score"
                good += len(line)
                count += 1
        if good != self.rows_path.stat().st_size:
            with open(self.rows_path, "r+b") as handle:
                handle.truncate(good)
                os.fsync(handle.fileno())
        return count

    def ids(self) -> Iterator[str]:
        """The ids of the kept rows, in order (read lazily)."""
        with open(self.rows_path, "rb") as handle:
            for line in handle:
                yield str(json.loads(line)["id"])

    def append(self, rows: Iterable[dict[str, Any]]) -> None:
        """Append rows and make them durable (written and fsynced) before returning."""
        self.append_bytes(b"".join(encode_row(r) for r in rows))

    def append_bytes(self, lines: bytes) -> None:
        """Append rows already encoded as JSON lines (see :func:`encode_row`), durably. A part whose rows file
        was removed (or replaced) while the run went on stops the run: rows would go into a deleted file."""
        self._check_in_place()
        self._handle.write(lines)
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def _check_in_place(self) -> None:
        try:
            same = os.path.samestat(os.fstat(self._handle.fileno()), os.stat(self.rows_path))
        except OSError:
            same = False
        if not same:
            raise JudgetuneError(f"{self.folder}: removed (or replaced) while scoring; stopped before writing into "
                                 "a deleted file. Run the command again: it starts over (with --force if the output "
                                 "exists)")

    def discard(self) -> None:
        """Remove the part (a run that wrote no row)."""
        self.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def finish(self, *, chunk_size: int = 4096) -> None:
        """Move (JSONL) or convert (CSV, Parquet) the complete rows to ``out`` and remove the part."""
        self.close()
        kind = out_format(self.out)
        if kind == "jsonl":
            with contextlib.suppress(FileNotFoundError):
                if self.out.is_symlink():  # never write through a link
                    self.out.unlink()
            os.chmod(self.rows_path, 0o666 & ~_umask())
            os.replace(self.rows_path, self.out)
        elif kind == "csv":
            with atomic_write(self.out) as handle:
                writer = csv.writer(handle)
                writer.writerow(COLUMNS)
                for row in _read_rows(self.rows_path):
                    writer.writerow([_csv_cell(row.get(c)) for c in COLUMNS])
        else:
            _write_parquet(self.out, self.rows_path, chunk_size)
        if self.identity.get("judge") is not None:  # a re-run of the same judge and input finds it complete; written
            stat = self.out.stat()  # before the part is removed, so a kill in between leaves a part known as done
            done = {k: v for k, v in self.identity.items() if k != "state"}
            write_text(done_marker(self.out), json.dumps({**done, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}))
        shutil.rmtree(self.folder)


def part_folder(out: Path) -> Path:
    """Where a run in progress on ``out`` keeps its rows and state (``OUT.part``)."""
    return out.with_name(out.name + ".part")


def done_marker(out: Path) -> Path:
    """The file beside a finished output that records which judge and input made it (hidden: ``.NAME.done``)."""
    return out.with_name(f".{out.name}.done")


def completed(out: Path, identity: dict[str, Any]) -> bool:
    """Whether ``out`` is the finished output of this judge and input (its marker matches, the file unchanged)."""
    try:
        done = json.loads(done_marker(out).read_text(encoding="utf-8"))
        stat = out.stat()
    except (OSError, ValueError):
        return False
    same = all(done.get(k) == v for k, v in {"version": PART_VERSION, **identity}.items() if k not in ("state", "lm"))
    return same and done.get("size") == stat.st_size and done.get("mtime_ns") == stat.st_mtime_ns


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _read_rows(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, "rb") as handle:
        for line in handle:
            yield json.loads(line)


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return _plain_text(value) if isinstance(value, str) else value


def _plain_text(text: str) -> str:
    """Text a UTF-8 file can hold: a lone surrogate becomes U+FFFD (CSV and Parquet have no escape for it)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)


def _write_parquet(out: Path, rows_path: Path, chunk_size: int) -> None:
    pq = parquet_module()
    import pyarrow as pa

    schema = pa.schema([("id", pa.string()), ("score", pa.float64()), ("raw_score", pa.float64()),
                        ("parsed", pa.bool_()), ("human", pa.float64()),
                        ("distribution", pa.map_(pa.string(), pa.float64())), ("failure", pa.string()),
                        ("degraded", pa.list_(pa.string()))])
    with atomic_write(out, "wb") as handle:
        writer = pq.ParquetWriter(handle, schema)
        batch: list[dict[str, Any]] = []

        def flush() -> None:
            columns = {c: [r.get(c) for r in batch] for c in COLUMNS}
            columns["id"] = [_plain_text(str(v)) for v in columns["id"]]
            columns["failure"] = [None if v is None else _plain_text(v) for v in columns["failure"]]
            columns["distribution"] = [[(_plain_text(k), float(p)) for k, p in (v or {}).items()]
                                       for v in columns["distribution"]]
            writer.write_table(pa.table(columns, schema=schema))
            batch.clear()

        for row in _read_rows(rows_path):
            batch.append(row)
            if len(batch) >= chunk_size:
                flush()
        if batch:
            flush()
        writer.close()


def identity_of(config_dict: dict[str, Any], source: dict[str, Any], out: Path, lm: Any = None) -> dict[str, Any]:
    """What makes two runs the same for resuming: the judge.json's fingerprint, the input, the output format, and
    the LM that answers (the model file's fingerprint in-process, the server's endpoint and model over HTTP): a
    resume never mixes two models or two servers in one output."""
    judge = hashlib.sha256(json.dumps(config_dict, sort_keys=True, ensure_ascii=True).encode("ascii")).hexdigest()
    identity = {"judge": judge, "input": source, "format": out_format(out)}
    if lm is not None:
        spec = getattr(lm, "spec", None)
        identity["lm"] = {"model": getattr(lm, "model_id", None),
                          "endpoint": spec.endpoint if getattr(lm, "client", None) is not None and spec else None}
    return identity


def item_digest(previous: str, item: Example) -> str:
    """The running digest of the items given from Python: each item's fields chained onto the digest before it, so a
    resume can check that the items already scored are the same ones (not only the same ids)."""
    text = json.dumps(dataclasses.asdict(item), sort_keys=True, ensure_ascii=True, default=str)
    return hashlib.sha256((previous + text).encode("ascii")).hexdigest()
