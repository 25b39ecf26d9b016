"""Judges: DSPy modules that map an Example to a Verdict, the baselines in the same shape, and the one
builder (``build``: a ``JudgeSpec`` plus a ``BuildContext`` gives a judge)."""

from judgetune.judges._adapter import ForcedChoiceAdapter
from judgetune.judges._base import Judge, LMJudge, pick_demos
from judgetune.judges._baselines import ConstantJudge, EmbeddingJudge, LexicalJudge, RandomJudge, target_text
from judgetune.judges._correctness import CorrectnessJudge
from judgetune.judges._encoders import ENCODERS, MPNET_PARTS, EmbeddingCache, encode, mpnet_available, mpnet_path
from judgetune.judges._factcheck import FactCheckJudge, parse_fact_list
from judgetune.judges._hybrid import LM_SIGNALS, SIGNALS, HybridJudge, HybridModel
from judgetune.judges._likelihood import LikelihoodJudge
from judgetune.judges._linkage import LinkageJudge, position_labels, position_to_score
from judgetune.judges._pairwise import PairwiseJudge
from judgetune.judges._prompting import distribution_after_marker, forced_choice
from judgetune.judges._references import GeneratedReferences, ReferencePool
from judgetune.judges._registry import KINDS, LM_JUDGES, build_judge, data_defaults, make_judge
from judgetune.judges._rubric import RubricJudge
from judgetune.judges._signals import BM25Judge, BM25Scorer, LengthJudge, OverlapJudge, ReferenceSimilarityJudge
from judgetune.judges._space import Choice, IntRange, Param, check_params, defaults
from judgetune.judges._spec import BuildContext, JudgeSpec, build, judge_class, register
from judgetune.judges._verdict import Verdict, add_usage

__all__ = ["ENCODERS", "KINDS", "LM_JUDGES", "LM_SIGNALS", "MPNET_PARTS", "SIGNALS", "BM25Judge", "BM25Scorer",
           "BuildContext", "Choice", "ConstantJudge", "CorrectnessJudge", "EmbeddingCache", "EmbeddingJudge",
           "FactCheckJudge", "ForcedChoiceAdapter", "GeneratedReferences", "HybridJudge", "HybridModel", "IntRange",
           "Judge", "JudgeSpec", "LMJudge", "LengthJudge", "LexicalJudge", "LikelihoodJudge", "LinkageJudge",
           "OverlapJudge", "PairwiseJudge", "Param", "RandomJudge", "ReferencePool", "ReferenceSimilarityJudge",
           "RubricJudge", "Verdict", "add_usage", "build", "build_judge", "check_params", "data_defaults", "defaults",
           "distribution_after_marker", "encode", "forced_choice", "judge_class", "make_judge", "mpnet_available",
           "mpnet_path", "parse_fact_list", "pick_demos", "position_labels", "position_to_score", "register",
           "target_text"]
