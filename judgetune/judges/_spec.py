"""A judge as plain data (``JudgeSpec``), what building it may draw on (``BuildContext``), and the one
builder that turns the two into a judge.

Every path to a judge goes through :func:`build`: evaluation, the tuner's trials, frozen configs,
the hybrid judge's signals and NRP's rankers. A judge class declares what it needs on itself
(``needs_lm``, ``uses_references``, ``fits``, ``data_defaults``); a kind is one module plus one
``register`` line in ``_registry.py``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from judgetune.datasets import Example
from judgetune.judges._references import ReferencePool

if TYPE_CHECKING:
    from judgetune.judges._base import Judge


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
    """What a judge may draw on when built: the LM, training examples (demos are picked from them, a
    fitting judge fits on them), the pool of graded answers references are drawn from (examples, or a
    ready ``ReferencePool``), and the human label range."""

    lm: Any = None
    train: Sequence[Example] = ()
    pool: Sequence[Example] | ReferencePool = ()
    label_range: tuple[float, float] | None = None

    def references(self) -> ReferencePool:
        return self.pool if isinstance(self.pool, ReferencePool) else ReferencePool(self.pool)

    def examples(self) -> list[Example]:
        """The examples the context holds (training and pool), for data defaults."""
        return [*self.train, *(() if isinstance(self.pool, ReferencePool) else self.pool)]


@dataclass(frozen=True)
class _Entry:
    cls: type[Judge]
    fixed: dict[str, Any]


_REGISTRY: dict[str, _Entry] = {}


def register(kind: str, cls: type[Judge], **fixed: Any) -> None:
    """Make ``kind`` buildable: ``cls`` built with ``fixed`` constructor arguments plus the spec's params."""
    _REGISTRY[kind] = _Entry(cls, dict(fixed))


def registered_kinds() -> tuple[str, ...]:
    return tuple(_REGISTRY)


def judge_class(kind: str) -> type[Judge]:
    """The class that judges of ``kind`` are; its class attributes say what building one needs.

    Raises:
        ValueError: an unknown kind.
    """
    if kind not in _REGISTRY:
        raise ValueError(f"unknown judge {kind!r}; known: {', '.join(_REGISTRY)}")
    return _REGISTRY[kind].cls


def build(spec: JudgeSpec, context: BuildContext = BuildContext()) -> Judge:
    """The judge ``spec`` describes, drawing on ``context``.

    Settings are the kind's data defaults for the context's data (when it holds examples or a label
    range), overridden by ``spec.params``. A kind that fits and has no ``spec.fitted`` comes back
    fitted on ``context.train``.

    Raises:
        ValueError: an unknown kind or setting, or an LM kind without an LM.
    """
    cls = judge_class(spec.kind)
    # every setting the kind accepts in some scoring mode (the judge checks them against the mode it resolves)
    knobs = {p.name for p in cls.space_for({**spec.params, "scoring_mode": "sampled"})}
    if set(spec.params) - knobs:  # e.g. demo_pool: what a judge draws on comes from the context, never from params
        raise ValueError(f"judge {spec.kind}: unknown setting(s) {sorted(set(spec.params) - knobs)}; "
                         f"known: {sorted(knobs)}")
    examples = context.examples()
    has_data = bool(examples) or context.label_range is not None
    defaults = cls.data_defaults(examples, context.label_range) if has_data else {}
    kwargs: dict[str, Any] = {**_REGISTRY[spec.kind].fixed, **defaults, **spec.params}
    if cls.uses_references:
        kwargs.update(pool=context.references(), seed=spec.seed)
    if cls.uses_prompt:
        kwargs.update(demo_pool=list(context.train), demo_seed=spec.seed, label_range=context.label_range,
                      instruction_text=spec.instruction, demos=None if spec.demos is None else list(spec.demos))
    if spec.fitted is not None:
        kwargs["fitted"] = dict(spec.fitted)
    judge = cls(context.lm if cls.needs_lm_with(kwargs) else None, **kwargs)
    if cls.fits and spec.fitted is None:
        judge.fit(context.train)
    return judge
