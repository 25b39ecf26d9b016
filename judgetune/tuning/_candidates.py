"""Stage 7a, the candidates: the incumbent (the kind's default settings) and the strongest trials by their search
figures, before any of them is scored for the gate."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import optuna

from judgetune.errors import JudgetuneError
from judgetune.tuning._objective import MAX_FAILURE_RATE, ranked
from judgetune.tuning._pool import InstructionPool
from judgetune.tuning._space import FAMILY, default_params, judge_for, settled_params
from judgetune.tuning._spec import RunSpec
from judgetune.tuning._splits import Splits, fit_space

__all__ = ["Candidate", "candidate_trials", "candidates_of", "family_candidates"]
log = logging.getLogger(__name__)


@dataclass
class Candidate:
    """A candidate before it is scored: its trial (None when it is no trial of the study), its settings, the trial's
    search figures ``(MAE, Spearman)`` (None when it is no trial) and whether the trial is on the Pareto front."""

    number: int | None
    params: dict[str, Any]
    search: tuple[float, float] | None = None
    on_front: bool = False


def candidate_trials(study: optuna.Study, spec: RunSpec, *, exclude: Sequence[dict[str, Any]] = (),
                     front_only: bool = False) -> list[Any]:
    """The strongest ``spec.rescore`` complete trials (of the Pareto front with ``front_only``) of distinct
    settings by their search figures (none with the settings in ``exclude``, e.g. the default's), then
    the best trial of each proposed instruction not among them (at most ``spec.rescore`` more), so
    every proposal gets figures. ``spec.rescore`` is resolved first (``with_rescore``)."""
    if spec.rescore is None:
        raise ValueError("candidate_trials needs spec.rescore resolved for the confirming items "
                         "(tuning.with_rescore or RunSpec.rescore_for)")
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    seen_params, chosen = [dict(p) for p in exclude], []
    for trial in ranked(study.best_trials if front_only else complete, spec.pick):
        if len(chosen) < spec.rescore and trial.params not in seen_params:
            seen_params.append(trial.params)
            chosen.append(trial)
    seen = {t.params.get("instruction") for t in chosen}
    proposed = {c.id for c in InstructionPool(study).candidates() if c.round is not None}
    extra = [ranked([t for t in complete if t.params.get("instruction") == i and t.params not in seen_params],
                    spec.pick, 1) for i in sorted(proposed - seen)]
    return chosen + ranked([t[0] for t in extra if t], spec.pick, spec.rescore)


def candidates_of(study: optuna.Study, spec: RunSpec, default: dict[str, Any]) -> list[Candidate]:
    """The default, then the strongest trials by their search figures (``candidate_trials``)."""
    every, front = study.get_trials(deepcopy=False), {t.number for t in study.best_trials}
    numbered = [(_trial_number(study, default), default)]
    numbered += [(t.number, dict(t.params)) for t in candidate_trials(study, spec, exclude=[default])]
    return [Candidate(n, p, None if n is None else tuple(every[n].values), n in front) for n, p in numbered]


def _trial_number(study: optuna.Study, params: dict[str, Any]) -> int | None:
    """The first complete trial with exactly these parameters (the incumbent's, usually trial 0)."""
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        if trial.params == params:
            return trial.number
    return None


def family_candidates(spec: RunSpec, splits: Splits, lm) -> tuple[list[Candidate], dict[str, str]]:
    """The default judge of each family in ``spec.also_families()``, as ``evaluate`` would build it untuned on this
    data (its data-decided settings from the training items, its data defaults from the demo pool), for the gate to
    test beside the run's own candidates (``FAMILY`` parameters: its kind and whole settings); and the families left
    out, with why. A family chosen automatically (``also`` left out) is left out, with a warning, when this data
    cannot build it, when it fails on more than half of the search items (no text to compare the answer with), or
    when it is a hybrid whose one signal is the answer's length (answer-only data: no judge of what is asked)."""
    out, skipped = [], {}
    for kind in spec.also_families():
        other = replace(spec, judge=kind, also=[], stack=False, panel=False, fixed={}, instructions=[],
                        criterion=None)
        try:
            fixed = fit_space(other, splits.train)
            params = {**default_params(other, fixed, lm=lm, demo_pool=splits.demo_pool,
                                       label_range=splits.label_range), **fixed, **settled_params(other, lm)}
            if spec.also_auto:
                _check_family(kind, params, splits, lm, seed=spec.seed)
        except (ValueError, JudgetuneError) as error:
            if not spec.also_auto:
                raise
            log.warning("%s: the %s judge's default is not among the challengers: %s", spec.name, kind, error)
            skipped[kind] = str(error)
            continue
        out.append(Candidate(None, {FAMILY: {"judge": kind, "params": params}}))
    return out, skipped


def _check_family(kind: str, params: dict[str, Any], splits: Splits, lm, *, seed: int) -> None:
    """Raise ValueError when an automatic family's default would be no judge of this data (``family_candidates``)."""
    signals = [k for k, v in params.items() if k.startswith("use_") and v is True]
    if kind == "hybrid" and signals == ["use_length"]:
        raise ValueError("its only signal on this data is the answer's length")
    judge = judge_for(dict(params), kind, lm, seed=seed, demo_pool=splits.demo_pool, label_range=splits.label_range)
    verdicts = judge.judge_all(splits.search)
    failed = [v for v in verdicts if not v.parsed]
    if len(failed) > MAX_FAILURE_RATE * len(verdicts):
        raise ValueError(f"it failed on {len(failed)} of the {len(verdicts)} search items ({failed[0].raw})")
