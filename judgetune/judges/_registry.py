"""The registry: every judge kind by name. Adding a kind is its module plus one line here."""

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
from judgetune.judges._rubric import RubricJudge
from judgetune.judges._signals import BM25Judge, LengthJudge, OverlapJudge, ReferenceSimilarityJudge
from judgetune.judges._spec import BuildContext, JudgeSpec, build, judge_class, register, registered_kinds

LM_JUDGES: dict[str, type[Judge]] = {j.kind: j for j in (FactCheckJudge, RubricJudge, CorrectnessJudge,
                                                         PairwiseJudge, LinkageJudge, LikelihoodJudge)}
TEXT_BASELINES = ("embedding", *LexicalJudge.METRICS)
# judges without an LM whose settings are their whole config (the hybrid adds its fitted model)
SIGNAL_JUDGES: dict[str, type[Judge]] = {j.kind: j for j in (BM25Judge, OverlapJudge, LengthJudge,
                                                             ReferenceSimilarityJudge, HybridJudge)}

for _kind, _cls in LM_JUDGES.items():
    register(_kind, _cls)
register("embedding", EmbeddingJudge)
for _metric in LexicalJudge.METRICS:
    register(_metric, LexicalJudge, metric=_metric)
for _kind, _cls in SIGNAL_JUDGES.items():
    register(_kind, _cls)

KINDS = registered_kinds()


def data_defaults(kind: str, examples: Sequence[Example], label_range: tuple[float, float]) -> dict[str, Any]:
    """Judge settings that fit the data when the user sets none (the tuner searches them instead)."""
    return judge_class(kind).data_defaults(examples, label_range)


def build_judge(kind: str, lm=None, **params: Any) -> Judge:
    """A judge of the named kind with these settings and no data (``build`` with an empty context but the LM).

    Raises:
        ValueError: an unknown kind or setting.
    """
    return build(JudgeSpec(kind, params), BuildContext(lm=lm))


def make_judge(kind: str, lm=None, *, train: Sequence[Example], pool: Sequence[Example],
               label_range: tuple[float, float], params: dict[str, Any] | None = None, seed: int = 0) -> Judge:
    """A judge set up for this data (``build`` of a spec with ``params``): demos drawn from ``train``,
    references from the graded answers in ``pool``, settings = data defaults overridden by ``params``;
    a kind that fits comes back fitted on ``train``."""
    return build(JudgeSpec(kind, params or {}, seed=seed),
                 BuildContext(lm=lm, train=train, pool=pool, label_range=label_range))
