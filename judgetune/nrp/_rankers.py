"""Rankers for NRP: pointwise scorers of a text against a query.

A ranker's score of an item must not depend on the other items scored in the same call. That is what
lets NRP score each query's documents once and place every answer with one more call.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from judgetune.datasets import Example
from judgetune.errors import JudgetuneError
from judgetune.judges import BM25Scorer, JudgeSpec, build
from judgetune.nrp._data import Collection

Item = tuple[str, str]  # (item id, text)
SHIPPED = ("monot5",)  # the precomputed rankers of the catalog's CLEF eHealth data


class Ranker(ABC):
    """Scores items of one query; a higher score ranks higher. ``None`` marks an item the ranker
    could not score (a failed judgment): it is reported, never ranked as a zero.

    ``calls`` counts the items scored so far, the unit of cost the NRP benchmark compares.
    """

    name: str

    def __init__(self) -> None:
        self.calls = 0

    def fit(self, collection: Collection) -> Ranker:
        """Read what the ranker needs from the collection before scoring (e.g. term statistics); no-op by default."""
        return self

    def score(self, query_id: str, query: str, items: Sequence[Item]) -> list[float | None]:
        self.calls += len(items)
        return self._score(query_id, query, items)

    @abstractmethod
    def _score(self, query_id: str, query: str, items: Sequence[Item]) -> list[float | None]:
        """One score per item, in order."""


class PrecomputedRanker(Ranker):
    """Scores looked up by (query id, item id), e.g. the monoT5 scores shipped with the NRP paper."""

    def __init__(self, name: str, scores: dict[tuple[str, str], float]):
        super().__init__()
        self.name, self.scores = name, scores

    def _score(self, query_id: str, query: str, items: Sequence[Item]) -> list[float | None]:
        missing = [i for i, _ in items if (query_id, i) not in self.scores]
        if missing:
            raise JudgetuneError(f"ranker {self.name}: no score for query {query_id}, item(s) {missing[:5]}"
                                 f"{' ...' if len(missing) > 5 else ''}")
        return [self.scores[(query_id, i)] for i, _ in items]


class JudgeRanker(Ranker):
    """A judge's pointwise score of (query, text): ``score_examples`` maps Examples to scores."""

    def __init__(self, name: str, score_examples: Callable[[list[Example]], list[float | None]]):
        super().__init__()
        self.name, self.score_examples = name, score_examples

    def _score(self, query_id: str, query: str, items: Sequence[Item]) -> list[float | None]:
        examples = [Example(id=f"{query_id}/{i}", question=query, answer=text, group=query_id) for i, text in items]
        return self.score_examples(examples)

    @classmethod
    def embedding(cls) -> JudgeRanker:
        """Cosine of the bundled all-MiniLM-L6-v2 embeddings of the query and the text."""
        judge = build(JudgeSpec("embedding", {"target": "question"}))
        return cls("embedding", lambda examples: [v.score for v in judge.judge_all(examples)])

    @classmethod
    def from_config(cls, path: str | Path, *, name: str | None = None) -> JudgeRanker:
        """A frozen judge config's calibrated score (``judgetune tune`` writes one as runs/NAME/judge.json)."""
        from judgetune.config import JudgeConfig
        from judgetune.scoring import load_config_lm, score_examples

        config = JudgeConfig.load(path)
        lm = load_config_lm(config)
        if not config.build_judge(lm).scores_alone:
            raise JudgetuneError(f"{path}: this {config.judge} judge scores an answer relative to the others judged "
                                 "with it (normalization within a question: the group protocol), but NRP scores "
                                 "each answer alone: use a hybrid frozen with normalization=global")
        return cls(name or f"judge:{Path(path).parent.name or Path(path).stem}",
                   lambda examples: score_examples(config, examples, lm)[1])


class BM25Ranker(Ranker):
    """BM25 of the query in a text (``judges.BM25Scorer``: bm25s's Lucene scoring over the ``bm25``
    judge's stemmed, stopword-free terms), with the term statistics of the collection's judged
    documents, fixed at ``fit``."""

    name = "bm25"

    def __init__(self) -> None:
        super().__init__()
        self.scorer: BM25Scorer | None = None

    def fit(self, collection: Collection) -> BM25Ranker:
        self.scorer = BM25Scorer([d.text for d in collection.documents])
        return self

    def _score(self, query_id: str, query: str, items: Sequence[Item]) -> list[float | None]:
        if self.scorer is None:
            raise JudgetuneError("the bm25 ranker must be fitted on a collection first")
        return list(self.scorer.scores(query, [text for _, text in items]))


def make_ranker(spec: str, collection: Collection, *, query_ids: Iterable[str] | None = None) -> Ranker:
    """A ranker from its command-line name: ``embedding``, ``bm25``, ``judge:CONFIG.json``,
    ``scores:FILE`` (precomputed, JSONL or CSV; a query outside ``query_ids``, default the collection's, is
    refused) or the name of scores shipped with the data (``monot5``)."""
    from judgetune.nrp._data import read_scores

    kind, _, arg = spec.partition(":")
    if spec == "embedding":
        ranker: Ranker = JudgeRanker.embedding()
    elif spec == "bm25":
        ranker = BM25Ranker()
    elif kind == "judge" and arg:
        ranker = JudgeRanker.from_config(arg)
    elif kind == "scores" and arg:
        if not Path(arg).is_file():
            raise JudgetuneError(f"--ranker {spec}: no such file (expected a .jsonl or .csv file of query_id, id, "
                                 "score)")
        ranker = PrecomputedRanker(f"scores:{Path(arg).name}",
                                   read_scores(arg, collection.queries if query_ids is None else query_ids))
    elif spec in collection.scores:
        ranker = PrecomputedRanker(spec, collection.scores[spec])
    elif spec in SHIPPED:
        raise JudgetuneError(f"--ranker {spec}: its scores ship only with --data nrp-clef-ehealth; for other data, "
                             "pass precomputed scores as scores:FILE")
    else:
        shipped = "".join(f", {n}" for n in collection.scores)
        raise JudgetuneError(f"unknown ranker {spec!r}: expected embedding, bm25, judge:CONFIG.json, "
                             f"scores:FILE{shipped}")
    return ranker.fit(collection)
