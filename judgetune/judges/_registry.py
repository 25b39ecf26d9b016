"""The registry of judge kinds and the one builder: ``build(JudgeSpec, BuildContext)`` gives a judge.

Every path to a judge goes through :func:`build`: evaluation, the tuner's trials, frozen configs and
NRP's rankers. A judge class declares what it needs on itself (``needs_lm``, ``uses_prompt``,
``uses_references``, ``fits``, ``data_defaults``); a kind is one module plus one ``register`` line
below (the panel, which builds its members here, registers itself in ``_panel``). ``KINDS`` is a live
view of the registry: a kind registered later is in it at once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from judgetune.datasets import Example
from judgetune.errors import SettingsError
from judgetune.judges._base import Judge
from judgetune.judges._baselines import EmbeddingJudge, LexicalJudge
from judgetune.judges._checklist import ChecklistJudge
from judgetune.judges._correctness import CorrectnessJudge
from judgetune.judges._factcheck import FactCheckJudge
from judgetune.judges._hybrid import HybridJudge
from judgetune.judges._likelihood import LikelihoodJudge
from judgetune.judges._linkage import LinkageJudge
from judgetune.judges._pairwise import PairwiseJudge
from judgetune.judges._references import ReferencePool
from judgetune.judges._rubric import RubricJudge
from judgetune.judges._signals import BM25Judge, LengthJudge, OverlapJudge, ReferenceSimilarityJudge
from judgetune.judges._spec import BuildContext, JudgeSpec

__all__ = ["KINDS", "LM_JUDGES", "build", "build_judge", "check_settings", "data_defaults", "judge_class",
           "make_judge", "register", "registered_kinds"]


@dataclass(frozen=True)
class _Entry:
    cls: type[Judge]
    fixed: dict[str, Any]


_REGISTRY: dict[str, _Entry] = {}


def register(kind: str, cls: type[Judge], **fixed: Any) -> None:
    """Make ``kind`` buildable (and loadable from judge.json): ``cls`` built with ``fixed`` constructor
    arguments plus the spec's params."""
    _REGISTRY[kind] = _Entry(cls, dict(fixed))


def registered_kinds() -> tuple[str, ...]:
    return tuple(_REGISTRY)


class _LiveKinds(Sequence):
    """The registered kinds, read from the registry at every use."""

    def __getitem__(self, index):  # type: ignore[override]
        return registered_kinds()[index]

    def __len__(self) -> int:
        return len(_REGISTRY)

    def __iter__(self) -> Iterator[str]:
        return iter(registered_kinds())

    def __contains__(self, kind: object) -> bool:
        return kind in _REGISTRY

    def __repr__(self) -> str:
        return repr(registered_kinds())


KINDS: Sequence[str] = _LiveKinds()


def judge_class(kind: str) -> type[Judge]:
    """The class that judges of ``kind`` are; its class attributes say what building one needs.

    Raises:
        SettingsError: an unknown kind (a ValueError too).
    """
    if not isinstance(kind, str) or kind not in _REGISTRY:
        raise SettingsError(f"unknown judge {kind!r}; known: {', '.join(_REGISTRY)}")
    return _REGISTRY[kind].cls


def check_settings(kind: str, params: dict[str, Any]) -> list[str]:
    """What is wrong with ``params`` for ``kind``, one line per setting: a name that is neither in the
    kind's declared settings (its search space in any scoring mode) nor one of its fixed settings, or a
    fixed setting given another value. Values of known settings are checked when the judge is built."""
    entry = _REGISTRY[kind]
    knobs = {p.name for p in entry.cls.space_for({**params, "scoring_mode": "sampled"})}
    known = ", ".join(sorted(knobs | set(entry.fixed))) or "none (this kind has no settings)"
    problems = [f"params.{name}: unknown setting of judge {kind}; known: {known}"
                for name in params if name not in knobs and name not in entry.fixed]
    problems += [f"params.{name}: judge {kind} fixes it to {entry.fixed[name]!r}, found {params[name]!r}"
                 for name in params if name in entry.fixed and params[name] != entry.fixed[name]]
    return problems


def build(spec: JudgeSpec, context: BuildContext | None = None) -> Judge:
    """The judge ``spec`` describes, drawing on ``context`` (never on the items it will score).

    Settings are the kind's data defaults for the training data (when the context holds examples or a
    label range), overridden by ``spec.params``. A kind that fits and has no ``spec.fitted`` comes
    back fitted on ``context.demo_pool``.

    Raises:
        ValueError: an unknown kind or setting, or an LM kind without an LM.
    """
    context = context or BuildContext()
    cls = judge_class(spec.kind)
    problems = check_settings(spec.kind, dict(spec.params))
    if problems:  # e.g. demo_pool: what a judge draws on comes from the context, never from params
        raise ValueError("; ".join(problems))
    examples = context.examples()
    defaults = data_defaults(spec.kind, examples, context.label_range)
    kwargs: dict[str, Any] = {**_REGISTRY[spec.kind].fixed, **defaults, **spec.params}
    if cls.uses_references:  # references of the demos, from the training examples
        kwargs.update(pool=ReferencePool(context.demo_pool), seed=spec.seed)
    elif cls.seeded:
        kwargs["seed"] = spec.seed
    if cls.uses_prompt:
        kwargs.update(demo_pool=list(context.demo_pool), demo_seed=spec.seed, label_range=context.label_range,
                      instruction_text=spec.instruction, demos=None if spec.demos is None else list(spec.demos))
    if spec.fitted is not None:
        kwargs["fitted"] = dict(spec.fitted)
    judge = cls(context.lm if cls.needs_lm_with(kwargs) else None, **kwargs)
    if cls.fits and spec.fitted is None:
        judge.fit(context.demo_pool)
    return judge


LM_JUDGES: dict[str, type[Judge]] = {j.kind: j for j in (FactCheckJudge, RubricJudge, CorrectnessJudge,
                                                         PairwiseJudge, LinkageJudge, LikelihoodJudge)}
for _kind, _cls in LM_JUDGES.items():
    register(_kind, _cls)
register("embedding", EmbeddingJudge)
for _metric in LexicalJudge.METRICS:
    register(_metric, LexicalJudge, metric=_metric)
for _cls in (BM25Judge, OverlapJudge, LengthJudge, ReferenceSimilarityJudge, HybridJudge, ChecklistJudge):
    register(_cls.kind, _cls)


def data_defaults(kind: str, examples: Sequence[Example], label_range: tuple[float, float] | None) -> dict[str, Any]:
    """Judge settings that fit the data when the user sets none (what ``build`` gives the untuned judge, and
    the tuner's incumbent starts from); none without data (no examples and no label range)."""
    if not examples and label_range is None:
        return {}
    return judge_class(kind).data_defaults(list(examples), label_range)


def build_judge(kind: str, lm=None, **params: Any) -> Judge:
    """Shorthand of ``build(JudgeSpec(kind, params), BuildContext(lm=lm))``: no training data.

    Raises:
        ValueError: an unknown kind or setting.
    """
    return build(JudgeSpec(kind, params), BuildContext(lm=lm))


def make_judge(kind: str, lm=None, *, train: Sequence[Example], label_range: tuple[float, float],
               params: dict[str, Any] | None = None, seed: int = 0) -> Judge:
    """Shorthand of ``build`` with training data: demos drawn from ``train``, settings = data defaults
    overridden by ``params``; a kind that fits comes back fitted on ``train`` (a judge never draws on the items
    it scores)."""
    return build(JudgeSpec(kind, params or {}, seed=seed), BuildContext(lm=lm, demo_pool=train, label_range=label_range))
