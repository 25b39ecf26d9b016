"""RAG items to diagnose: query, gold answer, response and retrieved chunks, in RAGChecker's JSON
layout (its example files read as they are), validated like every other reader."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from judgetune.datasets._json import read_json
from judgetune.datasets._readers import MAX_ROW_BYTES, check_regular, jsonl_rows
from judgetune.datasets._schema import _identifier, _meta
from judgetune.datasets._validation import describe as _describe
from judgetune.datasets._validation import expected, problems_from
from judgetune.errors import DataValidationError

FIELDS = ("query_id", "id", "query", "gt_answer", "response", "retrieved_context", "meta")


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
    check_regular(path)
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
        data = read_json(path)
    except DataValidationError as err:
        problems.extend(err.problems)
        return []
    rows = None
    if isinstance(data, dict) and isinstance(data.get("results"), list):
        rows = [(f"{path}: results[{i}]", row) for i, row in enumerate(data["results"])]
    elif isinstance(data, list):
        rows = [(f"{path}: [{i}]", row) for i, row in enumerate(data)]
    if rows is not None:  # the per-item size limit of JSONL rows holds for the items of a JSON file too
        big = [where for where, row in rows if len(json.dumps(row, ensure_ascii=False).encode()) > MAX_ROW_BYTES]
        problems.extend(f"{where}: item: expected at most {MAX_ROW_BYTES:,} bytes (the per-item size limit), found "
                        "a larger item; shorten its texts" for where in big)
        return [(where, row) for where, row in rows if where not in big]
    problems.append(f"{path}: file: expected {{\"results\": [...]}} or a JSON array of items, found {_describe(data)}")
    return []


def _nonempty(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise expected("non-empty text")
    return value


def _response(value: Any) -> str:
    if not isinstance(value, str):  # "" is a real (empty) answer; absent is not
        raise expected('text ("" for an empty answer)')
    return value


def _chunk(value: Any) -> str:
    text = value.get("text") if isinstance(value, dict) and set(value) <= {"doc_id", "text"} else value
    if not isinstance(text, str) or not text.strip():
        raise expected("non-empty text or an object with 'text' and optional 'doc_id'")
    return text


def _chunk_list(value: Any) -> list:
    if not isinstance(value, list):
        raise expected("a list of texts or {doc_id, text} objects")
    return value


_Id = Annotated[str, BeforeValidator(_identifier)]


class RagRow(BaseModel):
    """One RAG item as RAGChecker writes it; RAGChecker's own output fields are accepted and ignored."""

    model_config = ConfigDict(extra="forbid")

    query_id: _Id = None
    id: _Id = None
    query: Annotated[str, BeforeValidator(_nonempty)] = Field(default=None, validate_default=True)
    gt_answer: Annotated[str, BeforeValidator(_nonempty)] = Field(default=None, validate_default=True)
    response: Annotated[str, BeforeValidator(_response)] = Field(default=None, validate_default=True)
    retrieved_context: Annotated[list[Annotated[str, BeforeValidator(_chunk)]], BeforeValidator(_chunk_list)] = None
    meta: Annotated[dict[str, Any], BeforeValidator(_meta)] = {}
    response_claims: Any = None
    gt_answer_claims: Any = None
    answer2response: Any = None
    response2answer: Any = None
    retrieved2response: Any = None
    retrieved2answer: Any = None
    metrics: Any = None


def _item(record: Any, *, where: str, default_id: str, problems: list[str]) -> RagItem | None:
    if not isinstance(record, dict):
        problems.append(f"{where}: item: expected a JSON object, found {_describe(record)}")
        return None
    before = len(problems)
    if "query_id" in record and "id" in record:
        problems.append(f"{where}: id: expected either 'query_id' or 'id', not both, found {_describe(record['id'])}")
    try:
        row = RagRow.model_validate(record)
    except ValidationError as err:
        problems.extend(problems_from(err, where, known=f"a known field ({', '.join(FIELDS)}); put extra data "
                                                        "under 'meta'"))
        return None
    if len(problems) > before:
        return None
    ident = row.query_id if row.query_id is not None else row.id if row.id is not None else default_id
    chunks = None if row.retrieved_context is None else tuple(row.retrieved_context)
    return RagItem(ident, row.query, row.gt_answer, row.response, chunks, row.meta)
