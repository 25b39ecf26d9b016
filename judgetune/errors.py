"""The exception root of judgetune; every error the package raises on purpose derives from it."""

from __future__ import annotations


class JudgetuneError(Exception):
    """Base class: catch this to handle any error judgetune raises deliberately."""


class DataValidationError(JudgetuneError, ValueError):
    """One or more rows of a data file do not fit the Example schema.

    ``problems`` holds every problem found, each as ``file:line: field: expected ..., found ...``.
    """

    def __init__(self, problems: list[str], *, shown: int = 50):
        self.problems = list(problems)
        head = self.problems[:shown]
        more = len(self.problems) - len(head)
        text = f"{len(self.problems)} problem(s) in the data:\n" + "\n".join(head)
        if more:
            text += f"\n... and {more} more"
        super().__init__(text)


class DataNotFoundError(JudgetuneError, FileNotFoundError):
    """A catalog source was asked for before its files were fetched."""
