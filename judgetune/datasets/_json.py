"""The one strict JSON reader: data rows, judge.json, RAG item files and NRP folders all parse here.

Stricter than ``json.loads``, each refusal with its place (``file:line: ...``):

- an object with the same key twice (``json`` keeps the last one silently);
- nesting deeper than ``MAX_DEPTH`` levels (``json`` raises RecursionError past about 1,000);
- a whole file larger than ``MAX_FILE_BYTES``.

``NaN`` and ``Infinity`` parse, to be refused by the field that holds them ("expected a finite number").

Numbers in other scripts (``"٣"``, fullwidth ``"３"``) are never JSON numbers: the C parser refuses them,
and :func:`ascii_number` refuses them in the text cells of CSV and TSV files. With a pydantic
``model``, values of the wrong JSON type (``"seed": "3"``, ``"reasoning": "yes"``) are refused against
the model's schema instead of being coerced.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from judgetune._files import FileKindError, FileTooLargeError, read_bounded
from judgetune.datasets._validation import problems_from
from judgetune.errors import DataValidationError

__all__ = ["MAX_DEPTH", "MAX_FILE_BYTES", "JSONShapeError", "ascii_number", "parse_json", "read_json", "strict_loads"]

MAX_FILE_BYTES = 64 << 20  # a whole-file JSON (judge.json, a RAG item file); JSONL rows have their own limit
MAX_DEPTH = 64  # levels of nested arrays and objects in one JSON value (a data row, judge.json)
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)


class _Duplicate(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` arrays/objects deep (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _line_of_key(text: str, key: str) -> int:
    """The line of the second ``"key":`` in ``text`` (where the repeat is), 1 when not found."""
    pattern = re.compile(re.escape(json.dumps(key)) + r"\s*:")
    found = list(pattern.finditer(text))
    if len(found) < 2:
        return 1
    return text.count("\n", 0, found[1].start()) + 1


def _line_of_depth(text: str, limit: int) -> int:
    """The line (from 1) where ``text`` first nests deeper than ``limit`` (strings skipped); 1 when it does not."""
    depth = 0
    for token in re.finditer(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', text):
        mark = token.group()
        if mark in "[{":
            depth += 1
            if depth > limit:
                return text.count("\n", 0, token.start()) + 1
        elif mark in "]}":
            depth -= 1
    return 1


def _too_deep(where: str, line: int, field: str) -> str:
    return f"{where}:{line}: {field}: expected JSON nested at most {MAX_DEPTH} levels deep, found deeper nesting"


class JSONShapeError(ValueError):
    """Valid JSON that the strict reader refuses: a repeated key, or nesting past ``MAX_DEPTH``."""


def strict_loads(text: str) -> Any:
    """``json.loads``, refusing repeated keys and nesting past ``MAX_DEPTH`` (for short texts such as an
    option's value; files go through :func:`parse_json` / :func:`read_json`, which name the line).

    Raises:
        json.JSONDecodeError: not JSON.
        JSONShapeError: a repeated key, or too deep.
    """
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates)
    except _Duplicate as err:
        raise JSONShapeError(f"expected each key once in an object, found {err.key!r} twice") from None
    except RecursionError:
        raise JSONShapeError(f"expected JSON nested at most {MAX_DEPTH} levels deep, found deeper nesting") from None
    if _depth_exceeds(value, MAX_DEPTH):
        raise JSONShapeError(f"expected JSON nested at most {MAX_DEPTH} levels deep, found deeper nesting")
    return value


def parse_json(text: str, *, where: str, line: int = 1, what: str = "JSON",
               field: str = "row") -> tuple[Any, str | None]:
    """``(value, None)``, or ``(None, problem)`` where ``problem`` reads ``where:LINE: field: expected ..., found ...``.

    ``line`` is the line ``text`` starts on in its file (a JSONL row); a problem names the line in the file.
    ``what`` is what the text should be ("a JSON object").
    """
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates)
    except _Duplicate as err:
        at = line + _line_of_key(text, err.key) - 1
        return None, (f"{where}:{at}: {err.key}: expected each key once in an object, found {err.key!r} twice "
                      "(JSON readers disagree on which one counts)")
    except RecursionError:
        return None, _too_deep(where, line + _line_of_depth(text, MAX_DEPTH) - 1, field)
    except json.JSONDecodeError as err:
        return None, (f"{where}:{line + err.lineno - 1}: {field}: expected {what}, found invalid JSON ({err.msg} at "
                      f"column {err.colno})")
    if _depth_exceeds(value, MAX_DEPTH):
        return None, _too_deep(where, line + _line_of_depth(text, MAX_DEPTH) - 1, field)
    return value, None


def read_json(path: str | Path, *, model: type[BaseModel] | None = None) -> Any:
    """The JSON value of a whole file, strictly parsed; with ``model``, also checked against its schema
    in strict mode (no value of another JSON type is coerced: ``"3"`` is not the integer 3).

    Raises:
        FileNotFoundError: no such file.
        DataValidationError: every problem, each ``file:line: ...`` or ``file: field: expected ..., found ...``.
    """
    path = Path(path)
    try:  # at most MAX_FILE_BYTES + 1 bytes are read, whatever the file says its size is
        data = read_bounded(path, MAX_FILE_BYTES, "JSON file")
    except FileTooLargeError:
        raise DataValidationError([f"{path}: file: expected a JSON file of at most {MAX_FILE_BYTES:,} bytes, found "
                                   "a larger one; write many items as JSONL (one per line) instead"]) from None
    except FileKindError as err:
        raise DataValidationError([str(err)]) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DataValidationError([f"{path}: file: expected UTF-8 text, found undecodable bytes ({err.reason})"]) from None
    value, problem = parse_json(text, where=str(path), field="file")
    if problem:
        raise DataValidationError([problem])
    if model is not None and isinstance(value, dict):
        try:
            model.model_validate(value, strict=True)
        except ValidationError as err:
            wrong = [e for e in err.errors(include_url=False) if _is_type_error(e)]
            if wrong:
                raise DataValidationError(problems_from(ValidationError.from_exception_data(err.title, wrong),
                                                        str(path))) from None
    return value


def _is_type_error(error: dict) -> bool:
    """A strict-mode error that lax mode would have coerced away (``int_type``, ``bool_type``, ...)."""
    return error["type"].endswith("_type") and error["type"] not in ("model_type", "dict_type", "list_type")


def ascii_number(text: str) -> float:
    """A CSV/TSV cell as a number, written in ASCII digits only (``float`` reads ``"٣"`` as 3).

    Raises:
        ValueError: the text is no plain number (``"1_0"``, ``"٣"``, ``"three"``); ``nan``/``inf`` pass
        through as floats for the caller's finiteness check.
    """
    stripped = text.strip()
    if _NUMBER.fullmatch(stripped) or stripped.lower().lstrip("+-") in ("nan", "inf", "infinity"):
        return float(stripped)
    raise ValueError(text)
