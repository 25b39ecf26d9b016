"""The exception root of judgetune; every error the package raises on purpose derives from it."""

from __future__ import annotations

import os
import re


class JudgetuneError(Exception):
    """Base class: catch this to handle any error judgetune raises deliberately."""


class DataValidationError(JudgetuneError, ValueError):
    """One or more rows of a data file do not fit the Example schema.

    ``problems`` holds every problem found, each as ``file:line: field: expected ..., found ...``; ``within``
    names what holds them in the heading of several (a judge config's are not "in the data").
    """

    def __init__(self, problems: list[str] | str, *, shown: int = 50, within: str = "the data"):
        # a text is its lines (never its characters); each problem is one line, whatever names it holds
        self.problems = [_CONTROL.sub(_escaped, p) for p in (problems.splitlines() if isinstance(problems, str)
                                                             else problems)]
        head = self.problems[:shown]
        more = len(self.problems) - len(head)
        if len(self.problems) == 1:  # one problem: one line, where and what
            super().__init__(self.problems[0])
            return
        text = f"{len(self.problems)} problem(s) in {within}:\n" + "\n".join(head)
        if more:
            text += f"\n... and {more} more"
        super().__init__(text)


class SettingsError(JudgetuneError, ValueError):
    """A setting that is unknown or out of range (a keyword argument of the Python API, a judge kind); the
    message names it and what was expected."""


class DataNotFoundError(JudgetuneError, FileNotFoundError):
    """A catalog source was asked for before its files were fetched."""


class ItemError(JudgetuneError):
    """One item cannot be judged (an LM call failed for good, or its prompt does not fit the model):
    that item fails with this reason and the others are judged."""


class NothingJudgedError(JudgetuneError):
    """The command ran, but not one item could be judged (every call failed); the CLI exits with 3."""


API_KEY_ENVS = ("OPENAI_API_KEY",)
_BEARER = re.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9._~+/=-]+")
_KEY_FIELD = re.compile(r"(?i)(\"?(?:api[_-]?key|authorization)\"?\s*[:=]\s*\"?)(?!Bearer\b)[A-Za-z0-9._~+/=-]{8,}")
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/:@'\"]*:)[^\s/@'\"]+(@)")  # scheme://user:PASSWORD@host


def redact(text: str) -> str:
    """``text`` with the configured API key (``$OPENAI_API_KEY``), anything that looks like a bearer token
    or an ``api_key=...`` value, and the password of a URL (``postgresql://user:PASSWORD@host``, a storage
    URL in an error) replaced by ``[redacted]``.

    Every error text the tool prints or writes passes through here: a server may echo the request's
    ``Authorization`` header in its error body.
    """
    for name in API_KEY_ENVS:
        key = os.environ.get(name, "")
        if len(key) >= 4:
            text = text.replace(key, "[redacted]")
    text = _BEARER.sub(r"\1 [redacted]", text)
    text = _URL_PASSWORD.sub(r"\1[redacted]\2", text)
    return _KEY_FIELD.sub(r"\1[redacted]", text)


_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` safe to print: keys redacted (``redact``: a server's error body may echo the request's bearer) and
    control characters (ESC, carriage return, bell, C1 codes) and bidirectional overrides escaped as ``\\x1b``,
    ``\\u202e``; newlines and tabs kept. A server's error body or a data file's text could otherwise show a key,
    retitle the window, clear the screen or fake a line. Every printer of outside text goes through here."""
    return _UNSAFE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), redact(text))


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def shown(value: object) -> str:
    """A user's string (a file name, a column, an id, an instruction) as one line that a terminal shows as written:
    every control character escaped (C0 with newline and tab, ESC, DEL, C1: ``\\x1b``, ``\\n``), bidirectional
    overrides and lone surrogates (a file name's non-UTF-8 byte) too; other Unicode is kept. An ``--out`` name holding
    ``ESC [2J`` would otherwise clear the screen, and one holding a newline fake a line. Every line that embeds a
    user's string passes it through here (``printable`` is for outside text of many lines)."""
    return _CONTROL.sub(_escaped, str(value))


def _escaped(match: re.Match) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


class PromptTooLongError(ItemError, ValueError):
    """An item's prompt has more tokens than the model's context: that item fails, the rest are judged."""


class LMSpecError(JudgetuneError, ValueError):
    """An LM spec string that names no model judgetune can run (or a model file or build that cannot run here)."""
