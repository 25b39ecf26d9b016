"""The public Python API: load a frozen judge and score with it; tune and evaluate from Python."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from judgetune.config import JudgeConfig, load_config_lm, score_protocol
from judgetune.datasets import Example, Reference, example_from_record
from judgetune.errors import DataValidationError, JudgetuneError
from judgetune.judges import Verdict

__all__ = ["FrozenJudge", "JudgmentFailedError", "Scored", "evaluate", "load", "tune"]


class JudgmentFailedError(JudgetuneError):
    """The judge could not judge this item (the reason is in the message); it is never scored as a number."""


@dataclass(frozen=True)
class Scored:
    """One scored item: the calibrated ``score`` on the human scale (None when the judgment failed),
    the judge's ``raw_score`` and its full ``verdict``."""

    id: str
    score: float | None
    raw_score: float | None
    verdict: Verdict


class FrozenJudge:
    """A judge rebuilt from its ``judge.json`` (built once, here): scores new items exactly as the run that
    froze it. An item's score is a function of the frozen judge and that item alone: the same alone,
    in any batch and in any order; no label of an item being scored is read.

    A judge whose settings compare an item with the other answers of its question (a hybrid with
    ``z`` or ``rank`` normalization) scores only under a protocol: ``score_many(items, protocol="group")``
    with a ``group`` on every item; without one it is refused with an error saying so.

    Example:
        >>> judge = judgetune.load("runs/demo/judge.json")  # doctest: +SKIP
        >>> judge.score(question="What is 2+2?", answer="4", reference="Four")  # doctest: +SKIP
        3.71
    """

    def __init__(self, config: JudgeConfig, lm: Any = None):
        self.config = config
        self._lm = lm if lm is not None else load_config_lm(config)
        self.judge = config.build_judge(self._lm)

    @property
    def label_range(self) -> tuple[float, float]:
        return float(self.config.label_range[0]), float(self.config.label_range[1])

    @property
    def needs_groups(self) -> bool:
        """Whether this judge compares an item with the other answers of its group (scores only under a protocol)."""
        return self.judge.needs_groups

    def score(self, *, answer: str, question: str | None = None, reference: str | None = None,
              references: Sequence[tuple[str, float]] | None = None, context: Sequence[str] | None = None,
              answer_b: str | None = None, group: str | None = None) -> float:
        """The calibrated score of one answer (``references``: graded ones the item carries, as (text, grade)).

        Raises:
            JudgmentFailedError: the judge could not judge it (why is in the message).
            JudgetuneError: the judge compares an item with its group (score a group with ``score_many``
                under ``protocol="group"``).
        """
        refs = [Reference(reference, None)] if reference is not None else []
        refs += [Reference(text, grade) for text, grade in references or ()]
        example = Example(id="item", answer=answer, question=question, references=tuple(refs),
                          context=tuple(context or ()), answer_b=answer_b, group=group)
        scored = self.score_many([example])[0]
        if scored.score is None:
            raise JudgmentFailedError(f"the {self.config.judge} judge failed on this item: {scored.verdict.raw}")
        return scored.score

    def score_many(self, examples: Iterable[Example | Mapping[str, Any]], *, protocol: str | None = None,
                   per_grade: int = 1, seed: int = 0, progress: bool = False) -> list[Scored]:
        """Scores of many items (Examples, or dicts with the fields of a data file's rows), in order.
        A failed judgment has ``score`` None and says why in ``verdict.raw``.

        ``protocol``: None (each item alone), ``group`` (a judge may compare an item with the other items
        of its ``group``; every item needs one) or ``linkage`` (per group, ``per_grade`` labeled answers of
        every grade are drawn as references and are no longer scored: the result lists the candidates only).

        Raises:
            JudgetuneError: a protocol's requirement unmet, or a judge that needs one scored without it.
        """
        items = [self._example(e, i) for i, e in enumerate(examples)]
        scoring = score_protocol(self.config, items, self._lm, protocol=protocol, per_grade=per_grade, seed=seed,
                                 judge=self.judge, progress=progress)
        return [Scored(e.id, s, v.score, v) for e, v, s in zip(scoring.items, scoring.verdicts, scoring.scores)]

    def as_dspy_metric(self, *, answer: str = "answer", question: str | None = "question",
                       reference: str | None = "reference") -> Callable[..., float]:
        """This judge as a DSPy metric ``metric(example, pred, trace=None) -> float``: the calibrated score of
        ``pred.<answer>`` (given ``example.<question>`` and ``example.<reference>`` where the example has
        them), mapped linearly from the label range onto 0-1. Use it with ``dspy.Evaluate`` or an optimizer
        (``metric_threshold`` in 0-1). The judge's own LM calls stay out of the program's trace.

        Raises (from the metric):
            JudgmentFailedError: the judge could not judge the answer; a failure is never scored as 0.
        """
        import dspy

        low, high = self.label_range

        def metric(example: Any, pred: Any, trace: Any = None) -> float:
            fields = {"answer": str(pred[answer])}
            if question and question in example:
                fields["question"] = str(example[question])
            if reference and reference in example:
                fields["reference"] = str(example[reference])
            with dspy.context(trace=None):
                return (self.score(**fields) - low) / (high - low)

        return metric

    @staticmethod
    def _example(item: Example | Mapping[str, Any], index: int) -> Example:
        if isinstance(item, Example):
            return item
        problems: list[str] = []
        example = example_from_record(dict(item), where=f"item {index}", default_id=str(index), problems=problems,
                                      require_label=False)
        if problems:
            raise DataValidationError("\n".join(problems))
        return example

    def close(self) -> None:
        if self._lm is not None:
            self._lm.close()

    def __enter__(self) -> FrozenJudge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load(path: str | Path) -> FrozenJudge:
    """The frozen judge a ``judge.json`` describes, ready to score (its LM loaded; a server's key from the environment).

    Raises:
        ConfigError: the file is missing, not JSON, or a field is wrong (named in the message).
    """
    return FrozenJudge(JudgeConfig.load(path))


def tune(data: str, *, judge: str = "rubric", name: str = "run", lm: str = "local:smollm2", runs_dir: str | Path = "runs",
         report: bool = True, **settings: Any) -> FrozenJudge:
    """Tune, calibrate and freeze a judge on ``data`` (a catalog name or a file); returns the frozen judge.

    ``settings`` are the fields of :class:`judgetune.tuning.RunSpec` (``n_trials``, ``seed``, ``fixed``, ...).
    The run's folder is ``runs_dir/name`` (judge.json, study.db, test predictions, and report.html when ``report``).
    """
    from judgetune import tuning

    spec = tuning.RunSpec(name=name, judge=judge, data=data, lm=lm, **settings)
    config, run_dir, study = tuning.tune(spec, runs_dir=runs_dir)
    if report:
        from judgetune.report import write_report

        write_report(run_dir, study=study, config=config)
    return FrozenJudge(config)


def evaluate(judge: str | FrozenJudge, data: str, *, split: str = "test", lm: str = "local:smollm2",
             seed: int = 0, n_resamples: int = 1000, fields: dict[str, str] | None = None, label: str | None = None,
             **params: Any) -> list[dict[str, Any]]:
    """Rows of agreement with the human labels on one split of ``data``: the judge (a kind, untuned, with
    ``params``; or a frozen judge, calibrated) beside the trivial baselines, with 95% intervals.
    ``fields`` and ``label`` map a file's own columns (see :func:`judgetune.datasets.read_examples`)."""
    from judgetune import datasets, evaluation, stats
    from judgetune.judges import judge_class, make_judge
    from judgetune.lm import load_lm

    examples, label_range = datasets.load_data(data, fields=fields, label=label)
    splits = datasets.split_examples([e for e in examples if e.judgment is not None], seed=seed)
    test = splits[split]
    if isinstance(judge, FrozenJudge):  # calibrated scores beside the baselines, failures counted and left out
        scores = [s.score for s in judge.score_many(test)]
        rows = [{"name": f"frozen {judge.config.judge}",
                 **evaluation.agreement(scores, test, label_range, n_resamples=n_resamples, seed=seed)}]
        train_labels = [e.judgment for e in splits["train"]]
        for name, pred in (("constant", stats.constant_baseline(train_labels, len(test))),
                           ("random", stats.random_baseline(train_labels, len(test), seed=seed))):
            rows.append({"name": name, **evaluation.agreement(list(pred), test, label_range, n_resamples=n_resamples,
                                                              seed=seed)})
        return rows
    model = load_lm(lm) if judge_class(judge).needs_lm_with(params or {}) else None
    try:
        built = make_judge(judge, model, train=splits["train"], pool=test, label_range=label_range, params=params,
                           seed=seed)
        return evaluation.evaluate_judge(built, test, train=splits["train"], label_range=label_range,
                                         n_resamples=n_resamples, seed=seed)["rows"]
    finally:
        if model is not None:
            model.close()
