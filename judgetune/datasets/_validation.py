"""The one validation layer: pydantic models of every input record, and the map from pydantic's
errors onto judgetune's messages, ``where: field: expected ..., found ...``.

Each field's validator raises :func:`expected` with the words a user needs ("expected a number");
:func:`problems_from` turns every error of a record into one line, so a file's problems are all
reported at once. Rules that span fields (which label a row needs) are checked beside the models.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticCustomError

_MISSING = object()


class Cell(str):
    """Text from a CSV/TSV cell: unlike a JSON string, it may be read as a number."""


def expected(what: str, *, found: Any = _MISSING, sub: str = "") -> PydanticCustomError:
    """The error a validator raises: ``expected <what>``; ``found`` overrides the reported input and
    ``sub`` extends the field's location (``references[0]`` + ``.grade``)."""
    context: dict[str, Any] = {"what": what, "sub": sub}
    if found is not _MISSING:
        context["found"] = found
    return PydanticCustomError("judgetune", "expected {what}", context)


def describe(value: Any) -> str:
    """A value as a message shows it: ``nothing`` for an absent one, JSON for the rest, 60 characters at most."""
    if value is None:
        return "nothing"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, Cell):
        return f"{str(value)!r}"
    if isinstance(value, (str, bytes)) or not isinstance(value, (dict, list, tuple, int, float, bool)):
        text = repr(value)  # a str, and what JSON cannot hold (bytes, a set, an object) as Python shows it
    else:
        text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= 60 else text[:57] + "..."


def unwritable(value: Any, field: str = "") -> list[str]:
    """``field: expected text that can be written as UTF-8, found ...`` for every string (or key) in ``value``
    holding a lone surrogate (JSON's ``"\\ud800"``, a non-UTF-8 byte in a command-line argument): such text
    passes Python's checks but fails when written, after the work is done. Nesting is bounded by the JSON
    reader's depth limit."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as err:
            return [f"{field or 'value'}: expected text that can be written as UTF-8, found a lone surrogate "
                    f"'{_escaped(value[err.start:err.end])}' at character {err.start + 1}"]
        return []
    problems: list[str] = []
    if isinstance(value, dict):
        for key, child in value.items():
            name = f"{field}.{_escaped(str(key))}" if field else _escaped(str(key))
            problems += unwritable(key, f"{name} (its name)") if isinstance(key, str) else []
            problems += unwritable(child, name)
    elif isinstance(value, (list, tuple)):
        for i, child in enumerate(value):
            problems += unwritable(child, f"{field}[{i}]")
    return problems


def _escaped(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def location(loc: tuple[Any, ...], sub: str = "") -> str:
    """``("references", 0, "grade")`` -> ``references[0].grade``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out + (f".{sub}" if sub and out else sub)


def problems_from(error: ValidationError, where: str, *, known: str = "", unknown: str = "",
                  names: dict[str, str] | None = None) -> list[str]:
    """One ``where: field: expected ..., found ...`` line per error; unknown fields first.

    Args:
        known: the "expected" text of an unknown field (extra fields are forbidden).
        unknown: instead, the whole text after ``where: field:`` for an unknown field.
        names: how to show a top-level field (a mapped file's source column, ``summary (as answer)``).
    """
    lines: list[tuple[int, str]] = []
    for err in error.errors(include_url=False):
        ctx = err.get("ctx") or {}
        loc = err["loc"]
        if names and loc and loc[0] in names:
            loc = (names[loc[0]], *loc[1:])
        field = location(loc, ctx.get("sub", ""))
        found = ctx.get("found", err.get("input"))
        if err["type"] == "extra_forbidden" and unknown:
            lines.append((0, f"{where}: {field}: {unknown}"))
        elif err["type"] == "extra_forbidden":
            lines.append((0, f"{where}: {field}: expected {known or 'no such field'}, found {describe(found)}"))
        elif err["type"] == "judgetune":
            lines.append((1, f"{where}: {field}: expected {ctx['what']}, found {describe(found)}"))
        elif err["type"] == "missing":
            lines.append((1, f"{where}: {field}: missing ({err['msg'].lower()})"))
        else:  # pydantic's own wording for the standard types
            lines.append((1, f"{where}: {field}: {_lower_first(err['msg'])}, found {describe(found)}"))
    return [text for _, text in sorted(lines, key=lambda pair: pair[0])]


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]
