"""Judges that need no LM, in the same Verdict shape: embedding cosine similarity (the bundled
all-MiniLM-L6-v2), ROUGE-1/2/L and BLEU against a reference, and the constant and random predictors.

The text a candidate is compared with (``target``): its best reference, the question, or its
context; ``auto`` takes the first of these the example has. For a pairwise example the score is the
difference answer_b minus answer, so positive means answer_b is closer.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

import numpy as np

from judgetune.datasets import Example
from judgetune.judges._base import Judge
from judgetune.judges._encoders import ENCODERS, encode, encoder_left_out
from judgetune.judges._space import Choice, Param
from judgetune.judges._verdict import Verdict

TARGETS = ("auto", "reference", "question", "context")
MAX_LCS_CELLS = 25_000_000  # ROUGE-L's table is words(answer) x words(target) cells: about 200 MB at this bound


def _words(text: str) -> int:
    """The number of tokens rouge-score makes of ``text`` (runs of ASCII letters and digits, lowercased)."""
    return sum(1 for _ in re.finditer(r"[a-z0-9]+", text.lower()))


def target_text(example: Example, target: str) -> str | None:
    texts = {"reference": example.references[0].text if example.references else None,
             "question": example.question, "context": "\n".join(example.context) if example.context else None}
    if target == "auto":
        return next((t for t in texts.values() if t), None)
    return texts[target]


class _TextSimilarityJudge(Judge):
    """Similarity of the answer to its target text; batch-computed in ``judge_all``."""

    needs_lm = False
    score_range = (0.0, 1.0)

    @classmethod
    def space(cls) -> list[Param]:
        return [Choice("target", TARGETS, "auto")]

    def similarities(self, pairs: Sequence[tuple[str, str]]) -> list[float | None]:
        """One similarity per (answer, target) pair; None for a pair too large to compare."""
        raise NotImplementedError

    def forward(self, example: Example) -> Verdict:
        return self.judge_all([example])[0]

    def judge_all(self, examples: Sequence[Example], *, progress: bool = False) -> list[Verdict]:
        pairs, slots = [], []
        for ex in examples:
            target = target_text(ex, self.params["target"])
            answers = [ex.answer] if ex.answer_b is None else [ex.answer, ex.answer_b]
            if target is None:
                slots.append(None)
                continue
            slots.append((len(pairs), len(answers)))
            pairs.extend((answer, target) for answer in answers)
        sims = self.similarities(pairs) if pairs else []
        verdicts = []
        for slot in slots:
            if slot is None:
                verdicts.append(Verdict.failed(f"no {self.params['target']} text to compare the answer with"))
                continue
            start, n = slot
            if any(s is None for s in sims[start:start + n]):  # a pair too long to compare (ROUGE-L's bound)
                verdicts.append(Verdict.failed(f"answer and {self.params['target']} too long for {self.kind}: more "
                                               f"than {MAX_LCS_CELLS:,} word pairs (its cost grows with their product)"))
                continue
            score = sims[start] if n == 1 else sims[start + 1] - sims[start]
            verdicts.append(Verdict(float(score), {}, True, "", {}, {"similarities": sims[start:start + n]}))
        return verdicts

    def range_for(self, examples: Sequence[Example]) -> tuple[float, float]:
        return (-1.0, 1.0) if any(ex.answer_b is not None for ex in examples) else self.score_range


class EmbeddingJudge(_TextSimilarityJudge):
    """Cosine similarity of sentence embeddings: all-MiniLM-L6-v2 by default, or all-mpnet-base-v2
    (``model=mpnet``); embeddings are cached on disk (see ``_encoders``)."""

    kind = "embedding"

    @classmethod
    def left_out(cls, examples: Sequence[Example]) -> dict[str, tuple[str, str]]:
        """Without the optional mpnet encoder the encoder is not searched."""
        return encoder_left_out()

    @classmethod
    def space(cls) -> list[Param]:
        return [*super().space(), Choice("model", ENCODERS, "minilm")]

    def similarities(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        texts = sorted({t for pair in pairs for t in pair})
        vectors = encode(self.params["model"], texts)
        index = {t: i for i, t in enumerate(texts)}
        return [float(np.dot(vectors[index[a]], vectors[index[b]])) for a, b in pairs]


class LexicalJudge(_TextSimilarityJudge):
    """ROUGE (F-measure, Google's ``rouge-score`` with stemming) or sentence BLEU (``sacrebleu``, 0-1)."""

    METRICS = ("rouge1", "rouge2", "rougeL", "bleu")

    def __init__(self, lm=None, *, metric: str = "rougeL", **params):
        if metric not in self.METRICS:
            raise ValueError(f"lexical metric must be one of {self.METRICS}, got {metric!r}")
        self.metric = self.kind = metric  # before the base class checks settings under this name
        super().__init__(lm, **params)

    def similarities(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        if self.metric == "bleu":
            from sacrebleu.metrics import BLEU

            bleu = BLEU(effective_order=True)
            return [bleu.sentence_score(a, [b]).score / 100 for a, b in pairs]
        from rouge_score import rouge_scorer

        scorer = rouge_scorer.RougeScorer([self.metric], use_stemmer=True)
        return [None if self.metric == "rougeL" and _words(a) * _words(b) > MAX_LCS_CELLS
                else scorer.score(b, a)[self.metric].fmeasure for a, b in pairs]

    def settings(self) -> dict:
        return {**super().settings(), "metric": self.metric}


class ConstantJudge(Judge):
    """Always the same score: by convention the median of the training labels."""

    kind = "constant"
    needs_lm = False

    def __init__(self, lm=None, *, value: float, score_range: tuple[float, float]):
        super().__init__(lm)
        self.value, self._range = float(value), score_range

    @property
    def score_range(self) -> tuple[float, float]:
        return self._range

    @classmethod
    def from_labels(cls, labels: Sequence[float], score_range: tuple[float, float]) -> ConstantJudge:
        return cls(value=float(np.median(np.asarray(labels, dtype=float))), score_range=score_range)

    def forward(self, example: Example) -> Verdict:
        return Verdict(self.value)

    def settings(self) -> dict:
        return {**super().settings(), "value": self.value}


class RandomJudge(Judge):
    """A label drawn from the training labels (same marginal distribution), seeded per example id,
    so an example gets the same draw whatever else is judged."""

    kind = "random"
    needs_lm = False

    def __init__(self, lm=None, *, labels: Sequence[float], score_range: tuple[float, float], seed: int = 0):
        super().__init__(lm)
        if not labels:
            raise ValueError("the random judge needs at least one training label to draw from")
        self.labels, self._range, self.seed = [float(x) for x in labels], score_range, seed

    @property
    def score_range(self) -> tuple[float, float]:
        return self._range

    def forward(self, example: Example) -> Verdict:
        return Verdict(random.Random(f"{self.seed}:{example.id}").choice(self.labels))

    def settings(self) -> dict:
        return {**super().settings(), "seed": self.seed}
