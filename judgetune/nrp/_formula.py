"""Normalized rank position (NRP): how high a generated answer ranks among human-judged documents.

A ranker scores the answer and the judged documents D_q of its query; with ``rank`` the answer's
position counted from 0 at the top (the number of documents placed above it), NRP = 1 - rank / |D_q|.
An answer above every document scores 1, one below every document scores 0.

Tie rule: an answer that scores exactly as a document is placed above it (``ties="answer-first"``,
the default, as a search engine would rank a new item given the benefit of the doubt); with
``ties="document-first"`` it is placed below it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

TIE_RULES = ("answer-first", "document-first")


def normalized_rank_position(rank: int, n_documents: int) -> float:
    """NRP = 1 - rank / |D_q|, where ``rank`` counts the documents ranked above the answer."""
    if n_documents <= 0:
        raise ValueError(f"n_documents must be positive, got {n_documents}")
    if not 0 <= rank <= n_documents:
        raise ValueError(f"rank must be in [0, {n_documents}], got {rank}")
    return 1.0 - rank / n_documents


def _check_ties(ties: str) -> None:
    if ties not in TIE_RULES:
        raise ValueError(f"ties must be one of {TIE_RULES}, got {ties!r}")


def rank_among(answer_score: float, document_scores: Sequence[float], *, ties: str = "answer-first") -> int:
    """How many documents are placed above the answer: those scoring higher, and with
    ``ties="document-first"`` also those scoring the same."""
    _check_ties(ties)
    scores = np.asarray(document_scores, dtype=float)
    above = scores > answer_score if ties == "answer-first" else scores >= answer_score
    return int(np.sum(above))


def ranks_in_sorted(answer_scores: Sequence[float], sorted_document_scores: np.ndarray, *,
                    ties: str = "answer-first") -> np.ndarray:
    """``rank_among`` for many answers at once, by binary search in the documents' scores sorted
    ascending (what a query's cached document scores are kept as)."""
    _check_ties(ties)
    side = "right" if ties == "answer-first" else "left"
    below_or_tied = np.searchsorted(sorted_document_scores, np.asarray(answer_scores, dtype=float), side=side)
    return len(sorted_document_scores) - below_or_tied


def rank_by_sorting(answer_score: float, document_scores: Sequence[float], *, ties: str = "answer-first") -> int:
    """The answer's position (0 = top) after sorting it together with the documents, best first:
    the naive way, which re-ranks |D_q| + 1 items for every answer. Equals ``rank_among``."""
    _check_ties(ties)
    answer_tiebreak = 0 if ties == "answer-first" else 1
    items = [(-float(s), 1 - answer_tiebreak, i) for i, s in enumerate(document_scores)]
    items.append((-float(answer_score), answer_tiebreak, -1))
    order = sorted(items)
    return next(position for position, item in enumerate(order) if item[2] == -1)


def answer_nrp(answer_score: float, document_scores: Sequence[float], *, ties: str = "answer-first") -> float:
    """NRP of one answer placed among its query's scored documents."""
    return normalized_rank_position(rank_among(answer_score, document_scores, ties=ties), len(document_scores))
