"""The public Python API: load a frozen judge and score with it; tune, evaluate and compare from Python.

Data may be a catalog name, a file path, a list of dicts (the fields of a data file's rows) or a pandas
DataFrame (pandas is optional and imported only when a DataFrame is passed or ``to_pandas()`` is called).
Rows held in memory are validated by the same row schema as a file: they are written once as JSONL into
the run folder (``tune``) or a temporary folder (``evaluate``, ``compare``), so a file's fingerprint, resume
and the error messages (``rows-....jsonl:LINE``: line N is row N) work as they do for a file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from judgetune._files import atomic_write, make_folder, write_text
from judgetune._frozen import (
    ROWS,
    FrozenJudge,
    JudgmentFailedError,
    Rows,
    Scored,
    Scores,
    TunedJudge,
    _is_frame,
    _pandas,
    _real,
    _refuse_non_rows,
    _rows_in_memory,
    _whole,
    load,
    records_of,
)
from judgetune._offline import keep_litellm_offline
from judgetune.config import JudgeConfig
from judgetune.errors import DataValidationError, JudgetuneError, SettingsError, shown

if TYPE_CHECKING:
    import optuna

__all__ = ["FrozenJudge", "JudgmentFailedError", "Picked", "Rows", "Scored", "Scores", "TunedJudge", "compare",
           "estimate", "evaluate", "load", "pick", "records_of", "tune"]


def _data_file(data: Any, folder: Path, *, write: bool = True) -> str:
    """``data`` itself when it names a catalog source or a file; rows in memory are written to
    ``folder/rows-SHA.jsonl`` (named by their content, so the same rows give the same run and resume),
    atomically (a killed write never leaves part of the rows under the name of all of them); ``write``
    False: only the name."""
    rows = _rows_in_memory(data)
    if rows is None:
        return str(data)
    text = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows)
    path = folder / f"rows-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:12]}.jsonl"
    if write and not path.exists():
        make_folder(folder)
        write_text(path, text)
    return str(path)


@contextlib.contextmanager
def offline_judge(config: Any) -> Iterator[Any]:
    """The judge of ``config`` built on a stand-in LM that never connects (its prompts, demos and settings are the
    judge.json's; nothing is scored): for exports that need the judge's structure, not its model."""
    from judgetune.lm import load_lm

    stand_in = load_lm("test:deterministic", use_cache=False) if config.lm is not None else None
    try:
        yield config.build_judge(stand_in)
    finally:
        if stand_in is not None:
            stand_in.close()


def _lm_object(lm: Any) -> tuple[Any, bool]:
    """``(JudgeLM or None, owned)``: a string stays a spec (None); a ``load_lm`` result is used as it is (the
    caller keeps it); a ``dspy.LM`` on an OpenAI-compatible endpoint is loaded here by its model, api_base and own
    api_key (none when it has none and names an api_base)."""
    if lm is None or isinstance(lm, str):
        return None, False
    from judgetune.lm import JudgeLM, load_lm

    if isinstance(lm, JudgeLM):
        return lm, False
    model = getattr(lm, "model", None)
    if isinstance(model, str) and model.startswith("openai/"):
        kwargs = getattr(lm, "kwargs", {}) or {}
        api_base = kwargs.get("api_base") or kwargs.get("base_url")
        # the dspy.LM's own key goes to its endpoint; without one, $OPENAI_API_KEY goes to OpenAI itself only
        # (an api_base of another provider's never receives the environment's key)
        key = kwargs.get("api_key") or ("" if api_base else None)
        return load_lm(model, api_base=api_base, api_key=key), True
    raise JudgetuneError(f"lm: expected a spec string, what judgetune.lm.load_lm returns, or a dspy.LM on an "
                         f"OpenAI-compatible endpoint ('openai/MODEL' with api_base), found {model or type(lm).__name__!r}")


def tune(data: Any, *, judge: str = "rubric", name: str = "run", lm: Any = "local:smollm2",
         runs_dir: str | Path = "runs", report: bool = True, sampler: optuna.samplers.BaseSampler | None = None,
         storage: str | optuna.storages.BaseStorage | None = None, fields: dict[str, str] | None = None,
         label: str | None = None, **settings: Any) -> TunedJudge:
    """Tune, calibrate and freeze a judge on ``data``; returns the frozen judge with its study.

    Args:
        data: a catalog name, a file, a list of dicts or a pandas DataFrame (rows as in a data file).
        judge: the judge kind (see ``judgetune.judges.KINDS``).
        name: the run's folder ``runs_dir/name`` (judge.json, study.db, test predictions, report.html).
        lm: a spec string, what ``judgetune.lm.load_lm`` returns (you keep and close it), or a ``dspy.LM``.
        sampler, storage: an Optuna sampler and storage (object or URL) instead of the spec's.
        fields, label: map your own column names to Example fields and the human score.
        settings: fields of :class:`judgetune.tuning.RunSpec` (``n_trials``, ``seed``, ``fixed``, ...).

    Example:
        >>> judge = judgetune.tune(df, judge="embedding", name="mine", n_trials=2)  # doctest: +SKIP
        >>> judge.study.best_trials, judge.config.metrics["test"]  # doctest: +SKIP
    """
    from judgetune import tuning
    from judgetune.judges import judge_class

    keep_litellm_offline()
    judge_class(judge)  # an unknown kind is refused before the data is read or a run folder is made
    _check_run_settings(name, settings)
    run_dir = Path(runs_dir) / name
    created = not run_dir.exists()
    data_arg = _data_file(data, run_dir, write=False)  # the settings are checked before anything is written
    model, owned = _lm_object(lm)
    if model is not None:
        settings.setdefault("api_base", model.spec.api_base)
        lm = str(model.spec)
    try:
        spec = tuning.RunSpec(name=name, judge=judge, data=data_arg, lm=lm, fields=dict(fields or {}),
                              label=label, **settings)
    except (TypeError, ValueError) as err:
        if owned:
            model.close()
        raise SettingsError(str(err)) from None
    try:
        _data_file(data, run_dir)
        config, run_dir, study = run_tuning(spec, runs_dir=runs_dir, lm=model, sampler=sampler, storage=storage,
                                            report=report, data_file=data_arg, created=created)
    except BaseException:
        if owned:
            model.close()
        raise
    return TunedJudge(config, study=study, run_dir=run_dir, lm=model if owned else None)


def run_tuning(spec: Any, *, runs_dir: str | Path = "runs", lm: Any = None, sampler: Any = None, storage: Any = None,
               report: bool = True, heartbeat: int = 10, timeout: float = 60.0, data_file: str | None = None,
               created: bool | None = None) -> tuple[Any, Path, Any]:
    """The one way a run is made, for ``tune`` and the CLI's ``tune`` alike: ``tuning.tune`` with Optuna's
    INFO lines quieted, the report written, and a run folder refused before any work removed again.
    Returns ``(config, run_dir, study)``. ``data_file``: the rows file written for rows given in memory (the
    only other thing such a refused folder may hold); ``created``: whether this call made the folder (None:
    it did if it does not exist yet)."""
    from judgetune import tuning

    run_dir = Path(runs_dir) / spec.name
    created = (not run_dir.exists()) if created is None else created
    extra = {key: value for key, value in (("lm", lm), ("sampler", sampler), ("storage", storage)) if value is not None}
    try:
        with _quiet_optuna():
            config, run_dir, study = tuning.tune(spec, runs_dir=runs_dir, heartbeat=heartbeat, timeout=timeout, **extra)
    except BaseException:
        keep = {".lock", *([Path(data_file).name] if data_file else [])}
        if created and run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= keep:
            shutil.rmtree(run_dir, ignore_errors=True)  # refused before any work: no run is left behind
        raise
    if report:
        from judgetune.report import write_report

        write_report(run_dir, study=study, config=config)
    return config, run_dir, study


def _check_run_settings(name: Any, settings: dict[str, Any]) -> None:
    from judgetune import tuning

    if not isinstance(name, str) or not tuning.RUN_NAME.fullmatch(name) or ".." in name:  # never a path out of runs_dir
        raise SettingsError(f"name: expected a plain run name (letters, digits, '.', '_', '-'; no path, no '..'), "
                            f"found {name!r}")
    known = sorted(set(tuning.RunSpec.__dataclass_fields__) - {"name", "judge", "data", "lm", "fields", "label"})
    unknown = sorted(set(settings) - set(known))
    if unknown:
        raise SettingsError(f"unknown setting(s) {', '.join(map(repr, unknown))}; known: {', '.join(known)}")


@contextlib.contextmanager
def _quiet_optuna() -> Iterator[None]:
    """Optuna's INFO lines (a study created, every trial finished) kept off the caller's stderr, unless asked
    for: ``logging.getLogger("judgetune").setLevel(logging.INFO)`` (the CLI's ``-v``) lets them through."""
    import logging

    import optuna

    before = optuna.logging.get_verbosity()
    quiet = before <= logging.INFO and not logging.getLogger("judgetune").isEnabledFor(logging.INFO)
    if quiet:
        optuna.logging.set_verbosity(logging.WARNING)
    try:
        yield
    finally:
        if quiet:
            optuna.logging.set_verbosity(before)


@dataclass(frozen=True)
class Picked:
    """The items to label next: ``rows`` in the input's own form (the DataFrame's rows, the dicts of a
    list, a file's items as dicts), ``picks`` (id, the default judge's score, group, why), ``summary``."""

    rows: Any
    picks: list[Any]
    summary: dict[str, Any]

    @property
    def ids(self) -> list[str]:
        return [p.id for p in self.picks]

    def to_pandas(self) -> Any:
        """The picked rows as a DataFrame."""
        return self.rows if _is_frame(self.rows) else _pandas().DataFrame(list(self.rows))


def pick(data: Any, n: int, *, labeled: Any = None, out: str | Path | None = None, judge: str = "embedding",
         lm: Any = None, seed: int = 0, fields: dict[str, str] | None = None, label: str | None = None) -> Picked:
    """The ``n`` items of ``data`` to label next (see ``judgetune.picking``): without ``labeled``, a first
    round covering the ``judge``'s score range and the data's groups or clusters; with the labels collected
    so far (``labeled``: rows with the human score, in any form ``data`` may take), the items that most
    narrow the calibrator's uncertainty. Reproducible with ``seed``.

    Args:
        data: unlabeled rows: a JSONL/CSV/TSV file, a list of dicts or a pandas DataFrame.
        n: how many to pick.
        out: a file to write the picked rows to, in the input file's format (a DataFrame or list: JSONL).
        judge: the cheap default judge whose scores are covered (an LM kind needs ``lm``).
        fields, label: your own column names, as ``tune`` takes them.

    Raises:
        JudgetuneError: bad rows (line and field), ``n`` out of range, a judge that cannot pick.

    Example:
        >>> todo = judgetune.pick(df, 50, seed=0).rows  # doctest: +SKIP
        >>> more = judgetune.pick(df, 25, labeled=labeled_df, seed=1).rows  # doctest: +SKIP
    """
    from judgetune import picking
    from judgetune.lm import load_lm

    model, owned = _lm_object(lm)
    if isinstance(lm, str):
        model, owned = load_lm(lm), True
    rows_in_memory = _rows_in_memory(data)
    if out is not None and rows_in_memory is not None and Path(out).suffix.lower() != ".jsonl":
        raise JudgetuneError(f"out {out}: expected a .jsonl file for rows held in memory")
    try:
        with tempfile.TemporaryDirectory(prefix="judgetune-pick-") as folder:
            path = _data_file(data, Path(folder))
            labeled_path = None if labeled is None else _data_file(labeled, Path(folder) / "labeled")
            picks = picking.pick_file(path, n, out=out if rows_in_memory is None else None, labeled=labeled_path,
                                      judge=judge, lm=model, seed=seed, fields=fields, label=label)
            if rows_in_memory is None:
                from judgetune.datasets import read_examples

                items = read_examples(path, require_label=False, fields=fields, label=label)
                rows: Any = [items[i].to_dict() for i in picks.indices]
    finally:
        if owned:
            model.close()
    if rows_in_memory is not None:
        rows = data.iloc[picks.indices] if _is_frame(data) else [rows_in_memory[i] for i in picks.indices]
        if out is not None:
            with atomic_write(out) as handle:
                handle.write("".join(json.dumps(rows_in_memory[i], ensure_ascii=False, default=str) + "\n"
                                     for i in picks.indices))
    return Picked(rows, list(picks.picks), picks.summary())


def estimate(judge: str | Path | FrozenJudge, data: Any, *, by: str | Sequence[str], scores: str | Path | None = None,
             labeled: Any = None, fields: dict[str, str] | None = None, label: str | None = None,
             scale: tuple[float, float] | None = None, confidence: float = 0.95, api_base: str | None = None,
             fit: str | None = None, seed: int = 0) -> Any:
    """Each system's mean on the human scale (a win rate for pairwise rows) and every pair's difference, from a
    frozen judge's scores on every row and human labels on a uniform random sample of them (PPI++), beside the
    labels-only and the judge-only figures; see ``judgetune estimate -h`` and docs/estimate.md.

    Args:
        judge: a judge.json path or a loaded ``FrozenJudge`` (it scores the rows unless ``scores`` are given).
        data: the outputs: a catalog name, a file, a list of dicts or a DataFrame, each row's system in column (or
            ``meta`` key) ``by`` ("A,B" or two names for pairwise rows), labels on some rows.
        scores: the file ``judgetune score`` wrote for ``data`` with this judge (nothing is scored again).
        labeled: labels collected apart (rows with the ids of ``data``), in any form ``data`` may take.
        confidence: the intervals' level.
        fit: ``score`` or ``signals``: a judge fitted on these same labels, cross-fitted over folds (``seed`` cuts
            them), in place of PPI++ with the frozen judge as it is; see docs/estimate.md.

    Returns:
        A pandas DataFrame: one row per system (``what`` "system") and per pair ("difference", named "B - A"),
        the judge-only, labels-only and PPI++ figures, labels worth and labels needed; ``attrs["notes"]`` holds
        what is assumed or doubtful.

    Raises:
        JudgetuneError: one system, no label, labels off the judge's scale, bad rows (one line each).
        SettingsError: a setting of the wrong type or out of range, or a file that does not exist (checked before
            anything is read; ``data`` or ``labeled`` that is no collection of rows is a JudgetuneError).

    Example:
        >>> judgetune.estimate("runs/mine/judge.json", "outputs.jsonl", by="system")  # doctest: +SKIP
    """
    from judgetune.estimating import estimate_files

    _check_estimate(judge, data, scores=scores, labeled=labeled, fields=fields, label=label, scale=scale,
                    confidence=confidence, api_base=api_base, seed=seed)
    keep_litellm_offline()
    frozen = judge if isinstance(judge, FrozenJudge) else None
    config = judge.config if frozen is not None else judge
    with tempfile.TemporaryDirectory(prefix="judgetune-estimate-") as folder:
        data_path = _data_file(data, Path(folder))
        labeled_path = None if labeled is None else _data_file(labeled, Path(folder) / "labeled")
        # rows given in memory are named "data" and "labeled" in errors (row numbers from 1), never by a temp file
        names = {path: name for path, name, given in ((data_path, "data", data), (labeled_path, "labeled", labeled))
                 if path is not None and path != str(given)}
        try:
            result = estimate_files(config, data_path, by, scores=scores, labeled=labeled_path, fields=fields,
                                    label=label, scale=scale, alpha=1 - confidence, api_base=api_base, frozen=frozen,
                                    fit=fit, seed=seed)
        except JudgetuneError as err:
            if not names or not isinstance(err, DataValidationError) and type(err) is not JudgetuneError:
                raise
            raise _renamed(err, names) from None
    return result.to_pandas()


def _check_estimate(judge: Any, data: Any, *, scores: Any, labeled: Any, fields: Any, label: Any, scale: Any,
                    confidence: Any, api_base: Any, seed: Any) -> None:
    """Refuse an argument of ``estimate`` of the wrong type or out of range, or a file that does not exist: one line
    naming the argument, what was expected and what was found (``by`` and ``fit`` are checked where they are read)."""
    from judgetune.datasets import CATALOG, describe

    if not isinstance(judge, (str, Path, FrozenJudge)):
        raise SettingsError(f"judge: expected a judge.json path or a FrozenJudge, found {type(judge).__name__}")
    for name, rows in (("data", data), ("labeled", labeled)):
        if rows is not None:
            _refuse_non_rows(rows, name, ROWS)
    if scores is not None and not isinstance(scores, (str, Path)):
        raise SettingsError(f"scores: expected the path of the file judgetune score wrote, found {type(scores).__name__}")
    for name, path in (("data", data), ("scores", scores), ("labeled", labeled)):
        catalog = name == "data"  # only the data may be a catalog source; labels and scores are the user's files
        if isinstance(path, (str, Path)) and not (catalog and str(path) in CATALOG) and not Path(path).is_file():
            raise SettingsError(f"{name}: expected an existing file{' or a catalog name' if catalog else ''}, "
                                f"found {'a folder' if Path(path).is_dir() else 'no file'} at {shown(path)}")
    if fields is not None and not (isinstance(fields, Mapping) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in fields.items())):
        raise SettingsError(f"fields: expected a dict of Example field to column name ({{'answer': 'response'}}), "
                            f"found {describe(fields)}")
    for name, text in (("label", label), ("api_base", api_base)):
        if text is not None and not isinstance(text, str):
            raise SettingsError(f"{name}: expected text, found {describe(text)}")
    if scale is not None and not (isinstance(scale, (tuple, list)) and len(scale) == 2 and all(map(_real, scale))):
        raise SettingsError(f"scale: expected (low, high), two numbers, found {describe(scale)}")
    if not _real(confidence) or not 0 < confidence < 1:
        raise SettingsError(f"confidence: expected a level between 0 and 1 such as 0.95, found {describe(confidence)}")
    _whole("seed", seed, 0, 2**32 - 1)  # the folds' RandomState takes no more


def _renamed(err: JudgetuneError, names: dict[str, str]) -> JudgetuneError:
    """``err`` with each temporary file's path replaced by the name of the rows it holds."""
    def rename(text: str) -> str:
        for path, name in names.items():
            text = text.replace(path, name)
        return text

    if isinstance(err, DataValidationError):
        return DataValidationError([rename(p) for p in err.problems])
    return JudgetuneError(rename(str(err)))


def evaluate(judge: str | FrozenJudge, data: Any, *, split: str = "test", lm: Any = "local:smollm2",
             seed: int | None = None, n_resamples: int = 1000, fields: dict[str, str] | None = None,
             label: str | None = None, **params: Any) -> Rows:
    """Rows of agreement with the human labels on one split of ``data`` (a catalog name, a file, a list of dicts or
    a DataFrame): the judge (a kind, untuned, with ``params``; or a frozen judge, calibrated) beside the trivial
    baselines, with 95% intervals. ``fields`` and ``label`` map your own columns (see
    :func:`judgetune.datasets.read_examples`); ``lm`` is a spec, a ``load_lm`` result or a ``dspy.LM``. ``seed``
    seeds the split (default 0); a frozen judge is scored on the split it was tuned on (its recorded seed; another
    ``seed`` is refused, and data it was not tuned on is said in a warning)."""
    keep_litellm_offline()
    with tempfile.TemporaryDirectory(prefix="judgetune-") as tmp:
        return Rows(_evaluate(judge, _data_file(data, Path(tmp)), split=split, lm=lm, seed=seed,
                              n_resamples=n_resamples, fields=fields, label=label, params=params))


def _evaluate(judge: str | FrozenJudge, data: str, *, split: str, lm: Any, seed: int | None, n_resamples: int,
              fields: dict[str, str] | None, label: str | None, params: dict[str, Any]) -> list[dict[str, Any]]:
    from judgetune import datasets, evaluation, stats
    from judgetune.judges import judge_class, make_judge
    from judgetune.lm import load_lm

    frozen = [judge.config] if isinstance(judge, FrozenJudge) else []
    seed = evaluation.heldout_seed(frozen, seed, split)
    evaluation.warn_other_data(frozen, data)
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
    model, owned = None, False
    if judge_class(judge).needs_lm_with(params or {}):
        model, owned = _lm_object(lm)
        if model is None:
            model, owned = load_lm(lm), True
    try:
        built = make_judge(judge, model, train=splits["train"], label_range=label_range, params=params,
                           seed=seed)
        return evaluation.evaluate_judge(built, test, train=splits["train"], label_range=label_range,
                                         n_resamples=n_resamples, seed=seed)["rows"]
    finally:
        if owned:
            model.close()


def compare(judges: Mapping[str, FrozenJudge | str | Path] | Sequence[FrozenJudge | str | Path], data: Any, *,
            split: str | None = "test", seed: int | None = None, n_resamples: int = 1000,
            fields: dict[str, str] | None = None, label: str | None = None) -> dict[str, Rows]:
    """Several frozen judges (objects or judge.json paths; a mapping names them) on the same items of ``data``:
    ``{"rows": metrics with 95% intervals per judge, "pairs": paired Wilcoxon tests on absolute errors}``.
    ``split`` None scores every labeled item; otherwise that split of the seed the judges were tuned with
    (``seed`` default 0 for untuned ones; another seed than a judge's own is refused, as are judges tuned on
    different splits; data they were not tuned on is said in a warning)."""
    from judgetune import datasets, evaluation

    keep_litellm_offline()
    named = dict(judges) if isinstance(judges, Mapping) else {
        (str(j) if isinstance(j, (str, Path)) else f"{i}: {j.config.judge}"): j for i, j in enumerate(judges)}
    configs = [j.config if isinstance(j, FrozenJudge) else JudgeConfig.load(j) for j in named.values()]
    seed = evaluation.heldout_seed(configs, seed, split)
    with tempfile.TemporaryDirectory(prefix="judgetune-") as tmp:
        path = _data_file(data, Path(tmp))
        evaluation.warn_other_data(configs, path)
        examples, label_range = datasets.load_data(path, fields=fields, label=label)
    examples = [e for e in examples if e.judgment is not None]
    if split is not None:
        examples = datasets.split_examples(examples, seed=seed)[split]
    scores = {}
    for name, judge in named.items():
        if isinstance(judge, FrozenJudge):
            scores[name] = [s.score for s in judge.score_many(examples)]
        else:
            with load(judge) as loaded:
                scores[name] = [s.score for s in loaded.score_many(examples)]
    result = evaluation.compare_scores(scores, examples, label_range=label_range, n_resamples=n_resamples, seed=seed)
    return {"rows": Rows(result["rows"]), "pairs": Rows(result["pairs"])}


