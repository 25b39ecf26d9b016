"""Judges: DSPy modules that map an Example to a Verdict, the baselines in the same shape, the one
builder (``build``: a ``JudgeSpec`` plus a ``BuildContext`` gives a judge) over a live registry, and
the protocols under which an item's score may depend on other items (``apply_protocol``)."""

from judgetune.judges._adapter import ForcedChoiceAdapter
from judgetune.judges._base import Judge, LMJudge, pick_demos
from judgetune.judges._baselines import ConstantJudge, EmbeddingJudge, LexicalJudge, RandomJudge, target_text
from judgetune.judges._checklist import COMBINERS, ChecklistError, ChecklistJudge, parse_checklist
from judgetune.judges._correctness import CorrectnessJudge
from judgetune.judges._encoders import ENCODERS, MPNET_PARTS, EmbeddingCache, encode, mpnet_available, mpnet_path
from judgetune.judges._factcheck import FactCheckJudge, parse_fact_list
from judgetune.judges._hybrid import LM_SIGNALS, SIGNALS, HybridJudge, signal_features
from judgetune.judges._hybrid_model import HybridModel
from judgetune.judges._likelihood import LikelihoodJudge
from judgetune.judges._linkage import LinkageJudge, position_labels, position_to_score
from judgetune.judges._pairwise import PairwiseJudge
from judgetune.judges._panel import MAX_MEMBERS, PanelJudge, member_record
from judgetune.judges._prompting import distribution_after_marker, forced_choice
from judgetune.judges._protocols import (
    PROTOCOLS,
    ProtocolDraw,
    apply_protocol,
    draw_references,
    require_groups,
)
from judgetune.judges._references import GeneratedReferences, ReferencePool
from judgetune.judges._registry import (
    KINDS,
    LM_JUDGES,
    build,
    build_judge,
    check_settings,
    data_defaults,
    judge_class,
    make_judge,
    register,
    registered_kinds,
)
from judgetune.judges._rubric import RubricJudge
from judgetune.judges._signals import BM25Judge, BM25Scorer, LengthJudge, OverlapJudge, ReferenceSimilarityJudge
from judgetune.judges._space import Choice, IntRange, Param, check_params, defaults
from judgetune.judges._spec import BuildContext, JudgeSpec
from judgetune.judges._verdict import Verdict, add_usage

__all__ = ["COMBINERS", "ENCODERS", "KINDS", "LM_JUDGES", "LM_SIGNALS", "MAX_MEMBERS", "MPNET_PARTS", "PROTOCOLS", "SIGNALS",
           "BM25Judge", "BM25Scorer", "BuildContext", "ChecklistError", "ChecklistJudge", "Choice", "ConstantJudge",
           "CorrectnessJudge", "EmbeddingCache", "EmbeddingJudge", "FactCheckJudge", "ForcedChoiceAdapter",
           "GeneratedReferences", "HybridJudge", "HybridModel", "IntRange", "Judge", "JudgeSpec", "LMJudge",
           "LengthJudge", "LexicalJudge", "LikelihoodJudge", "LinkageJudge", "OverlapJudge", "PairwiseJudge",
           "PanelJudge", "Param", "ProtocolDraw", "RandomJudge", "ReferencePool", "ReferenceSimilarityJudge",
           "RubricJudge", "Verdict",
           "add_usage", "apply_protocol", "build", "build_judge", "check_params", "check_settings", "data_defaults",
           "defaults", "distribution_after_marker", "draw_references", "encode", "forced_choice", "judge_class",
           "make_judge", "member_record", "mpnet_available", "mpnet_path", "parse_checklist", "parse_fact_list",
           "pick_demos", "position_labels", "position_to_score", "register", "registered_kinds", "require_groups",
           "target_text"]
__all__ += ["signal_features"]
