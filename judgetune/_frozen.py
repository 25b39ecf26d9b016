"""A frozen judge in Python: ``load`` a judge.json and score items with it (one, many, a stream, a file), and rows
held in memory (lists of dicts, DataFrames) read as the same validated records a data file gives."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from itertools import islice
from numbers import Integral, Real
from pathlib import Path
from typing import TYPE_CHECKING, Any

from judgetune._files import clashes
from judgetune.config import JudgeConfig
from judgetune.datasets import Example, Reference, describe, example_from_record, unwritable
from judgetune.errors import DataValidationError, JudgetuneError, SettingsError, shown
from judgetune.judges import Verdict
from judgetune.scoring import ScoreRun, file_source, load_config_lm, score_protocol, score_stream, write_scored

if TYPE_CHECKING:
    import optuna

__all__ = ["FrozenJudge", "JudgmentFailedError", "Rows", "Scored", "Scores", "TunedJudge", "load"]


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

    @property
    def degraded(self) -> list[str]:
        """The signals the judge could not compute for this item (its score rests on the rest); empty when whole."""
        return self.verdict.degraded


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

    def __init__(self, config: JudgeConfig, lm: Any = None, *, api_base: str | None = None,
                 where: str = "the judge config"):
        self.config = config
        self._lm = lm if lm is not None else load_config_lm(config, api_base=api_base, where=where)
        try:  # over a server, labels are read where the judge read them when tuned, or it stops here
            self.judge = config.build_judge(self._lm, where=where)
        except BaseException:
            if lm is None and self._lm is not None:
                self._lm.close()
            raise

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
            DataValidationError: an argument that is not what a data row's field holds (``answer=None``, a number,
                bytes), each named as ``score(): field: expected ..., found ...``.
            JudgmentFailedError: the judge could not judge it (why is in the message).
            JudgetuneError: the judge compares an item with its group (score a group with ``score_many``
                under ``protocol="group"``).
        """
        record: dict[str, Any] = {"answer": answer}  # checked as a data row is: the same errors as score_many
        record.update({name: value for name, value in (("question", question), ("reference", reference),
                                                       ("answer_b", answer_b), ("group", group)) if value is not None})
        problems: list[str] = []
        if reference is not None and not isinstance(reference, str):  # a row's reference may be a list; this is one text
            problems.append(f"score(): reference: expected one text (several, or graded ones, go in references=), "
                            f"found {describe(record.pop('reference'))}")
        if references is not None:
            record["references"] = ([{"text": r[0], "grade": r[1]} if isinstance(r, tuple) and len(r) == 2 else r
                                     for r in references] if isinstance(references, (list, tuple)) else references)
        if context is not None:
            record["context"] = list(context) if isinstance(context, tuple) else context
        example = example_from_record(record, where="score()", default_id="item", problems=problems,
                                      require_label=False)
        if problems or example is None:
            raise DataValidationError(problems)
        scored = self.score_many([example])[0]
        if scored.score is None:
            raise JudgmentFailedError(f"the {self.config.judge} judge failed on this item: {scored.verdict.raw}")
        return scored.score

    def score_many(self, examples: Iterable[Example | Mapping[str, Any]] | str | Path, *, protocol: str | None = None,
                   per_grade: int = 1, seed: int = 0, progress: bool = False) -> Scores:
        """Scores of many items (Examples, dicts with the fields of a data file's rows, a DataFrame or a data
        file's path), in order, held in memory (:meth:`score_to` streams into a file instead).
        A failed judgment has ``score`` None and says why in ``verdict.raw``.

        ``protocol``: None (each item alone), ``group`` (a judge may compare an item with the other items
        of its ``group``; every item needs one) or ``linkage`` (per group, ``per_grade`` labeled answers of
        every grade are drawn as references and are no longer scored: the result lists the candidates only).

        Raises:
            JudgetuneError: a protocol's requirement unmet, or a judge that needs one scored without it.
            SettingsError: ``per_grade`` or ``seed`` not a whole number in range.
        """
        _whole("per_grade", per_grade, 1)
        _whole("seed", seed, 0)
        items = [self._example(e, i) for i, e in enumerate(records_of(examples))]
        _refuse_repeated_ids(items)
        scoring = score_protocol(self.config, items, self._lm, protocol=protocol, per_grade=per_grade, seed=seed,
                                 judge=self.judge, progress=progress)
        return Scores(Scored(e.id, s, v.score, v) for e, v, s in zip(scoring.items, scoring.verdicts, scoring.scores))

    def score_iter(self, examples: Iterable[Example | Mapping[str, Any]], *, chunk_size: int = 1000) -> Iterator[Scored]:
        """Scored items one by one, in order, scoring ``chunk_size`` at a time: memory holds one chunk, whatever
        the number of items (each item alone, no protocol); a DataFrame's rows too. A data file's path is refused:
        score it with :meth:`score_to` (or :meth:`score_many`). The arguments are checked at the call."""
        if isinstance(examples, (str, Path)):  # a str would be iterated as its characters
            raise JudgetuneError(f"items: expected an iterable of Examples or dicts, found a path ({shown(examples)}); "
                                 "score a data file with score_to(path, out) or score_many(path)")
        _refuse_non_rows(examples, "items", "an iterable of Examples or dicts, or a DataFrame")
        _whole("chunk_size", chunk_size, 1)
        return self._scored_chunks(records_of(examples) if _is_frame(examples) else examples, chunk_size)

    def _scored_chunks(self, examples: Iterable[Example | Mapping[str, Any]], chunk_size: int) -> Iterator[Scored]:
        items = (self._example(e, i) for i, e in enumerate(examples))
        seen: dict[str, int] = {}
        while True:
            chunk = list(islice(items, chunk_size))
            if not chunk:
                return
            _refuse_repeated_ids(chunk, seen)
            scoring = score_protocol(self.config, chunk, self._lm, judge=self.judge)
            yield from (Scored(e.id, s, v.score, v) for e, v, s in zip(scoring.items, scoring.verdicts, scoring.scores))

    def score_to(self, examples: Any, out: str | Path, *, protocol: str | None = None, per_grade: int = 1,
                 seed: int = 0, progress: bool = False, chunk_size: int = 1000, force: bool = False,
                 max_tokens: int | None = None, prices: tuple[float, float] | None = None) -> ScoreRun:
        """Score ``examples`` (any iterable of Examples or dicts, a DataFrame or a data file's path) into ``out``
        (a .jsonl, .csv or .parquet file) as ``judgetune score`` does: ``chunk_size`` at a time, memory holding
        one chunk, a call after an interruption resuming where the output stopped (``force``: start over).
        ``max_tokens`` and ``prices`` (per million prompt and completion tokens) as ``score``'s options;
        ``protocol`` as :meth:`score_many` (its rows are held in memory and written at the end). Returns the
        run's record (rows, failures, tokens).

        Raises:
            JudgetuneError: ``out`` is the input file, exists (without ``force``) or is being written by another run.
            SettingsError: an option of the wrong type or out of range (checked before any scoring).
        """
        if not isinstance(out, (str, Path)):
            raise SettingsError(f"out: expected the path of a .jsonl, .csv or .parquet file, found {type(out).__name__}")
        _refuse_non_rows(examples, "items", ITEMS)
        for name, value, low in (("chunk_size", chunk_size, 1), ("per_grade", per_grade, 1), ("seed", seed, 0)):
            _whole(name, value, low)
        if max_tokens is not None:
            _whole("max_tokens", max_tokens, 1)
        if prices is not None and not (isinstance(prices, (tuple, list)) and len(prices) == 2
                                       and all(_real(p) and p >= 0 for p in prices)):
            raise SettingsError(f"prices: expected (prompt, completion), two prices >= 0 per million tokens, "
                                f"found {describe(prices)}")
        if isinstance(examples, (str, Path)) and clashes(out, [examples]):  # links too; force never overwrites it
            raise JudgetuneError(f"out {shown(out)}: that is the input file of this call; write the scores elsewhere")
        out = Path(out)
        if protocol is not None:
            items = [self._example(e, i) for i, e in enumerate(records_of(examples))]
            scoring = score_protocol(self.config, items, self._lm, protocol=protocol, per_grade=per_grade, seed=seed,
                                     judge=self.judge, progress=progress)
            return write_scored(out, scoring.items, scoring.verdicts, scoring.scores, force=force)
        options = {"chunk_size": chunk_size, "force": force, "max_tokens": max_tokens, "prices": prices,
                   "progress": progress}
        if isinstance(examples, (str, Path)) and Path(examples).is_file():
            return score_stream(self.config, self.judge, self._lm, None, out, source=file_source(examples), **options)
        if isinstance(examples, (str, Path)) or _is_frame(examples):
            examples = records_of(examples)
        items = [self._example(e, i) for i, e in enumerate(examples)] if isinstance(examples, Sized) else (
            self._example(e, i) for i, e in enumerate(examples))
        return score_stream(self.config, self.judge, self._lm, items, out, source={"items": "python"}, **options)

    def as_dspy_metric(self, *, answer: str = "answer", question: str | None = "question",
                       reference: str | None = "reference", feedback: bool = False) -> Callable[..., Any]:
        """This judge as a DSPy metric ``metric(example, pred, trace=None, *args) -> float``: the calibrated score
        of ``pred.<answer>`` (given ``example.<question>`` and ``example.<reference>`` where the example has
        them), mapped linearly from the label range onto 0-1. Use it with ``dspy.Evaluate`` or an optimizer
        (``metric_threshold`` in 0-1). The judge's own LM calls stay out of the program's trace.

        With ``feedback=True`` the metric returns ``dspy.Prediction(score=..., feedback=...)``, as
        ``dspy.GEPA`` wants: the feedback gives the score on the human scale and, for LM judges, the
        judge's probability of its likeliest labels, so the reflection LM sees how sure the judge was.

        Raises (from the metric):
            JudgmentFailedError: the judge could not judge the answer; a failure is never scored as 0.
        """
        import dspy

        low, high = self.label_range

        def metric(example: Any, pred: Any, trace: Any = None, *_: Any, **__: Any) -> Any:
            item = Example(id="item", answer=str(pred[answer]),
                           question=str(example[question]) if question and question in example else None,
                           references=(Reference(str(example[reference]), None),)
                           if reference and reference in example else ())
            with dspy.context(trace=None):
                scored = self.score_many([item])[0]
            if scored.score is None:
                raise JudgmentFailedError(f"the {self.config.judge} judge failed on this item: {scored.verdict.raw}")
            value = (scored.score - low) / (high - low)
            if not feedback:
                return value
            return dspy.Prediction(score=value, feedback=_feedback(scored, self.config.judge, low, high))

        return metric

    @staticmethod
    def _example(item: Example | Mapping[str, Any], index: int) -> Example:
        if isinstance(item, Example):
            return item
        if not isinstance(item, Mapping):
            raise DataValidationError([f"item {index}: expected an Example or a dict of fields (answer, question, "
                                       f"...), found {type(item).__name__}"])
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


def _refuse_repeated_ids(items: list[Example], seen: dict[str, int] | None = None) -> None:
    """Every item's id once (ids are text: ``1`` and ``"1"`` are the same id), else one error naming each repeat."""
    seen = {} if seen is None else seen
    start = len(seen)  # items before this chunk (all distinct, or an error was raised)
    problems = []
    for offset, item in enumerate(items):
        if item.id in seen:
            problems.append(f"item {start + offset}: id: expected each id once (ids are compared as text: 1 and "
                            f"\"1\" are one id), found {item.id!r} again (first at item {seen[item.id]})")
        else:
            seen[item.id] = start + offset
    if problems:
        raise DataValidationError(problems)


def _real(value: Any) -> bool:
    """Whether ``value`` is a finite number (not a bool, not text)."""
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def _whole(name: str, value: Any, low: int, high: int | None = None) -> int:
    """``value`` when it is a whole number from ``low`` (to ``high``), else a SettingsError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low or high is not None and value > high:
        bound = f"from {low} to {high}" if high is not None else f">= {low}"
        raise SettingsError(f"{name}: expected a whole number {bound}, found {describe(value)}")
    return int(value)


def load(path: str | Path, *, api_base: str | None = None) -> FrozenJudge:
    """The frozen judge a ``judge.json`` describes, ready to score (its LM loaded; a server's key from the environment).

    A judge.json is untrusted input: ``$OPENAI_API_KEY`` goes to OpenAI's endpoint, to ``api_base`` (a server you
    name, used instead of the file's) or to the file's own endpoint when ``$JUDGETUNE_TRUSTED_ENDPOINTS`` lists
    it; otherwise requests go without the key (docs/reliability.md).

    Raises:
        ConfigError: the file is missing, not JSON, or a field is wrong (named in the message).
    """
    if not isinstance(path, (str, Path)):
        raise SettingsError(f"path: expected the path of a judge.json, found {type(path).__name__}")
    return FrozenJudge(JudgeConfig.load(path), api_base=api_base, where=str(path))


class Scores(list):
    """The :class:`Scored` items of ``score_many``, in order; ``to_pandas()`` gives one row per item."""

    def to_pandas(self) -> Any:
        """A DataFrame with ``id``, ``score`` (None for a failed judgment), ``raw_score``, ``parsed``, ``failure`` and
        ``degraded`` (the signals it was scored without, or None)."""
        pd = _pandas()
        return pd.DataFrame([{"id": s.id, "score": s.score, "raw_score": s.raw_score, "parsed": s.verdict.parsed,
                              "failure": None if s.score is not None else s.verdict.raw,
                              "degraded": s.degraded or None} for s in self])

    @property
    def degraded(self) -> int:
        """How many items were scored without some of their judge's signals (see :attr:`Scored.degraded`)."""
        return sum(bool(s.degraded) for s in self)


class Rows(list):
    """Rows of figures (dicts) as ``evaluate`` and ``compare`` return them; ``to_pandas()`` gives a DataFrame."""

    def to_pandas(self) -> Any:
        """A DataFrame, one row per dict; an interval stays a ``[low, high]`` list in its cell."""
        return _pandas().DataFrame(list(self))


class TunedJudge(FrozenJudge):
    """The frozen judge ``tune`` returns, with the Optuna ``study`` that chose it and its ``run_dir``."""

    def __init__(self, config: JudgeConfig, *, study: optuna.Study, run_dir: Path, lm: Any = None):
        super().__init__(config, lm)
        self.study = study
        self.run_dir = Path(run_dir)

    def trials_to_pandas(self) -> Any:
        """The study's trials as a DataFrame (Optuna's ``trials_dataframe``: parameters, objectives, state)."""
        _pandas()
        return self.study.trials_dataframe()


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:
        raise JudgetuneError("to_pandas() needs pandas: pip install pandas") from None
    return pandas


def _is_frame(data: Any) -> bool:
    return type(data).__module__.split(".")[0] == "pandas" and hasattr(data, "to_dict") and hasattr(data, "columns")


def _plain(value: Any) -> Any:
    """A DataFrame cell as JSON data: numpy scalars to Python, NaN/NaT/None to None, arrays to lists."""
    if value is None:
        return None
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        return _plain(value.tolist())
    if isinstance(value, float) and value != value:  # NaN
        return None
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if type(value).__name__ in ("NaTType", "NAType"):
        return None
    return value


def _rows_in_memory(data: Any) -> list[dict[str, Any]] | None:
    """The rows of a DataFrame or a list of dicts (a missing cell left out), or None for a path or catalog name."""
    if isinstance(data, (str, Path)):
        return None
    if _is_frame(data):
        columns = [str(c) for c in data.columns]
        twice = sorted({c for c in columns if columns.count(c) > 1})
        if twice:  # pandas would keep the last one silently; the CSV reader refuses the same header
            raise DataValidationError([f"data: columns: expected each column once, found {', '.join(map(repr, twice))} "
                                       "more than once"])
        rows = data.to_dict(orient="records")
    else:
        _refuse_non_rows(data, "data", ROWS)
        rows = list(data)
    out, problems = [], []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise JudgetuneError(f"data row {i}: expected a dict of fields (answer, label, ...), found {type(row).__name__}")
        out.append({str(k): v for k, v in ((k, _plain(v)) for k, v in row.items()) if v is not None})
        problems += [f"data row {i}: {p}" for p in unwritable(out[-1])]
    if problems:  # refused here: the rows could not be written to their file
        raise DataValidationError(problems)
    if not out:
        raise JudgetuneError("data: no rows")
    return out


ROWS = "a catalog name, a file path, a list of dicts or a pandas DataFrame"
ITEMS = "a list of Examples or dicts, a DataFrame, a data file or a catalog name"


def _refuse_non_rows(data: Any, name: str, expected: str) -> None:
    """Refuse ``data`` that is no collection of rows (a number, None, bytes, one dict): one line naming ``name``."""
    if isinstance(data, (str, Path)) or _is_frame(data):
        return
    if not isinstance(data, Iterable) or isinstance(data, (bytes, Mapping)):
        one = " (one row? give a list of rows)" if isinstance(data, Mapping) else ""
        raise JudgetuneError(f"{name}: expected {expected}, found {type(data).__name__}{one}")


def records_of(data: Any) -> list[Example | Mapping[str, Any]]:
    """Items to score from a list of Examples or dicts, a pandas DataFrame (one row per item, a missing cell left
    out), a data file or a catalog name (every row; labels not needed)."""
    if isinstance(data, (str, Path)):
        from judgetune import datasets

        return list(datasets.load_data(data)[0])
    if _is_frame(data):
        return list(_rows_in_memory(data) or [])
    _refuse_non_rows(data, "items", ITEMS)
    return list(data)


def _feedback(scored: Scored, kind: str, low: float, high: float) -> str:
    """GEPA's feedback text for one scored answer: the score on the human scale and how sure the judge was."""
    text = f"The {kind} judge scored this answer {scored.score:.2f} on the human scale {low:g}-{high:g}."
    dist = scored.verdict.distribution
    if dist:
        top = sorted(dist.items(), key=lambda kv: -kv[1])[:4]
        text += " Its probability per label: " + ", ".join(f"{k}: {p:.2f}" for k, p in top) + "."
    raw = (scored.verdict.raw or "").strip()
    if raw and len(raw) <= 600:
        text += f" Its own words: {raw}"
    return text
