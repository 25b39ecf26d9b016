"""A judge as plain records: ``JudgeSpec`` (what makes one judge what it is) and ``BuildContext``
(what building one may draw on). Neither knows any judge class: the registry and the builder that
turn the two into a judge live in ``_registry``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from judgetune.datasets import Example

__all__ = ["BuildContext", "JudgeSpec"]


@dataclass(frozen=True)
class JudgeSpec:
    """Everything that makes one judge what it is, as plain data.

    ``params`` are the kind's knobs (its ``space()``); ``instruction`` and ``demos`` the prompt of an
    LM judge (``None``: the params' named instruction, and ``k`` demos drawn from the context's
    training examples); ``fitted`` a fitted judge's learned state (``None``: fit on the context's
    training examples, for kinds that fit); ``seed`` seeds demo picking and reference draws.
    """

    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)
    instruction: str | None = None
    demos: tuple[Example, ...] | None = None
    fitted: Mapping[str, Any] | None = None
    seed: int = 0


@dataclass(frozen=True)
class BuildContext:
    """What a judge may draw on when built: the LM, the demo pool (labeled training examples: demos are
    picked from them, a fitting judge fits on them, data defaults are read from them; a run's
    ``Splits.demo_pool``, not the whole train split) and the human label range.

    Nothing here comes from the items the judge will score: a built judge scores an item from its own
    state and that item alone (references a judge scores against are the ones an item carries; a protocol
    such as LINKAGE's draws them beforehand, see ``judges.apply_protocol``).
    """

    lm: Any = None
    demo_pool: Sequence[Example] = ()
    label_range: tuple[float, float] | None = None

    def examples(self) -> list[Example]:
        """The demo pool's examples, for data defaults."""
        return list(self.demo_pool)
