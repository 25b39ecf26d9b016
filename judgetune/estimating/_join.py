"""Joining other files onto an estimate's rows by id: the scores ``judgetune score`` wrote for the data file
(``id`` and the calibrated ``score``, null for a failed judgment), and a file of labels collected later (the
picked rows, labeled). Every row of the data needs its score, every score and every label a row of the data;
anything else is refused with its line.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np

from judgetune.datasets import delimiter_hint, describe
from judgetune.errors import DataValidationError, JudgetuneError
from judgetune.estimating._arrow import fast_scores
from judgetune.estimating._rows import PROBABILITY, Observations, _number, _take, is_nan, no_gc, probability, records

__all__ = ["join_labels", "join_scores", "refuse_other_judge", "scored_by"]

_SHOWN = 3  # rows named in a one-line error about many


_FIELDS_ROWS = 100  # the rows whose fields a score file with no score at all is described by


def _index(obs: Observations) -> dict[str, int]:
    return {row_id: i for i, row_id in enumerate(obs.ids)}


def _named(ids: list[str]) -> str:
    more = f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else ""
    return ", ".join(map(repr, ids[:_SHOWN])) + more


def join_scores(obs: Observations, path: str | Path) -> None:
    """Set ``obs.scores`` from a score file (JSONL, CSV or Parquet as ``judgetune score`` writes it).

    Raises:
        DataValidationError: a score of no row, a row without a score, a repeated id, a score that is no number, a
            file with no score at all (no score column, or every judgment failed).
    """
    fast = fast_scores(obs, path)
    if fast is not None and not np.isnan(fast).all():  # no score at all: the row-by-row join says what is wrong
        obs.scores = fast
        return
    path, problems = Path(path), []
    index, scores, seen = _index(obs), np.full(len(obs), np.nan), np.zeros(len(obs), dtype=bool)
    strangers: list[str] = []
    columns: dict[str, None] = {}  # the fields of the first rows, to name when no row has a score
    with no_gc():
        for line, record in records(path, problems):
            if line <= _FIELDS_ROWS:
                columns.update(dict.fromkeys(record))
            row_id, score = record.get("id"), record.get("score")
            i = index.get(row_id if row_id.__class__ is str else str(row_id))
            if i is None:
                strangers.append(str(row_id))
                continue
            if seen[i]:
                problems.append(f"{path}:{line}: id: expected each id once, found {row_id!r} again")
            seen[i] = True
            scores[i] = score if score.__class__ is float else _number(score, (path, line), "score", problems)
    if not problems and seen.any() and np.isnan(scores[seen]).all():
        # a score file's rows carry ``parsed`` (a CSV or Parquet reader leaves an empty score out of the row)
        found = ("no score on any row (every judgment failed)" if "score" in columns or "parsed" in columns else
                 f"no score field on any row (fields: {', '.join(map(repr, columns))})")
        problems.insert(0, f"{path}: score: expected the scores `judgetune score` writes, found {found}: give the "
                           "file judgetune score wrote for this data (a judge whose every judgment failed has no "
                           "estimate to add)")
    if strangers:
        problems.append(f"{path}: id: expected the ids of {obs.where}, found {len(strangers)} score(s) of no row "
                        f"there ({_named(strangers)}): score this data file, or give the data file that was scored")
    missing = [obs.ids[i] for i in np.flatnonzero(~seen)]
    if missing:
        problems.append(f"{path}: expected a score for every row of {obs.where}, found none for {len(missing)} "
                        f"({_named(missing)}): score the whole file (judgetune score resumes an interrupted run)")
    if problems:
        raise DataValidationError(problems)
    obs.scores = scores


def join_labels(obs: Observations, path: str | Path, *, fields: dict[str, str] | None = None,
                label: str | None = None) -> int:
    """Add the labels of ``path`` (rows with an ``id`` of the data, the label, and the sampling probability
    when recorded) to ``obs``; returns how many were added. A row whose label is null or empty adds none, but a
    file with no label at all is refused: it is the wrong file, or its label column has another name.

    Raises:
        DataValidationError: a label of no row, a repeated id, a label that is no number or contradicts the data's
            own, a file without an id column or without a single label.
    """
    path, problems, rows, added = Path(path), [], 0, 0
    index, first_line, columns = _index(obs), {}, {}
    name = label or ("preference" if obs.pairwise else "label")
    key = (fields or {}).get("id", "id")
    no_id: list[str] = []  # a row without the id column: one line for all when no row has one
    labeled = 0
    for line, record in records(path, problems, fields=fields, label=label):
        where, rows = f"{path}:{line}", rows + 1
        columns.update(dict.fromkeys(record))
        row_id = record.get(key)
        if row_id is None:
            no_id.append(f"{where}: {key}: expected the id of a row of {obs.where} (the picked file carries each "
                         "row's), found nothing")
            continue
        i = index.get(str(row_id)) if isinstance(row_id, (str, int)) and not isinstance(row_id, bool) else None
        if i is None:
            problems.append(f"{where}: {key}: expected the id of a row of {obs.where} (the picked file carries "
                            f"each row's), found {describe(row_id)}")
            continue
        if i in first_line:
            problems.append(f"{where}: {key}: expected each id once, found {row_id!r} again (first on line "
                            f"{first_line[i]})")
            continue
        first_line[i] = line
        value = record.get(name)
        if is_nan(value):
            obs.nan_labels += 1
            continue
        value = _number(value, where, name, problems)
        if math.isnan(value):
            continue
        labeled += 1
        if not math.isnan(obs.labels[i]) and obs.labels[i] != value:
            problems.append(f"{where}: {name}: expected the label {obs.where} gives row {obs.ids[i]!r} "
                            f"({obs.labels[i]:g}) or none, found {value:g}")
            continue
        chance = probability(_take(record, PROBABILITY), where, problems)
        added += math.isnan(obs.labels[i])
        obs.labels[i] = value
        obs.label_where[i] = where
        if not math.isnan(chance):
            obs.probabilities[i] = chance
    found = ", ".join(map(repr, columns)) or "no column"
    if rows and len(no_id) == rows:
        problems.insert(0, f"{path}: {key}: expected an id column (the picked file carries each row's id), found "
                           f"{found}{_delimiter_hint(columns, path)}")
    else:
        problems[:0] = no_id
    if not problems and not labeled:
        what = "any row" if rows else "a row: the file is empty"
        problems.append(f"{path}: {name}: expected a label on at least one row, found none in {what} (columns: "
                        f"{found}); fill in the labels, or name their column with --label COLUMN")
    if problems:
        raise DataValidationError(problems)
    return added


def _delimiter_hint(columns: dict[str, None], path: Path) -> str:
    """The readers' hint for a CSV or TSV file whose one column holds another delimiter."""
    kind = path.suffix.lower().lstrip(".")
    return delimiter_hint(list(columns), kind) if kind in ("csv", "tsv") else ""


def scored_by(scores: str | Path, config_dict: dict) -> bool | None:
    """Whether the finished score file ``scores`` was written by the judge ``config_dict`` (its record beside the
    file, ``.NAME.done``, names the judge's fingerprint: the SHA-256 of its sorted JSON); None when there is no
    such record."""
    scores = Path(scores)
    marker = scores.with_name(f".{scores.name}.done")  # judgetune.scoring's record of a finished output
    try:
        done = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(done, dict) or "judge" not in done:
        return None
    text = json.dumps(config_dict, sort_keys=True, ensure_ascii=True).encode("ascii")
    return done["judge"] == hashlib.sha256(text).hexdigest()


def refuse_other_judge(scores: str | Path, config_dict: dict, config_path: str) -> None:
    """Refuse a score file whose record names another judge than ``config_path``.

    Raises:
        JudgetuneError: the scores were written by another judge.
    """
    if scored_by(scores, config_dict) is False:
        raise JudgetuneError(f"--scores {scores}: written by another judge than {config_path} (its record "
                             f".{Path(scores).name}.done names another judge.json); give the judge that scored it")
