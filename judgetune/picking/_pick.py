"""Which items to label next: score every item with a cheap default judge, then pick a first round
that covers its score range and the data's groups (``cover``), or, once labels exist, the items that
most narrow the calibrator's uncertainty (``narrow``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from judgetune.datasets import Example, read_examples, read_labeled
from judgetune.errors import JudgetuneError
from judgetune.judges import build_judge, encode, judge_class
from judgetune.picking._coverage import cover
from judgetune.picking._rows import read_rows
from judgetune.picking._uncertainty import narrow

__all__ = ["MAX_CLUSTERS", "Pick", "Picks", "pick_examples", "pick_file"]

log = logging.getLogger(__name__)
MAX_CLUSTERS = 20


@dataclass(frozen=True)
class Pick:
    """One item to label: its position among the input's rows, id, the default judge's score, the
    group or cluster it was counted in, and why it was picked."""

    index: int
    id: str
    score: float
    group: str
    reason: str


@dataclass(frozen=True)
class Picks:
    """The picks of one round, in the order they were chosen, and how the round went."""

    picks: list[Pick]
    round: str  # "first" (no labels yet) or "next" (labels given)
    judge: str
    pool: int  # unlabeled items picks were drawn from
    labeled: int  # labeled items the round took into account
    unscored: list[str] = field(default_factory=list)  # ids the default judge failed on (placed at the median)

    @property
    def ids(self) -> list[str]:
        return [p.id for p in self.picks]

    @property
    def indices(self) -> list[int]:
        return [p.index for p in self.picks]

    def summary(self) -> dict[str, Any]:
        return {"round": self.round, "judge": self.judge, "picked": len(self.picks), "pool": self.pool,
                "labeled": self.labeled, "groups": len({p.group for p in self.picks}),
                "score_range": [min(p.score for p in self.picks), max(p.score for p in self.picks)] if self.picks else None,
                "unscored": len(self.unscored)}


def _content(example: Example) -> tuple:
    """An item's text, to recognise a labeled copy of it whatever its id."""
    return (example.question, example.answer, example.answer_b, tuple(r.text for r in example.references),
            example.context)


def default_scores(examples: Sequence[Example], judge: str, lm: Any) -> tuple[np.ndarray, list[int]]:
    """The default judge's score of every item; failed items take the median (their indices returned).

    Raises:
        JudgetuneError: a judge that fits on labels, or one that fails on more than half of the items.
    """
    cls = judge_class(judge)
    if cls.fits:
        raise JudgetuneError(f"pick: the {judge} judge is fitted on labels; pick with a judge that needs none "
                             "(embedding, rougeL, length, likelihood, rubric, ...)")
    if cls.needs_groups_with({}):
        raise JudgetuneError(f"pick: the {judge} judge compares items within a group; pick with a judge that scores "
                             "an item alone")
    if cls.needs_lm and lm is None:
        raise JudgetuneError(f"pick: the {judge} judge needs an LM (pass --lm SPEC, e.g. local:smollm2)")
    verdicts = build_judge(judge, lm if cls.needs_lm else None).judge_all(list(examples), progress=True)
    failed = [i for i, v in enumerate(verdicts) if not v.parsed]
    if len(failed) > len(examples) / 2:
        raise JudgetuneError(f"pick: the {judge} judge could not score {len(failed)} of {len(examples)} items (the "
                             f"first: {verdicts[failed[0]].raw}); pick with another --judge (length needs only the "
                             "answer)")
    scores = np.asarray([v.score if v.parsed else np.nan for v in verdicts], dtype=float)
    if failed:
        log.warning("pick: the %s judge failed on %d item(s) (the first: %s); they are placed at the median score",
                    judge, len(failed), verdicts[failed[0]].raw)
        scores[failed] = float(np.nanmedian(scores))
    return scores, failed


def groups_or_clusters(examples: Sequence[Example], k: int, *, seed: int) -> list[str]:
    """Each item's group when the data has groups of several items; else its cluster among ``k``
    k-means clusters of the answers' MiniLM embeddings (seeded)."""
    keys = [e.group_key for e in examples]
    if any(e.group is not None for e in examples) and len(set(keys)) < len(keys):
        return keys
    k = max(1, min(k, len(examples)))
    if k == 1:
        return ["cluster:0"] * len(examples)
    from sklearn.cluster import KMeans

    texts = [e.answer if e.answer_b is None else f"{e.answer}\n{e.answer_b}" for e in examples]
    vectors = encode("minilm", texts)
    labels = KMeans(n_clusters=k, random_state=seed, n_init=4).fit_predict(np.asarray(vectors))
    return [f"cluster:{c}" for c in labels]


def pick_examples(pool: Sequence[Example], n: int, *, labeled: Sequence[Example] = (), judge: str = "embedding",
                  lm: Any = None, seed: int = 0) -> Picks:
    """``n`` items of ``pool`` to label next (an item of ``pool`` that ``labeled`` holds, by id or by
    text, is never picked). Without labels: the first round (``cover``); with labels: ``narrow``.

    Raises:
        JudgetuneError: ``n`` below 1 or above the unlabeled items, or a judge that cannot pick.
    """
    known_ids, known_texts = {e.id for e in labeled}, {_content(e) for e in labeled}
    free = [i for i, e in enumerate(pool) if e.id not in known_ids and _content(e) not in known_texts]
    if n < 1:
        raise JudgetuneError(f"pick: --n must be at least 1, got {n}")
    if n > len(free):
        raise JudgetuneError(f"pick: --n {n} is more than the {len(free)} unlabeled items of the input "
                             f"({len(pool) - len(free)} of its {len(pool)} are labeled already)")
    items = [pool[i] for i in free] + list(labeled)
    scores, failed = default_scores(items, judge, lm)
    groups = groups_or_clusters(items, min(MAX_CLUSTERS, max(2, n // 2)), seed=seed)
    m = len(free)
    unscored = [items[i].id for i in failed]
    if not labeled:
        chosen = cover(scores[:m].tolist(), groups[:m], n, seed=seed)
        order = sorted(range(m), key=lambda i: scores[i])
        stratum = {i: r * n // m for r, i in enumerate(order)}
        picks = [Pick(free[i], pool[free[i]].id, float(scores[i]), groups[i],
                      f"score stratum {stratum[i] + 1} of {n}") for i in chosen]
        return Picks(picks, "first", judge, m, 0, unscored)
    y = [e.judgment for e in labeled]
    if any(v is None for v in y):
        raise JudgetuneError("pick: every labeled item needs its label")
    chosen = narrow(scores[:m].tolist(), groups[:m], scores[m:].tolist(), y, groups[m:], n, seed=seed)
    picks = [Pick(free[i], pool[free[i]].id, float(scores[i]), groups[i], f"calibrator uncertainty (pick {r + 1})")
             for r, i in enumerate(chosen)]
    return Picks(picks, "next", judge, m, len(labeled), unscored)


def pick_file(path: str | Path, n: int, *, out: str | Path | None = None, labeled: str | Path | None = None,
              judge: str = "embedding", lm: Any = None, seed: int = 0, fields: dict[str, str] | None = None,
              label: str | None = None) -> Picks:
    """Pick ``n`` rows of the data file ``path`` (labels not needed) and write them to ``out`` in the same
    format (same columns, values untouched). ``labeled``: a file of the labels collected so far (same
    columns, with the human score); rows of ``path`` that carry a label count as labeled too.

    Raises:
        DataValidationError: a bad row of either file (file, line, field).
        JudgetuneError: bad options (see ``pick_examples``), or ``out`` of another format than ``path``.
    """
    path = Path(path)
    if out is not None and Path(out).suffix.lower() != path.suffix.lower():
        raise JudgetuneError(f"--out {out}: expected a {path.suffix} file, the input's format")
    pool = read_examples(path, require_label=False, fields=fields, label=label)
    rows = read_rows(path)
    if len(rows) != len(pool):  # the two readers disagree on what a row is: say so, never write wrong rows
        raise JudgetuneError(f"{path}: read {len(pool)} items but {len(rows)} rows; write the file as JSONL")
    known = read_labeled(labeled, fields=fields, label=label)[0] if labeled is not None else []
    # rows of --data that carry a label are labeled already: they inform the next round and are never picked
    in_data = [e for e in pool if e.judgment is not None and e.id not in {k.id for k in known}]
    picks = pick_examples(pool, n, labeled=[*known, *in_data], judge=judge, lm=lm, seed=seed)
    if out is not None:
        rows.write(out, picks.indices)
    return picks
