"""Cheap signal judges (no LM), each in the Verdict shape so it can be evaluated, tuned, frozen and
combined by the hybrid judge: BM25, lexical overlap, answer length, and similarity to graded references.

Each scores a batch at once in ``judge_all``. For a pairwise example (one with ``answer_b``) the
score is answer_b's minus answer's, as for the other text baselines.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Annotated

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, ValidationError

from judgetune.datasets import Example, Reference
from judgetune.judges._base import Judge
from judgetune.judges._baselines import target_text
from judgetune.judges._encoders import ENCODERS, encode, encoder_left_out
from judgetune.judges._space import Choice, Param
from judgetune.judges._verdict import Verdict

GRADE_POSITIONS = ("best", "second", "third", "fourth")


@functools.lru_cache(maxsize=1)
def _stem_words():
    from nltk.stem.porter import PorterStemmer

    stem = PorterStemmer().stem
    return lambda words: [stem(w) for w in words]


def terms(texts: Sequence[str]) -> list[list[str]]:
    """Lower-cased, English-stopword-free, Porter-stemmed word tokens (bm25s's tokenizer)."""
    import bm25s

    return bm25s.tokenize(list(texts), stopwords="en", stemmer=_stem_words(), return_ids=False, show_progress=False)


def _answers(example: Example) -> list[str]:
    return [example.answer] if example.answer_b is None else [example.answer, example.answer_b]


def _combine(values: Sequence[float]) -> float:
    """One answer's value, or answer_b's minus answer's for a pair."""
    return float(values[0]) if len(values) == 1 else float(values[1] - values[0])


def own_graded(example: Example) -> tuple[Reference, ...]:
    """The graded references an item carries (two or more; none otherwise)."""
    own = tuple(r for r in example.references if r.grade is not None)
    return own if len(own) >= 2 else ()


class BM25Scorer:
    """BM25 of texts for a query under a fixed corpus's term statistics, so that a text's score does not
    depend on the texts scored with it. The scoring is bm25s's Lucene variant (its idf and term-frequency
    functions, k1=1.5, b=0.75) over :func:`terms`, as in the ``bm25`` judge; on the corpus's own
    documents it gives bm25s's scores. A query term the corpus lacks weighs its Lucene idf at df = 0;
    with an empty corpus every term weighs the same and a text's length is its own average.
    ``stats()`` is the corpus statistics as plain JSON; ``from_stats`` rebuilds the scorer from them.
    """

    def __init__(self, corpus: Sequence[str] = (), *, k1: float = 1.5, b: float = 0.75):
        # private on purpose: bm25s 0.3.16 has no public per-term idf/tf weights; BM25.get_scores scores indexed docs only
        from bm25s.scoring import _score_idf_lucene, _score_tfc_lucene

        self._idf, self._tfc, self.k1, self.b = _score_idf_lucene, _score_tfc_lucene, k1, b
        corpus = list(corpus)
        tokens = terms(corpus) if corpus else []
        self._terms: dict[str, list[str]] = dict(zip(corpus, tokens))  # texts are scored again and again in NRP
        self.n_documents = len(tokens)
        self.average_length = sum(map(len, tokens)) / max(1, len(tokens))
        self.document_frequency = Counter(t for doc in tokens for t in set(doc))

    def stats(self) -> dict:
        return {"n_documents": self.n_documents, "average_length": self.average_length,
                "document_frequency": dict(sorted(self.document_frequency.items()))}

    @classmethod
    def from_stats(cls, stats: dict, *, k1: float = 1.5, b: float = 0.75) -> BM25Scorer:
        scorer = cls(k1=k1, b=b)
        scorer.n_documents, scorer.average_length = int(stats["n_documents"]), float(stats["average_length"])
        scorer.document_frequency = Counter(stats["document_frequency"])
        return scorer

    def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        new = [t for t in dict.fromkeys([query, *texts]) if t not in self._terms]
        self._terms.update(zip(new, terms(new) if new else []))
        query_terms = self._terms[query]
        idf = {t: self._idf(self.document_frequency.get(t, 0), self.n_documents) for t in set(query_terms)}
        out = []
        for text in texts:
            tokens = self._terms[text]
            tf = Counter(tokens)
            average = self.average_length if self.n_documents else max(1, len(tokens))
            out.append(float(sum(idf[t] * self._tfc(tf[t], len(tokens), average, self.k1, self.b)
                                 for t in query_terms if tf[t])))
        return out


class _BatchSignal(Judge):
    """A judge without an LM whose ``forward`` is a batch of one."""

    needs_lm = False

    def forward(self, example: Example) -> Verdict:
        return self.judge_all([example])[0]

    def range_for(self, examples: Sequence[Example]) -> tuple[float, float]:
        low, high = self.score_range
        if any(ex.answer_b is not None for ex in examples):
            return (low - high, high - low)
        return self.score_range


class BM25Stats(BaseModel):
    """A fitted BM25 judge's corpus statistics, as ``BM25Scorer.stats`` writes them (judge.json's ``fitted``)."""

    model_config = ConfigDict(extra="forbid", strict=True)
    n_documents: NonNegativeInt
    average_length: Annotated[float, Field(ge=0, allow_inf_nan=False)]
    document_frequency: dict[str, PositiveInt]


class BM25Judge(_BatchSignal):
    """BM25 (bm25s's Lucene variant, k1=1.5, b=0.75) of the answer for its question (or reference) as the query.

    The corpus statistics (document frequencies, average length) are those of the training answers,
    frozen at ``fit`` into the fitted state, so an item's score depends on it alone. Built without
    training data the corpus is empty: every query term weighs the same.
    """

    kind = "bm25"
    fits = True
    score_range = (0.0, 50.0)  # BM25 is unbounded above; 50 is beyond what passage-length texts reach

    def __init__(self, lm=None, *, fitted: dict | None = None, **params):
        super().__init__(lm, **params)
        if fitted is not None:
            self.check_fitted(fitted)
        self.fitted_ = fitted if fitted is not None else BM25Scorer().stats()
        self._scorer = BM25Scorer.from_stats(self.fitted_)

    @classmethod
    def space(cls) -> list[Param]:
        return [Choice("target", ("auto", "question", "reference"), "auto")]

    @classmethod
    def check_fitted(cls, fitted: dict) -> None:
        try:
            BM25Stats.model_validate(fitted)
        except ValidationError as err:
            detail = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in err.errors())
            raise ValueError("fitted: expected BM25 corpus statistics {n_documents: integer, average_length: number, "
                             f"document_frequency: {{term: positive integer}}}} ({detail})") from None

    def fit(self, examples: Sequence[Example]) -> BM25Judge:
        """Freeze the corpus statistics of the training examples' answers."""
        docs = list(dict.fromkeys(a for ex in examples for a in _answers(ex)))
        self.fitted_ = BM25Scorer(docs).stats()
        self._scorer = BM25Scorer.from_stats(self.fitted_)
        return self

    def judge_all(self, examples: Sequence[Example], *, progress: bool = False) -> list[Verdict]:
        verdicts = []
        for ex in examples:
            query = target_text(ex, self.params["target"])
            if query is None:
                verdicts.append(Verdict.failed(f"no {self.params['target']} text to use as the query"))
            elif not terms([query])[0]:
                verdicts.append(Verdict.failed(f"the {self.params['target']} text has no content terms "
                                               f"(only stopwords or punctuation): {query!r}"))
            else:
                values = self._scorer.scores(query, _answers(ex))
                verdicts.append(Verdict(_combine(values), detail={"bm25": values}))
        return verdicts

    def settings(self) -> dict:
        return {**super().settings(), "fitted": self.fitted_}

    def spec(self):
        return replace(super().spec(), fitted=self.fitted_)


class OverlapJudge(_BatchSignal):
    """Share of the target's content terms (stemmed, stopwords out) that the answer contains, 0-1."""

    kind = "overlap"
    score_range = (0.0, 1.0)

    @classmethod
    def space(cls) -> list[Param]:
        return [Choice("target", ("auto", "question", "reference"), "auto")]

    def judge_all(self, examples: Sequence[Example], *, progress: bool = False) -> list[Verdict]:
        verdicts = []
        for ex in examples:
            target = target_text(ex, self.params["target"])
            if target is None:
                verdicts.append(Verdict.failed(f"no {self.params['target']} text to compare the answer with"))
                continue
            wanted, *answers = terms([target, *_answers(ex)])
            wanted_set = set(wanted)
            if not wanted_set:
                verdicts.append(Verdict.failed(f"the {self.params['target']} text has no content terms "
                                               f"(only stopwords or punctuation): {target!r}"))
                continue
            values = [len(wanted_set & set(a)) / len(wanted_set) for a in answers]
            verdicts.append(Verdict(_combine(values), detail={"overlap": values}))
        return verdicts


class LengthJudge(_BatchSignal):
    """log(1 + number of words) of the answer: how much it says, nothing about what."""

    kind = "length"
    score_range = (0.0, 10.0)

    def judge_all(self, examples: Sequence[Example], *, progress: bool = False) -> list[Verdict]:
        return [Verdict(_combine([math.log1p(len(a.split())) for a in _answers(ex)])) for ex in examples]


class ReferenceSimilarityJudge(_BatchSignal):
    """How close the answer is to the references of each grade: the maximum cosine similarity
    (sentence embeddings) to the references of that grade.

    References are the ones the example carries (two or more graded ones; under the LINKAGE protocol,
    the list drawn for its question); an item without them fails. No other item is read.
    ``readout`` says what the score is: ``expected`` is the grade expected under a softmax of the
    per-grade similarities (temperature ``0.05``), ``best`` .. ``fourth`` the similarity to the
    best, second-best ... grade present (a missing position takes the lowest grade present).
    ``detail["by_grade"]`` always holds the similarity for each of the four positions.
    """

    kind = "refsim"
    TEMPERATURE = 0.05

    @classmethod
    def left_out(cls, examples: Sequence[Example]) -> dict[str, tuple[str, str]]:
        """Without the optional mpnet encoder the encoder is not searched."""
        return encoder_left_out()

    @classmethod
    def space(cls) -> list[Param]:
        return [Choice("model", ENCODERS, "minilm"), Choice("readout", ("expected", *GRADE_POSITIONS), "expected")]

    score_range = (-1.0, 1.0)

    def range_for(self, examples: Sequence[Example]) -> tuple[float, float]:
        """Cosine range for a grade position; for ``expected``, the range of the grades the references carry."""
        if self.params["readout"] != "expected":
            return super().range_for(examples)
        grades = [float(r.grade) for ex in examples for r in self.references_for(ex)] or [0.0, 1.0]
        low, high = min(grades), max(grades) if max(grades) > min(grades) else min(grades) + 1
        return (low - high, high - low) if any(ex.answer_b is not None for ex in examples) else (low, high)

    def references_for(self, example: Example) -> tuple[Reference, ...]:
        return own_graded(example)

    def judge_all(self, examples: Sequence[Example], *, progress: bool = False) -> list[Verdict]:
        refs = [self.references_for(ex) for ex in examples]
        # only items with two grades to compare are encoded: the others fail below without a vector
        texts = sorted({t for ex, rs in zip(examples, refs) if len({float(r.grade) for r in rs}) >= 2
                        for t in [*_answers(ex), *(r.text for r in rs)]})
        vectors = encode(self.params["model"], texts) if texts else None
        index = {t: i for i, t in enumerate(texts)}
        verdicts = []
        for ex, rs in zip(examples, refs):
            grades = sorted({float(r.grade) for r in rs}, reverse=True)
            if len(grades) < 2:
                verdicts.append(Verdict.failed("fewer than two graded references to compare the answer with"))
                continue
            per_answer = []
            for answer in _answers(ex):
                a = vectors[index[answer]]
                sims = [max(float(np.dot(a, vectors[index[r.text]])) for r in rs if float(r.grade) == g)
                        for g in grades]
                per_answer.append(sims)
            values, positions = [], []
            for sims in per_answer:
                weights = np.exp((np.asarray(sims) - max(sims)) / self.TEMPERATURE)
                weights /= weights.sum()
                by_position = [sims[min(k, len(sims) - 1)] for k in range(len(GRADE_POSITIONS))]
                positions.append(by_position)
                if self.params["readout"] == "expected":
                    values.append(float(np.dot(weights, grades)))
                else:
                    values.append(by_position[GRADE_POSITIONS.index(self.params["readout"])])
            last = per_answer[-1]
            weights = np.exp((np.asarray(last) - max(last)) / self.TEMPERATURE)
            distribution = {f"{g:g}": float(w) for g, w in zip(grades, weights / weights.sum())}
            by_grade = positions[0] if len(positions) == 1 else [b - a for a, b in zip(*positions)]
            verdicts.append(Verdict(_combine(values), distribution,
                                    detail={"by_grade": by_grade, "grades": grades, "references": len(rs)}))
        return verdicts
