"""NRP (normalized rank position): rank generated answers among human-judged documents.

The formula is in ``_formula.py``; readers in ``_data.py``; rankers in ``_rankers.py``; the run
(validate rankers, place answers, summarize, expert agreement) in ``_run.py``.
"""

from judgetune.nrp._data import (
    ANSWER_SETS,
    Answer,
    Collection,
    Document,
    read_clef_ehealth,
    read_folder,
    read_scores,
)
from judgetune.nrp._formula import (
    TIE_RULES,
    answer_nrp,
    normalized_rank_position,
    rank_among,
    rank_by_sorting,
    ranks_in_sorted,
)
from judgetune.nrp._rankers import BM25Ranker, JudgeRanker, PrecomputedRanker, Ranker, make_ranker
from judgetune.nrp._run import (
    Placement,
    expert_agreement,
    place_answers,
    run_nrp,
    score_documents,
    summarize,
    validate,
)

__all__ = ["ANSWER_SETS", "TIE_RULES", "Answer", "BM25Ranker", "Collection", "Document", "JudgeRanker", "Placement",
           "PrecomputedRanker", "Ranker", "answer_nrp", "expert_agreement", "make_ranker", "normalized_rank_position",
           "place_answers", "rank_among", "rank_by_sorting", "ranks_in_sorted", "read_clef_ehealth", "read_folder",
           "read_scores", "run_nrp", "score_documents", "summarize", "validate"]
