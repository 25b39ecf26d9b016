"""Normalized rank position (NRP): how high a generated answer ranks among human-judged documents.

A ranker scores the answer and the judged documents D_q of its query; with ``rank`` the number of
documents ranked above the answer, NRP = 1 - rank / |D_q|. An answer above every document scores 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def normalized_rank_position(rank: int, n_documents: int) -> float:
    """NRP = 1 - rank / |D_q|, where ``rank`` counts the documents ranked above the answer."""
    if n_documents <= 0:
        raise ValueError(f"n_documents must be positive, got {n_documents}")
    if not 0 <= rank <= n_documents:
        raise ValueError(f"rank must be in [0, {n_documents}], got {rank}")
    return 1.0 - rank / n_documents


def rank_among(answer_score: float, document_scores: Sequence[float]) -> int:
    """How many documents score strictly higher than the answer (ties favour the answer)."""
    return int(np.sum(np.asarray(document_scores, dtype=float) > answer_score))


def answer_nrp(answer_score: float, document_scores: Sequence[float]) -> float:
    """NRP of one answer placed among its query's scored documents."""
    return normalized_rank_position(rank_among(answer_score, document_scores), len(document_scores))
