"""Judges: DSPy modules that map an Example to a Verdict, and the baselines in the same shape."""

from judgetune.judges._base import Judge, LMJudge, pick_demos
from judgetune.judges._baselines import ConstantJudge, EmbeddingJudge, LexicalJudge, RandomJudge
from judgetune.judges._correctness import CorrectnessJudge
from judgetune.judges._factcheck import FactCheckJudge, parse_fact_list
from judgetune.judges._linkage import LinkageJudge, position_labels, position_to_score
from judgetune.judges._pairwise import PairwiseJudge
from judgetune.judges._prompting import distribution_after_marker, forced_choice
from judgetune.judges._references import GeneratedReferences, ReferencePool
from judgetune.judges._registry import KINDS, LM_JUDGES, TEXT_BASELINES, build_judge
from judgetune.judges._rubric import RubricJudge
from judgetune.judges._space import Choice, IntRange, Param, check_params, defaults
from judgetune.judges._verdict import Verdict

__all__ = ["KINDS", "LM_JUDGES", "TEXT_BASELINES", "Choice", "ConstantJudge", "CorrectnessJudge", "EmbeddingJudge",
           "FactCheckJudge", "GeneratedReferences", "IntRange", "Judge", "LMJudge", "LexicalJudge", "LinkageJudge",
           "PairwiseJudge", "Param", "RandomJudge", "ReferencePool", "RubricJudge", "Verdict", "build_judge",
           "check_params", "defaults", "distribution_after_marker", "forced_choice", "parse_fact_list", "pick_demos",
           "position_labels", "position_to_score"]
