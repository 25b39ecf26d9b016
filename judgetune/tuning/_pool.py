"""The instruction pool: candidate instructions kept in the study's storage, one user attribute each.

Candidates are JSON (``{"id", "text", "source", "round"}``) under ``instruction:NNN``; a trial picks
one by its integer id (the ``instruction`` parameter), so ``worker`` processes on a shared storage
see the same pool and a resumed study keeps it. Only the process running ``tune`` adds proposals
(one writer); the seed candidates are the same for every process, so any of them may write them.
A proposal round's record (accepted ids, refused texts with reasons, LM calls) is kept under
``proposal_round:R``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import optuna

MIN_CHARS = 20
MAX_CHARS = 600
PREFIX = "instruction:"
ROUND_PREFIX = "proposal_round:"


@dataclass(frozen=True)
class Candidate:
    id: int
    text: str
    source: str  # "criterion", "generic:NAME", "user", "proposed", "reflection"
    round: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def normalized(text: str) -> str:
    """Lowercase words only: two instructions differing in case, spacing or punctuation are one."""
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def refusal(text: str, pool: Sequence[Candidate]) -> str | None:
    """Why ``text`` may not join the pool (``empty``, ``too long``, ``duplicate``), or None."""
    letters = normalized(text)
    if len(letters) < MIN_CHARS:
        return f"empty (fewer than {MIN_CHARS} characters of words)"
    if len(text) > MAX_CHARS:
        return f"too long ({len(text)} characters, at most {MAX_CHARS})"
    for candidate in pool:
        if normalized(candidate.text) == letters:
            return f"duplicate of instruction {candidate.id}"
    return None


def seed_instructions(criterion: str | None, generic: dict[str, str], user: Sequence[str],
                      task: str) -> list[tuple[str, str]]:
    """(source, text) of the pool's first candidates: from the criterion when there is one (alone, and
    followed by the judge's own task wording ``task``), else the judge's generic variants; then the user's."""
    if criterion:
        seeds = [("criterion", criterion.strip()), ("criterion", f"{criterion.strip()}\n\n{task}")]
    else:
        seeds = [(f"generic:{name}", text) for name, text in generic.items()]
    return [*seeds, *(("user", text) for text in user)]


class InstructionPool:
    """The pool of one study (a view on its user attributes; nothing is cached between reads)."""

    def __init__(self, study: optuna.Study):
        self.study = study

    def candidates(self) -> list[Candidate]:
        attrs = self.study.user_attrs
        return sorted((Candidate(**v) for k, v in attrs.items() if k.startswith(PREFIX)), key=lambda c: c.id)

    def texts(self) -> list[str]:
        return [c.text for c in self.candidates()]

    def seed(self, seeds: Sequence[tuple[str, str]]) -> None:
        """Write the seed candidates unless the pool has some already (a resumed study keeps its own)."""
        if self.candidates():
            return
        for i, (source, text) in enumerate(seeds):
            self._write(Candidate(i, text, source, None))

    def add(self, text: str, *, source: str, round: int) -> Candidate | str:
        """The new candidate, or the reason it was refused."""
        pool = self.candidates()
        reason = refusal(text, pool)
        if reason is not None:
            return reason
        candidate = Candidate(max((c.id for c in pool), default=-1) + 1, text, source, round)
        self._write(candidate)
        return candidate

    def _write(self, candidate: Candidate) -> None:
        self.study.set_user_attr(f"{PREFIX}{candidate.id:03d}", candidate.to_dict())

    def rounds(self) -> list[dict[str, Any]]:
        attrs = self.study.user_attrs
        return sorted((v for k, v in attrs.items() if k.startswith(ROUND_PREFIX)), key=lambda r: r["round"])

    def record_round(self, record: dict[str, Any]) -> None:
        self.study.set_user_attr(f"{ROUND_PREFIX}{record['round']}", record)
