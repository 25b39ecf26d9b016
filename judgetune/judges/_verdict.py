"""The Verdict: what a judge says about one Example."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Verdict:
    """One judgment.

    ``score`` is on the judge's ``score_range`` and is ``None`` exactly when ``parsed`` is False: a
    failure is counted, never scored as a number. ``distribution`` is the probability of each label
    (renormalized over the labels); ``raw`` the generated text, or why the judgment failed; ``usage``
    the tokens spent; ``detail`` judge-specific parts (per-fact scores, sampled references, ...).
    """

    score: float | None
    distribution: dict[str, float] = field(default_factory=dict)
    parsed: bool = True
    raw: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    detail: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.parsed != (self.score is not None):
            raise ValueError(f"a Verdict has a score exactly when it is parsed (parsed={self.parsed}, "
                             f"score={self.score})")

    @property
    def degraded(self) -> list[str]:
        """Why this score rests on less than the judge is made of: each signal it could not compute for this
        item (a reference-based signal on an item without a reference), imputed with a neutral value. Empty
        for a whole judgment; such an item is flagged in every output and counted, never silently scored."""
        return [str(why) for why in self.detail.get("imputed", ())]

    @property
    def tokens(self) -> int:
        return int(self.usage.get("prompt_tokens", 0)) + int(self.usage.get("completion_tokens", 0))

    @classmethod
    def failed(cls, why: str, *, usage: dict[str, int] | None = None, detail: dict | None = None) -> Verdict:
        return cls(None, parsed=False, raw=why, usage=usage or {}, detail=detail or {})

    def to_dict(self) -> dict[str, Any]:
        return {"score": self.score, "distribution": self.distribution, "parsed": self.parsed, "raw": self.raw,
                "usage": self.usage, "detail": self.detail}


def add_usage(*usages: dict[str, int]) -> dict[str, int]:
    """Token counts summed key by key."""
    total: dict[str, int] = {}
    for usage in usages:
        for key, value in usage.items():
            total[key] = total.get(key, 0) + int(value)
    return total
