"""Stage 3, the search space: the settings of one trial (the kind's declared knobs minus the settled
ones), the incumbent (the kind's default settings, the untuned judge that ``evaluate`` shows), and
the one builder that turns a trial's parameters into a judge."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna

from judgetune.datasets import Example
from judgetune.judges import (
    BuildContext,
    Choice,
    IntRange,
    JudgeSpec,
    build,
    data_defaults,
    judge_class,
    member_record,
    pick_demos,
)
from judgetune.lm import JudgeLM, resolve_scoring_mode
from judgetune.tuning._pool import seed_instructions
from judgetune.tuning._spec import RunSpec

PANEL = "panel"  # a panel candidate's parameters hold its members' parameters, centres and scales under this key
FAMILY = "family"  # another family's candidate (``--also``): {"judge": its kind, "params": its whole settings}


def settled_params(spec: RunSpec, lm: JudgeLM | None) -> dict[str, Any]:
    """The settings a run never searches: the user's fixed ones and, for an LM judge, its scoring mode
    (unset: the LM's best, see ``resolve_scoring_mode``; a reasoning model's temperature is its own)."""
    settled = dict(spec.fixed)
    cls = judge_class(spec.judge)
    # only the label-reading LM judges have a scoring mode (the likelihood judge reads target log-probs)
    if lm is not None and cls.needs_lm and "scoring_mode" in {p.name for p in cls.space_for(settled)}:
        settled["scoring_mode"] = resolve_scoring_mode(lm, settled.get("scoring_mode"))
        if settled["scoring_mode"] == "sampled" and lm.spec.is_reasoning:
            settled.setdefault("temperature", 1.0)  # not sent: a reasoning model samples at its own
    return settled


def suggest(trial: optuna.trial.BaseTrial, spec: RunSpec, data_fixed: dict[str, Any] | None = None, *,
            lm: JudgeLM | None = None, instructions: Sequence[str] = ()) -> dict[str, Any]:
    """The judge settings of one trial: the declared space minus the settled settings (the user's, the
    scoring mode, and ``data_fixed``, those the data decides). With an instruction pool, ``instruction``
    is an id into it; with demos, ``demo_seed`` says which seeded draw of them."""
    settled = {**(data_fixed or {}), **settled_params(spec, lm)}
    cls = judge_class(spec.judge)
    space = cls.space_for(settled)
    stacked = set(cls.STACKED) if spec.stack else set()
    params: dict[str, Any] = {}
    for p in space:
        if p.name in settled or not (p.searched or p.name in stacked):  # settled, or the data decides
            continue
        if p.name == "instruction" and instructions:
            params[p.name] = trial.suggest_int(p.name, 0, len(instructions) - 1)
        elif isinstance(p, Choice):
            params[p.name] = trial.suggest_categorical(p.name, list(p.options))
        elif isinstance(p, IntRange):
            params[p.name] = trial.suggest_int(p.name, p.low, p.high)
    if "k" in {p.name for p in space} and "demo_seed" not in spec.fixed and {**params, **settled}.get("k"):
        params["demo_seed"] = trial.suggest_int("demo_seed", 0, spec.demo_draws - 1)
    return {**params, **settled}


def judge_for(params: dict[str, Any], kind: str, lm: JudgeLM | None, *, seed: int, demo_pool: list[Example],
              label_range: tuple[float, float], instructions: Sequence[str] = ()):
    """The judge of kind ``kind`` with a trial's parameters (the same builder serves the search and the final choice):
    an integer ``instruction`` is an id into ``instructions`` (the pool), ``demo_seed`` draws the demos.
    A panel candidate's parameters (``PANEL``: its ``members``' parameters, each one's ``center`` and ``scale``;
    the other keys apply to every member) give the panel of those judges."""
    if FAMILY in params:  # its own kind and settings; the run's settled and data-fixed ones are the run kind's
        other = params[FAMILY]
        return judge_for(dict(other["params"]), other["judge"], lm, seed=seed, demo_pool=demo_pool,
                         label_range=label_range)
    if PANEL in params:
        shared = {k: v for k, v in params.items() if k != PANEL}
        panel = params[PANEL]
        members = [judge_for({**member, **shared}, kind, lm, seed=seed, demo_pool=demo_pool, label_range=label_range,
                             instructions=instructions) for member in panel["members"]]
        fitted = {"members": [member_record(m, c, s) for m, c, s in zip(members, panel["center"], panel["scale"])],
                  "label_range": [float(label_range[0]), float(label_range[1])]}
        return build(JudgeSpec("panel", {}, fitted=fitted, seed=seed), BuildContext(lm=lm, label_range=label_range))
    params, text, demos = dict(params), None, None
    instruction = params.get("instruction")
    if isinstance(instruction, int) and not isinstance(instruction, bool):
        text = instructions[instruction]
        params["instruction"] = next(iter(judge_class(kind).INSTRUCTIONS))
    if "demo_seed" in params:
        demos = tuple(pick_demos(demo_pool, params.get("k", 0), seed=params.pop("demo_seed")))
    return build(JudgeSpec(kind, params, instruction=text, demos=demos, seed=seed),
                 BuildContext(lm=lm, demo_pool=demo_pool, label_range=label_range))


def prompted(kind: str) -> bool:
    """Whether judges of ``kind`` take an instruction from a pool (LM judges with named instructions)."""
    cls = judge_class(kind)
    return cls.uses_prompt and bool(getattr(cls, "INSTRUCTIONS", None))


def pool_seeds(spec: RunSpec) -> list[tuple[str, str]]:
    """The instruction pool's first candidates for this run (none for a judge without an instruction)."""
    if not prompted(spec.judge):
        return []
    generic = judge_class(spec.judge).INSTRUCTIONS
    return seed_instructions(spec.criterion, generic, spec.instructions, next(iter(generic.values())))


def default_params(spec: RunSpec, data_fixed: dict[str, Any] | None = None, *, lm: JudgeLM | None = None,
                   instructions: Sequence[str] = (), demo_pool: Sequence[Example] = (),
                   label_range: tuple[float, float] | None = None) -> dict[str, Any]:
    """The incumbent's trial parameters: ``suggest`` answered by an Optuna ``FixedTrial`` holding every
    knob's default, so the names and encodings are the search's own. A knob's default is the kind's data
    default for ``demo_pool`` where it has one (what ``build``, and so ``evaluate``, gives the untuned judge on
    this data: a fact check's ``support`` direction without references), else the declared one. Its
    instruction is the kind's default one, found in the pool by text; with a criterion, whose wording replaces
    the generic ones, the criterion alone (the pool's first). Its demos, if the default shows any, are draw 0."""
    settled = {**(data_fixed or {}), **settled_params(spec, lm)}
    cls = judge_class(spec.judge)
    defaults: dict[str, Any] = {p.name: p.default for p in cls.space_for(settled)}
    defaults.update((k, v) for k, v in data_defaults(spec.judge, demo_pool, label_range).items() if k in defaults)
    if instructions and "instruction" in defaults:
        text = cls.INSTRUCTIONS.get(defaults["instruction"])
        defaults["instruction"] = instructions.index(text) if text in instructions else 0
    chosen = suggest(optuna.trial.FixedTrial({**defaults, "demo_seed": 0}), spec, data_fixed, lm=lm,
                     instructions=instructions)
    return {name: value for name, value in chosen.items() if name not in settled}
