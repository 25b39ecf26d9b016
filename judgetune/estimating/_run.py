"""One estimate from files: a frozen judge, a data file (or catalog source) with a system per row and labels on
some rows, optionally the labels in a file of their own and the scores ``judgetune score`` already wrote.
Everything is checked before the judge scores anything."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from judgetune.errors import JudgetuneError, NothingJudgedError, shown
from judgetune.estimating._arrow import fast_observations
from judgetune.estimating._checks import check_rows, check_scale
from judgetune.estimating._cross import FITS, MIN_FIT_LABELS, fitted_estimates
from judgetune.estimating._estimate import Estimates, estimate_observations
from judgetune.estimating._join import join_labels, join_scores, refuse_other_judge
from judgetune.estimating._rows import Observations, from_examples, read_data

__all__ = ["by_columns", "estimate_files", "read_observations", "score_observations"]


def by_columns(by: str | Sequence[str]) -> list[str]:
    """``"system"`` or ``"model_a,model_b"`` (pairwise rows) as column names.

    Raises:
        JudgetuneError: none, more than two, or an empty name.
    """
    if isinstance(by, str):
        names = [n.strip() for n in by.split(",")]
    elif isinstance(by, Sequence) and all(isinstance(n, str) for n in by):
        names = [n.strip() for n in by]
    else:
        names = []
    if not 1 <= len(names) <= 2 or not all(names) or len(set(names)) < len(names):
        raise JudgetuneError(f"by={shown(by if isinstance(by, str) else repr(by))}: expected a column (each row's "
                             "system) or two distinct ones, A,B (the systems of answer and answer_b of pairwise rows)")
    return names


def read_observations(data: str | Path, by: Sequence[str], *, texts: bool = False,
                      labeled: str | Path | None = None, fields: dict[str, str] | None = None,
                      label: str | None = None, mirror: str | Path | None = None) -> Observations:
    """The rows of ``data`` (a file, or a catalog source, whose rows carry the systems under ``meta``), with the
    labels of ``labeled`` added; ``texts``: keep every row as an Example too (for a judge to score)."""
    from judgetune import datasets

    if str(data) in datasets.CATALOG:
        examples, _ = datasets.load_data(str(data), mirror=mirror, fields=fields, label=label)
        obs = from_examples(examples, by, str(data))
        known = datasets.get_source(str(data)).scale
        obs.scale = (float(known.low), float(known.high))
    else:
        fast = None if texts or fields or label is not None else fast_observations(data, by)
        obs = fast or read_data(data, by, fields=fields, label=label, examples=texts)
    if labeled is not None:
        join_labels(obs, labeled, fields=fields, label=label)
    return obs


def score_observations(obs: Observations, config: Any, *, api_base: str | None = None, where: str = "",
                       frozen: Any = None, progress: bool = False) -> None:
    """The frozen judge's calibrated score of every row (nan for a failed judgment), scored as ``judgetune score``
    scores (``FrozenJudge.score_to``: chunk by chunk, ``progress`` on standard error); ``frozen``: a loaded
    ``FrozenJudge`` of ``config`` to score with (kept open), else one is loaded and closed here."""
    from judgetune._frozen import FrozenJudge

    if obs.examples is None:
        raise JudgetuneError("estimate: the rows were read without their texts; give --scores or the data to score")
    judge = frozen or FrozenJudge(config, api_base=api_base, where=where or "the judge config")
    try:
        with tempfile.TemporaryDirectory(prefix="judgetune-estimate-") as folder:
            out = Path(folder) / "scores.jsonl"
            run = judge.score_to(obs.examples, out, progress=progress)
            if run.rows and run.failed >= run.rows:
                raise NothingJudgedError(f"the judge failed on every one of the {run.rows} rows, so it adds nothing "
                                         f"to the labels; the first because: {run.first_failure}")
            join_scores(obs, out)
    finally:
        if frozen is None:
            judge.close()


def estimate_files(config: str | Path | Any, data: str | Path, by: str | Sequence[str], *,
                   scores: str | Path | None = None, labeled: str | Path | None = None,
                   fields: dict[str, str] | None = None, label: str | None = None,
                   scale: tuple[float, float] | None = None, alpha: float = 0.05, api_base: str | None = None,
                   mirror: str | Path | None = None, frozen: Any = None, progress: bool = False,
                   fit: str | None = None, seed: int = 0) -> Estimates:
    """Read, check, score (unless ``scores`` are given) and estimate; see ``judgetune estimate -h``. ``config``:
    a judge.json path or a ``JudgeConfig``; ``frozen``: its loaded ``FrozenJudge``, to score with; ``progress``:
    the scoring's progress on standard error; ``fit``: ``score`` or ``signals``, a judge cross-fitted on the labels
    (``judgetune.estimating._cross``; ``seed`` cuts its folds) in place of PPI++'s per-system weight.

    Raises:
        JudgetuneError: every refusal of ``judgetune.estimating._checks``, bad rows, or scores of another judge.
    """
    from judgetune.config import JudgeConfig

    if not 0 < alpha < 1:
        raise JudgetuneError(f"--confidence: expected a level between 0 and 1, found {1 - alpha:g}")
    judge = JudgeConfig.load(config) if isinstance(config, (str, Path)) else config
    config = config if isinstance(config, (str, Path)) else "the judge"
    names = by_columns(by)
    if scores is not None:
        refuse_other_judge(scores, judge.to_dict(), str(config))
    if fit is not None and fit not in FITS:
        raise JudgetuneError(f"--fit {fit}: expected one of {', '.join(FITS)}")
    obs = read_observations(data, names, texts=scores is None or fit == "signals", labeled=labeled, fields=fields,
                            label=label, mirror=mirror)
    judge_scale = (float(judge.label_range[0]), float(judge.label_range[1]))
    check_rows(obs, names)
    if scale is not None:
        check_scale(obs, judge_scale, str(config), stated=scale)
    check_scale(obs, judge_scale, str(config), stated=obs.scale, stated_by=f"{data}'s scale")
    labels = int(np.count_nonzero(~np.isnan(obs.labels)))
    if fit is not None and labels < MIN_FIT_LABELS:  # before the judge scores anything
        raise JudgetuneError(f"--fit: {labels} labeled row(s); a judge is fitted on at least {MIN_FIT_LABELS} (label "
                             "more, or estimate without --fit)")
    if scores is not None:
        join_scores(obs, scores)
    else:
        score_observations(obs, judge, api_base=api_base, where=str(config), frozen=frozen, progress=progress)
    if fit is not None:
        result = fitted_estimates(obs, judge_scale, fit, alpha=alpha, seed=seed)
    else:
        result = estimate_observations(obs, judge_scale, alpha=alpha)
    if obs.nan_labels:
        result.notes.insert(0, f"{obs.nan_labels} label(s) given as NaN are taken as no label (unlabeled rows); "
                               "write null, or leave the cell empty")
    return result
