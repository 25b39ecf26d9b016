"""Rankers for NRP: pointwise scorers of a text against a query.

A ranker's score of an item must not depend on the other items scored in the same call. That is what
lets NRP score each query's documents once and place every answer with one more call.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from judgetune.datasets import Example
from judgetune.errors import JudgetuneError
from judgetune.nrp._data import Collection

Item = tuple[str, str]  # (item id, text)


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
        from judgetune.judges import EmbeddingJudge

        judge = EmbeddingJudge(target="question")
        return cls("embedding", lambda examples: [v.score for v in judge.judge_all(examples)])

    @classmethod
    def from_config(cls, path: str | Path, *, name: str | None = None) -> JudgeRanker:
        """A frozen judge config's calibrated score (``judgetune tune`` writes one as runs/NAME/judge.json)."""
        from judgetune.config import JudgeConfig, load_config_lm, score_examples

        config = JudgeConfig.load(path)
        if config.judge == "bm25" or (config.judge == "hybrid" and not config.build_judge(None).scores_alone):
            raise JudgetuneError(f"{path}: this {config.judge} judge scores an answer relative to the others judged "
                                 "with it (normalization within a question, or BM25 over the batch), but NRP scores "
                                 "each answer alone: use the bm25 ranker, or a hybrid frozen with normalization=global "
                                 "and use_bm25=false")
        lm = load_config_lm(config)
        return cls(name or f"judge:{Path(path).parent.name or Path(path).stem}",
                   lambda examples: score_examples(config, examples, lm)[1])


class BM25Ranker(Ranker):
    """Okapi BM25 (Lucene's idf) of the query terms in a text, with document frequencies and the
    average length taken from the collection's judged documents, fixed at ``fit``; bm25s tokenizes
    (lower case, English stop words removed)."""

    name = "bm25"

    def __init__(self, *, k1: float = 1.5, b: float = 0.75):
        super().__init__()
        self.k1, self.b = k1, b
        self.document_frequency: Counter[str] = Counter()
        self.n_documents, self.average_length = 0, 0.0

    @staticmethod
    def tokenize(texts: Sequence[str]) -> list[list[str]]:
        try:
            import bm25s
        except ImportError:
            raise JudgetuneError("the bm25 ranker needs bm25s: pip install bm25s") from None
        return bm25s.tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)

    def fit(self, collection: Collection) -> BM25Ranker:
        tokens = self.tokenize([d.text for d in collection.documents])
        self.document_frequency = Counter(t for doc in tokens for t in set(doc))
        self.n_documents = len(tokens)
        self.average_length = sum(map(len, tokens)) / max(1, len(tokens))
        return self

    def idf(self, term: str) -> float:
        df = self.document_frequency.get(term, 0)
        return math.log(1 + (self.n_documents - df + 0.5) / (df + 0.5))

    def _score(self, query_id: str, query: str, items: Sequence[Item]) -> list[float | None]:
        if not self.n_documents:
            raise JudgetuneError("the bm25 ranker must be fitted on a collection first")
        terms = self.tokenize([query])[0]
        scores = []
        for tokens in self.tokenize([text for _, text in items]):
            tf, norm = Counter(tokens), self.k1 * (1 - self.b + self.b * len(tokens) / self.average_length)
            scores.append(float(sum(self.idf(t) * tf[t] * (self.k1 + 1) / (tf[t] + norm) for t in terms if tf[t])))
        return scores


def make_ranker(spec: str, collection: Collection) -> Ranker:
    """A ranker from its command-line name: ``embedding``, ``bm25``, ``judge:CONFIG.json``,
    ``scores:FILE`` (precomputed, JSONL or CSV) or the name of scores shipped with the data (``monot5``)."""
    from judgetune.nrp._data import read_scores

    kind, _, arg = spec.partition(":")
    if spec == "embedding":
        ranker: Ranker = JudgeRanker.embedding()
    elif spec == "bm25":
        ranker = BM25Ranker()
    elif kind == "judge" and arg:
        ranker = JudgeRanker.from_config(arg)
    elif kind == "scores" and arg:
        ranker = PrecomputedRanker(f"scores:{Path(arg).name}", read_scores(arg))
    elif spec in collection.scores:
        ranker = PrecomputedRanker(spec, collection.scores[spec])
    else:
        shipped = "".join(f", {n}" for n in collection.scores)
        raise JudgetuneError(f"unknown ranker {spec!r}: expected embedding, bm25, judge:CONFIG.json, "
                             f"scores:FILE{shipped}")
    return ranker.fit(collection)
