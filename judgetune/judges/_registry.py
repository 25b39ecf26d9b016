"""Judge kinds by name, for the command line and frozen configs."""

from __future__ import annotations

from typing import Any

from judgetune.judges._base import Judge
from judgetune.judges._baselines import ConstantJudge, EmbeddingJudge, LexicalJudge, RandomJudge
from judgetune.judges._correctness import CorrectnessJudge
from judgetune.judges._factcheck import FactCheckJudge
from judgetune.judges._hybrid import HybridJudge
from judgetune.judges._linkage import LinkageJudge
from judgetune.judges._pairwise import PairwiseJudge
from judgetune.judges._rubric import RubricJudge
from judgetune.judges._signals import BM25Judge, LengthJudge, OverlapJudge, ReferenceSimilarityJudge
from judgetune.lm import JudgeLM

LM_JUDGES: dict[str, type[Judge]] = {j.kind: j for j in (FactCheckJudge, RubricJudge, CorrectnessJudge,
                                                         PairwiseJudge, LinkageJudge)}
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


__all__ = ["KINDS", "LM_JUDGES", "SIGNAL_JUDGES", "TEXT_BASELINES", "ConstantJudge", "RandomJudge", "build_judge"]
