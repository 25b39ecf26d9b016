"""Stage 4, the objective: a plain function of a trial. It builds the trial's judge and scores the
search items in chunks. Objectives: MAE of the raw scores after a cross-fitted calibrator of the
kinds that can ship (``cross_fitted``: the same group folds as the calibrator; minimize) and Spearman
of the raw scores (maximize; per group, averaged, where the data has groups). After each chunk a
trial whose bootstrap interval is clear of a point of the Pareto front on both objectives stops
(pruned). Trials hold only JSON.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import optuna

from judgetune.calibration import cross_fitted
from judgetune.datasets import Example, groups_of
from judgetune.errors import JudgetuneError
from judgetune.judges import Verdict
from judgetune.lm import JudgeLM
from judgetune.stats import correlation, grouped_correlation, interval_of, spearman_rows
from judgetune.tuning._pool import InstructionPool
from judgetune.tuning._space import judge_for, suggest
from judgetune.tuning._spec import RunSpec
from judgetune.tuning._splits import Splits

MAX_FAILURE_RATE = 0.5  # a trial failing to judge more items than this gets the worst objective values


def search_key(rule: str) -> Callable[[Any], tuple]:
    """The one best-first order of trials by their search figures (``values`` = (MAE, Spearman)): by the
    pick rule's objective, ties by the other, then by trial number."""
    if rule == "spearman":
        return lambda t: (-t.values[1], t.values[0], t.number)
    return lambda t: (t.values[0], -t.values[1], t.number)


def ranked(trials: Iterable[Any], rule: str, limit: int | None = None) -> list[Any]:
    """``trials`` best first by ``search_key`` (at most ``limit``)."""
    return sorted(trials, key=search_key(rule))[:limit]


def objectives(verdicts: list[Verdict], examples: list[Example], *, label_range: tuple[float, float],
               seed: int = 0, pooled: bool = False) -> tuple[float, float, dict[str, Any]]:
    """(MAE, Spearman) of the parsed verdicts: MAE of the cross-fitted calibrated scores, Spearman of
    the raw ones (per question where there are questions, unless ``pooled``); the worst values when too many
    failed or nothing varies."""
    kept = [(v.score, e.judgment, e) for v, e in zip(verdicts, examples) if v.parsed]
    failure_rate = 1 - len(kept) / len(verdicts)
    worst = (label_range[1] - label_range[0], -1.0)
    info: dict[str, Any] = {"parse_failure_rate": failure_rate}
    if failure_rate > MAX_FAILURE_RATE or len(kept) < 4:
        return *worst, {**info, "note": "too many parse failures"}
    raw = np.asarray([k[0] for k in kept], dtype=float)
    gold = np.asarray([k[1] for k in kept], dtype=float)
    groups = groups_of([k[2] for k in kept])
    pred, kind, _ = cross_fitted(raw, gold, label_range=label_range, groups=groups, seed=seed)
    mae = float(np.mean(np.abs(pred - gold)))
    info["calibrator"] = kind
    rho = grouped_correlation(raw, gold, groups).value if groups and not pooled else correlation(raw, gold)
    if rho is None:
        return mae, -1.0, {**info, "note": "Spearman undefined (constant scores)"}
    return mae, float(rho), info


def clearly_dominated(pred: np.ndarray, raw: np.ndarray, gold: np.ndarray, groups: list[str] | None,
                      front: list[tuple[float, float]], *, seed: int) -> bool:
    """True when a point of the front beats both bounds of this trial's 95% bootstrap intervals, each
    measured as the front's figures are: MAE of the out-of-fold calibrated ``pred``, Spearman of the
    ``raw`` scores (per question and averaged where there are ``groups``). Resamples draw whole
    questions where there are groups (computed as arrays: this runs after every chunk of every trial)."""
    if not front or len(pred) < 6:
        return False
    pred, raw, gold = (np.asarray(x, dtype=float) for x in (pred, raw, gold))
    rng = np.random.default_rng(seed)
    if groups is None:
        idx = rng.integers(0, len(pred), (200, len(pred)))
        mae_ci = interval_of(np.abs(pred[idx] - gold[idx]).mean(axis=1))
        rho_ci = interval_of(spearman_rows(raw[idx], gold[idx]))
    else:
        keys = np.asarray(groups)
        units = [np.flatnonzero(keys == k) for k in dict.fromkeys(groups)]
        if len(units) < 2:
            return False
        errors = np.array([np.abs(pred[u] - gold[u]).sum() for u in units])
        sizes = np.array([len(u) for u in units], dtype=float)
        rhos = np.array([np.nan if (v := correlation(raw[u], gold[u])) is None else v for u in units])
        draws = rng.integers(0, len(units), (200, len(units)))
        weights = np.stack([np.bincount(d, minlength=len(units)) for d in draws]).astype(float)
        mae_ci = interval_of(weights @ errors / (weights @ sizes))
        defined = ~np.isnan(rhos)
        with np.errstate(invalid="ignore", divide="ignore"):
            rho_ci = interval_of(weights @ np.nan_to_num(rhos) / (weights @ defined))
    if mae_ci.low is None or rho_ci.high is None:
        return False
    return any(mae_ci.low > f_mae and rho_ci.high < f_rho for f_mae, f_rho in front)


class Objective:
    """The study's objective: a plain function of a trial (and a JSON-only record of its cost)."""

    def __init__(self, spec: RunSpec, lm: JudgeLM | None, splits: Splits):
        self.spec, self.lm, self.splits = spec, lm, splits

    def __call__(self, trial: optuna.Trial) -> tuple[float, float]:
        spec, s = self.spec, self.splits
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")  # first: a crash can be told apart
        instructions = InstructionPool(trial.study).texts()
        params = suggest(trial, spec, s.data_fixed, lm=self.lm, instructions=instructions)
        try:
            judge = judge_for(params, spec.judge, self.lm, seed=spec.seed, demo_pool=s.demo_pool, label_range=s.label_range,
                              instructions=instructions)
        except JudgetuneError as err:  # settings that give no judge on this data (e.g. every signal switched off)
            trial.set_user_attr("note", str(err))
            raise optuna.TrialPruned(str(err)) from None
        calls0 = self._calls()
        verdicts: list[Verdict] = []
        front = [tuple(t.values) for t in trial.study.best_trials]
        # a judge without an LM costs little and may normalize within a question: score it in one batch
        step = spec.chunk if judge.needs_lm else len(s.search)
        for start in range(0, len(s.search), step):
            chunk = s.search[start:start + step]
            verdicts.extend(judge.judge_all(chunk))
            done = s.search[:len(verdicts)]
            kept = [(v.score, e.judgment, e.group_key) for v, e in zip(verdicts, done) if v.parsed]
            trial.set_user_attr("items_scored", len(verdicts))
            self._record_cost(trial, verdicts, calls0)
            if len(verdicts) < len(s.search) and len(kept) >= 6:
                gold = np.asarray([k[1] for k in kept], dtype=float)
                raw = np.asarray([k[0] for k in kept], dtype=float)
                pred, _, _ = cross_fitted(raw, gold, label_range=s.label_range,
                                          groups=[k[2] for k in kept], seed=spec.seed)
                keys = None if spec.pooled else groups_of([e for v, e in zip(verdicts, done) if v.parsed])
                if clearly_dominated(pred, raw, gold, keys, front, seed=spec.seed):
                    trial.set_user_attr("pruned_after_items", len(verdicts))
                    raise optuna.TrialPruned(f"clearly dominated after {len(verdicts)} items")
        mae, rho, info = objectives(verdicts, s.search, label_range=s.label_range, seed=spec.seed,
                                    pooled=spec.pooled)
        for key, value in info.items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("raw_scores", [v.score for v in verdicts])  # for reflection on the best trial's misses
        return mae, rho

    def _calls(self) -> int:
        return lm_calls(self.lm)

    def _record_cost(self, trial: optuna.Trial, verdicts: list[Verdict], calls0: int) -> None:
        trial.set_user_attr("lm_calls", self._calls() - calls0)
        trial.set_user_attr("tokens", int(sum(v.tokens for v in verdicts)))


def lm_calls(lm) -> int:
    """Answers ``lm`` actually computed so far (cache misses)."""
    return 0 if lm is None else lm.label_calls + lm.engine.calls
