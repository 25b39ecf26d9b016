"""Judge kinds by name, for the command line and frozen configs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from judgetune.datasets import Example
from judgetune.judges._base import Judge
from judgetune.judges._baselines import EmbeddingJudge, LexicalJudge
from judgetune.judges._correctness import CorrectnessJudge
from judgetune.judges._factcheck import FactCheckJudge
from judgetune.judges._hybrid import HybridJudge
from judgetune.judges._likelihood import LikelihoodJudge
from judgetune.judges._linkage import LinkageJudge
from judgetune.judges._pairwise import PairwiseJudge
from judgetune.judges._references import ReferencePool
from judgetune.judges._rubric import RubricJudge
from judgetune.judges._signals import BM25Judge, LengthJudge, OverlapJudge, ReferenceSimilarityJudge
from judgetune.lm import JudgeLM

LM_JUDGES: dict[str, type[Judge]] = {j.kind: j for j in (FactCheckJudge, RubricJudge, CorrectnessJudge,
                                                         PairwiseJudge, LinkageJudge, LikelihoodJudge)}
TEXT_BASELINES = ("embedding", *LexicalJudge.METRICS)
# judges without an LM whose settings are their whole config (the hybrid adds its fitted model)
SIGNAL_JUDGES: dict[str, type[Judge]] = {j.kind: j for j in (BM25Judge, OverlapJudge, LengthJudge,
                                                             ReferenceSimilarityJudge, HybridJudge)}
KINDS = (*LM_JUDGES, *TEXT_BASELINES, *SIGNAL_JUDGES)


def build_judge(kind: str, lm: JudgeLM | None = None, **kwargs: Any) -> Judge:
    """A judge of the named kind (``constant`` and ``random`` are built from training labels instead).

    Raises:
        ValueError: an unknown kind or setting.
    """
    if kind in LM_JUDGES:
        return LM_JUDGES[kind](lm, **kwargs)
    if kind == "embedding":
        return EmbeddingJudge(**kwargs)
    if kind in LexicalJudge.METRICS:
        return LexicalJudge(metric=kind, **kwargs)
    if kind in SIGNAL_JUDGES:
        return SIGNAL_JUDGES[kind](**kwargs)
    raise ValueError(f"unknown judge {kind!r}; known: {', '.join(KINDS)}")


def data_defaults(kind: str, examples: Sequence[Example], label_range: tuple[float, float]) -> dict[str, Any]:
    """Judge settings that fit the data when the user sets none (the tuner searches them instead)."""
    pairwise = any(ex.answer_b is not None for ex in examples)
    has_refs = any(ex.references for ex in examples)
    if kind == "pairwise":
        return {"mode": "answers" if pairwise else "references"}
    if kind == "factcheck":
        return {"direction": "correctness" if has_refs else "support"}
    if kind == "rubric" and label_range == (0.0, 5.0):
        return {"scale": "0-5"}
    return {}


def make_judge(kind: str, lm=None, *, train: Sequence[Example], pool: Sequence[Example],
               label_range: tuple[float, float], params: dict[str, Any] | None = None, seed: int = 0) -> Judge:
    """A judge set up for this data: demos drawn from ``train``, references (LINKAGE, pairwise against
    references, reference similarity) from the graded answers in ``pool``, settings = data defaults
    overridden by ``params``. A hybrid judge comes back fitted on ``train``."""
    settings = {**data_defaults(kind, [*train, *pool], label_range), **(params or {})}
    if kind in ("refsim", "hybrid"):
        settings.update(pool=ReferencePool(pool), seed=seed)
    if kind == "hybrid":  # fitted on the training examples alone (their references drawn among themselves)
        return build_judge(kind, **settings).fit(train)
    if kind not in LM_JUDGES:
        return build_judge(kind, **settings)
    extra: dict[str, Any] = {"demo_pool": list(train), "label_range": label_range, "demo_seed": seed}
    if kind in ("linkage", "pairwise"):
        extra.update(pool=ReferencePool(pool), seed=seed)
    return build_judge(kind, lm, **extra, **settings)
