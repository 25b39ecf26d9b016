"""Search spaces: the knobs of a judge that a tuner may set, declared as plain data.

A judge class lists its knobs in ``space()``; the tuner (Optuna) reads the list and calls
``suggest_*`` for each. Values are JSON scalars, so a trial's parameters rebuild the judge.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Choice:
    """A categorical knob. ``searched=False``: a setting the data decides (the kind's data defaults),
    which the user may set but the tuner does not search."""

    name: str
    options: tuple[Any, ...]
    default: Any
    searched: bool = True

    def __post_init__(self) -> None:
        if self.default not in self.options:
            raise ValueError(f"{self.name}: default {self.default!r} is not among {self.options}")


@dataclass(frozen=True)
class IntRange:
    """An integer knob in [low, high]."""

    name: str
    low: int
    high: int
    default: int
    searched: bool = True

    def __post_init__(self) -> None:
        if not self.low <= self.default <= self.high:
            raise ValueError(f"{self.name}: default {self.default} is outside [{self.low}, {self.high}]")


Param = Choice | IntRange


def defaults(space: list[Param]) -> dict[str, Any]:
    return {p.name: p.default for p in space}


def _same(value: Any, option: Any) -> bool:
    """``value`` is ``option`` with the same JSON type: true is not 1, "1" is not 1 (1 and 1.0 are one number)."""
    if isinstance(option, bool) or isinstance(value, bool):
        return isinstance(option, bool) and isinstance(value, bool) and value == option
    if isinstance(option, (int, float)):
        return isinstance(value, (int, float)) and value == option
    return type(value) is type(option) and value == option


def check_params(space: list[Param], params: dict[str, Any], *, judge: str) -> dict[str, Any]:
    """``params`` over the defaults, every name and value checked against the space."""
    known = {p.name: p for p in space}
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ValueError(f"judge {judge}: unknown setting(s) {unknown}; known: {sorted(known)}")
    out = defaults(space)
    for name, value in params.items():
        p = known[name]
        if isinstance(p, Choice) and not any(_same(value, option) for option in p.options):
            raise ValueError(f"judge {judge}: {name} must be one of {list(p.options)}, got {value!r}")
        if isinstance(p, IntRange) and not (isinstance(value, int) and not isinstance(value, bool)
                                            and p.low <= value <= p.high):
            raise ValueError(f"judge {judge}: {name} must be an integer in [{p.low}, {p.high}], got {value!r}")
        out[name] = value
    return out
