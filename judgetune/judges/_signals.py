"""Cheap signal judges (no LM), each in the Verdict shape so it can be evaluated, tuned, frozen and
combined by the hybrid judge: BM25, lexical overlap, answer length, and similarity to graded references.

Each scores a batch at once in ``judge_all``. For a pairwise example (one with ``answer_b``) the
score is answer_b's minus answer's, as for the other text baselines.
"""

from __future__ import annotations

import functools
import logging
import math
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np

from judgetune.datasets import Example, Reference
from judgetune.judges._base import Judge
from judgetune.judges._baselines import target_text
from judgetune.judges._encoders import ENCODERS, encode, encoder_left_out
from judgetune.judges._references import ReferencePool
from judgetune.judges._space import Choice, IntRange, Param
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


class BM25Scorer:
    """BM25 of texts for a query under a fixed corpus's term statistics, so that a text's score does not
    depend on the texts scored with it. The scoring is bm25s's Lucene variant (its idf and term-frequency
    functions, k1=1.5, b=0.75) over :func:`terms`, as in the ``bm25`` judge; on the corpus's own
    documents it gives bm25s's scores. A query term the corpus lacks weighs its Lucene idf at df = 0.
    """

    def __init__(self, corpus: Sequence[str], *, k1: float = 1.5, b: float = 0.75):
        # private on purpose: bm25s 0.3.16 has no public per-term idf/tf weights; BM25.get_scores scores indexed docs only
        from bm25s.scoring import _score_idf_lucene, _score_tfc_lucene

        self._idf, self._tfc, self.k1, self.b = _score_idf_lucene, _score_tfc_lucene, k1, b
        tokens = terms(corpus) if corpus else []
        self._terms: dict[str, list[str]] = dict(zip(corpus, tokens))  # texts are scored again and again in NRP
        self.n_documents = len(tokens)
        self.average_length = sum(map(len, tokens)) / max(1, len(tokens))
        self.document_frequency = Counter(t for doc in tokens for t in set(doc))

    def scores(self, query: str, texts: Sequence[str]) -> list[float]:
        new = [t for t in dict.fromkeys([query, *texts]) if t not in self._terms]
        self._terms.update(zip(new, terms(new) if new else []))
        query_terms = self._terms[query]
        idf = {t: self._idf(self.document_frequency.get(t, 0), self.n_documents) for t in set(query_terms)}
        out = []
        for text in texts:
            tokens = self._terms[text]
            tf = Counter(tokens)
            out.append(float(sum(idf[t] * self._tfc(tf[t], len(tokens), self.average_length, self.k1, self.b)
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


class BM25Judge(_BatchSignal):
    """BM25 (bm25s, Lucene variant, k1=1.5, b=0.75) of the answer for its question (or reference) as the query.

    The corpus whose statistics BM25 uses is the answers judged together, per group: a question's
    candidates are scored against each other, as a retrieval engine would see them. An ungrouped
    item is its own corpus of one or two answers.
    """

    kind = "bm25"
    score_range = (0.0, 50.0)  # BM25 is unbounded above; 50 is beyond what passage-length texts reach
    scores_alone = False  # the corpus is the batch

    @classmethod
    def space(cls) -> list[Param]:
        return [Choice("target", ("auto", "question", "reference"), "auto")]

    def judge_all(self, examples: Sequence[Example], *, progress: bool = False) -> list[Verdict]:
        import bm25s

        logging.getLogger("bm25s").setLevel(logging.WARNING)  # it logs every index it builds
        verdicts: list[Verdict | None] = [None] * len(examples)
        by_group: dict[str, list[int]] = defaultdict(list)
        for i, ex in enumerate(examples):
            if target_text(ex, self.params["target"]) is None:
                verdicts[i] = Verdict.failed(f"no {self.params['target']} text to use as the query")
            else:
                by_group[ex.group_key].append(i)
        for members in by_group.values():
            docs = list(dict.fromkeys(a for i in members for a in _answers(examples[i])))
            retriever = bm25s.BM25()
            retriever.index(bm25s.tokenize(docs, stopwords="en", stemmer=_stem_words(), show_progress=False),
                            show_progress=False)
            index = {d: k for k, d in enumerate(docs)}
            queries = {target_text(examples[i], self.params["target"]) for i in members}
            query_terms = {q: terms([q])[0] for q in queries}
            scores = {q: retriever.get_scores(t) for q, t in query_terms.items() if t}
            for i in members:
                query = target_text(examples[i], self.params["target"])
                if query not in scores:
                    verdicts[i] = Verdict.failed(f"the {self.params['target']} text has no content terms "
                                                 f"(only stopwords or punctuation): {query!r}")
                    continue
                row = scores[query]
                values = [float(row[index[a]]) for a in _answers(examples[i])]
                verdicts[i] = Verdict(_combine(values), detail={"bm25": values})
        return verdicts


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

    References are the example's own graded ones (two or more), else ``per_grade`` of each grade
    drawn from the other graded answers of its question (``pool``, seeded, never the candidate).
    ``readout`` says what the score is: ``expected`` is the grade expected under a softmax of the
    per-grade similarities (temperature ``0.05``), ``best`` .. ``fourth`` the similarity to the
    best, second-best ... grade present (a missing position takes the lowest grade present).
    ``detail["by_grade"]`` always holds the similarity for each of the four positions.
    """

    kind = "refsim"
    TEMPERATURE = 0.05
    uses_references = True

    def __init__(self, lm=None, *, pool: ReferencePool | None = None, seed: int = 0, **params):
        super().__init__(lm, **params)
        self.pool, self.seed = pool or ReferencePool(), seed

    @classmethod
    def left_out(cls, examples: Sequence[Example]) -> dict[str, tuple[str, str]]:
        """Without the optional mpnet encoder the encoder is not searched."""
        return encoder_left_out()

    @classmethod
    def space(cls) -> list[Param]:
        return [Choice("model", ENCODERS, "minilm"), Choice("readout", ("expected", *GRADE_POSITIONS), "expected"),
                IntRange("per_grade", 1, 2, 1)]

    score_range = (-1.0, 1.0)

    def range_for(self, examples: Sequence[Example]) -> tuple[float, float]:
        """Cosine range for a grade position; for ``expected``, the range of the grades the references carry."""
        if self.params["readout"] != "expected":
            return super().range_for(examples)
        grades = [float(r.grade) for ex in examples for r in self.references_for(ex)] or [0.0, 1.0]
        low, high = min(grades), max(grades) if max(grades) > min(grades) else min(grades) + 1
        return (low - high, high - low) if any(ex.answer_b is not None for ex in examples) else (low, high)

    def references_for(self, example: Example) -> tuple[Reference, ...]:
        own = tuple(r for r in example.references if r.grade is not None)
        if len(own) >= 2:
            return own
        return self.pool.sample(example, per_grade=self.params["per_grade"], seed=self.seed)

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

    def settings(self) -> dict:
        return {**super().settings(), "seed": self.seed}
