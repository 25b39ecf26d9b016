"""RAG items to diagnose: query, gold answer, response and retrieved chunks, in RAGChecker's JSON
layout (its example files read as they are), validated like every other reader."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from judgetune.datasets._readers import _describe, jsonl_rows
from judgetune.errors import DataValidationError

FIELDS = ("query_id", "id", "query", "gt_answer", "response", "retrieved_context", "meta")
# what RAGChecker writes into its output files: accepted and ignored (claims are extracted afresh)
RAGCHECKER_OUTPUT_FIELDS = ("response_claims", "gt_answer_claims", "answer2response", "response2answer",
                            "retrieved2response", "retrieved2answer", "metrics")


@dataclass(frozen=True)
class RagItem:
    """One RAG answer to diagnose.

    ``chunks`` is None when the item gives no retrieved context (only the overall metrics are then
    defined) and ``()`` when the retriever returned nothing (the retriever and generator metrics then
    take the values their definitions give for zero chunks).
    """

    id: str
    query: str
    gold_answer: str
    response: str
    chunks: tuple[str, ...] | None = None
    meta: dict[str, Any] = field(default_factory=dict, hash=False)


def read_rag_items(path: str | Path) -> list[RagItem]:
    """Read and validate RAG items from JSONL (one item per line) or JSON (RAGChecker's
    ``{"results": [...]}`` or a plain list).

    Fields, named as RAGChecker names them: ``query_id`` (or ``id``; default: the item's position,
    from 1), ``query``, ``gt_answer`` (non-empty), ``response`` (text; ``""`` is an empty answer),
    ``retrieved_context`` (optional: a list of texts or of ``{"doc_id", "text"}`` objects), ``meta``.

    Raises:
        DataValidationError: every problem in the file, as ``file:line: field: expected ..., found ...``
            (``file: results[i]: ...`` in a JSON file).
        FileNotFoundError: the file does not exist.
    """
    path = Path(path)
    if path.suffix.lower() not in (".json", ".jsonl"):
        raise DataValidationError([f"{path}: expected a .json or .jsonl file, found suffix {path.suffix!r}"])
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such data file")
    problems: list[str] = []
    rows = ([(f"{path}:{line}", row) for line, row in jsonl_rows(path, problems)]
            if path.suffix.lower() == ".jsonl" else _json_rows(path, problems))
    items: list[RagItem] = []
    seen: dict[str, str] = {}
    for position, (where, record) in enumerate(rows, 1):
        item = _item(record, where=where, default_id=str(position), problems=problems)
        if item is None:
            continue
        if item.id in seen:
            problems.append(f"{where}: query_id: expected a unique id, found {item.id!r} already used at {seen[item.id]}")
            continue
        seen[item.id] = where
        items.append(item)
    if not items and not problems:
        problems.append(f"{path}: expected at least one item, found none")
    if problems:
        raise DataValidationError(problems)
    return items


def _json_rows(path: Path, problems: list[str]) -> list[tuple[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        problems.append(f"{path}: file: expected UTF-8 text, found undecodable bytes ({err.reason})")
        return []
    except json.JSONDecodeError as err:
        problems.append(f"{path}:{err.lineno}: file: expected JSON, found invalid JSON ({err.msg} at column {err.colno})")
        return []
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        return [(f"{path}: results[{i}]", row) for i, row in enumerate(data["results"])]
    if isinstance(data, list):
        return [(f"{path}: [{i}]", row) for i, row in enumerate(data)]
    problems.append(f"{path}: file: expected {{\"results\": [...]}} or a JSON array of items, found {_describe(data)}")
    return []


def _item(record: Any, *, where: str, default_id: str, problems: list[str]) -> RagItem | None:
    before = len(problems)

    def bad(name: str, expected: str, value: Any) -> None:
        problems.append(f"{where}: {name}: expected {expected}, found {_describe(value)}")

    if not isinstance(record, dict):
        bad("item", "a JSON object", record)
        return None
    for name in record:
        if name not in FIELDS and name not in RAGCHECKER_OUTPUT_FIELDS:
            bad(name, f"a known field ({', '.join(FIELDS)}); put extra data under 'meta'", record[name])
    if "query_id" in record and "id" in record:
        bad("id", "either 'query_id' or 'id', not both", record["id"])
    ident = record.get("query_id", record.get("id", default_id))
    if isinstance(ident, bool) or not isinstance(ident, (str, int)) or not str(ident).strip():
        bad("query_id" if "query_id" in record else "id", "a non-empty string or integer", ident)
    for name in ("query", "gt_answer"):
        if not isinstance(record.get(name), str) or not record[name].strip():
            bad(name, "non-empty text", record.get(name))
    if not isinstance(record.get("response"), str):  # "" is a real (empty) answer; absent is not
        bad("response", "text (\"\" for an empty answer)", record.get("response"))
    if not isinstance(record.get("meta", {}), dict):
        bad("meta", "a JSON object", record["meta"])
    chunks = None
    if "retrieved_context" in record:
        value = record["retrieved_context"]
        if not isinstance(value, list):
            bad("retrieved_context", "a list of texts or {doc_id, text} objects", value)
        else:
            chunks = []
            for i, chunk in enumerate(value):
                text = chunk.get("text") if isinstance(chunk, dict) and set(chunk) <= {"doc_id", "text"} else chunk
                if isinstance(text, str) and text.strip():
                    chunks.append(text)
                else:
                    bad(f"retrieved_context[{i}]", "non-empty text or an object with 'text' and optional 'doc_id'", chunk)
    if len(problems) > before:
        return None
    return RagItem(str(ident), record["query"], record["gt_answer"], record["response"],
                   None if chunks is None else tuple(chunks), dict(record.get("meta", {})))
