"""NRP end to end: validate rankers on the judged documents, place every answer among its query's
documents, summarize per system x prompt, and measure agreement with expert orderings."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from judgetune._progress import progress as progress_lines
from judgetune.errors import JudgetuneError
from judgetune.nrp._data import Collection
from judgetune.nrp._formula import normalized_rank_position, rank_by_sorting, ranks_in_sorted
from judgetune.nrp._rankers import Ranker
from judgetune.stats import bootstrap_interval, ndcg, rbo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Placement:
    """One answer placed among its query's documents; ``rank`` and ``nrp`` are None when the ranker
    failed to score the answer."""

    query_id: str
    answer_id: str
    system: str
    prompt: str
    score: float | None
    rank: int | None
    n_documents: int
    nrp: float | None


def score_documents(ranker: Ranker, collection: Collection, *, progress: bool = False) -> dict[str, dict[str, float]]:
    """Query id -> {doc id: score}, each document scored once. Documents the ranker failed on are left
    out of their query's D_q and logged."""
    scored = {}
    for qid, docs in progress_lines(sorted(collection.documents_by_query().items()), desc=f"{ranker.name}: documents",
                                    enabled=progress):
        scores = ranker.score(qid, collection.queries[qid], [(d.doc_id, d.text) for d in docs])
        failed = [d.doc_id for d, s in zip(docs, scores) if s is None]
        if failed:
            log.warning("%s: query %s: %d document(s) could not be scored and are left out: %s",
                        ranker.name, qid, len(failed), failed)
        scored[qid] = {d.doc_id: float(s) for d, s in zip(docs, scores) if s is not None}
    return scored


def validate(collection: Collection, document_scores: dict[str, dict[str, float]], *, k: int = 10) -> dict:
    """nDCG@k of the ranker's document order per quality dimension, averaged over queries."""
    result = {}
    for dimension in collection.dimensions:
        pred, gold, groups = [], [], []
        for doc in collection.documents:
            score = document_scores.get(doc.query_id, {}).get(doc.doc_id)
            if dimension in doc.judgments and score is not None:
                pred.append(score)
                gold.append(doc.judgments[dimension])
                groups.append(doc.query_id)
        result[dimension] = ndcg(pred, gold, groups, k=k).value if pred else None
    return result


def place_answers(ranker: Ranker, collection: Collection, document_scores: dict[str, dict[str, float]], *,
                  ties: str = "answer-first", naive: bool = False, progress: bool = False) -> list[Placement]:
    """Every answer's rank among its query's documents.

    The default costs one ranker call per answer: the answer's score is placed by binary search among
    the query's cached document scores. ``naive=True`` re-scores the |D_q| documents with every
    answer and sorts the |D_q| + 1 items, as a ranker without a cache would; it gives the same ranks.
    """
    by_query: dict[str, list] = defaultdict(list)
    for answer in collection.answers:
        by_query[answer.query_id].append(answer)
    placements = []
    for qid, answers in progress_lines(sorted(by_query.items()), desc=f"{ranker.name}: answers",
                                       enabled=progress):
        query, docs = collection.queries[qid], document_scores.get(qid, {})
        if not docs:
            raise JudgetuneError(f"query {qid}: no scored document to place its answers among")
        if naive:
            texts = {d.doc_id: d.text for d in collection.documents if d.query_id == qid and d.doc_id in docs}
            ranks, scores = [], []
            for a in answers:
                fresh = ranker.score(qid, query, [*texts.items(), (a.answer_id, a.text)])
                scores.append(fresh[-1])
                ranks.append(None if None in fresh else rank_by_sorting(fresh[-1], fresh[:-1], ties=ties))
        else:
            scores = ranker.score(qid, query, [(a.answer_id, a.text) for a in answers])
            ok = [s for s in scores if s is not None]
            placed = iter(ranks_in_sorted(ok, np.sort(np.fromiter(docs.values(), float)), ties=ties).tolist())
            ranks = [None if s is None else next(placed) for s in scores]
        for a, score, rank in zip(answers, scores, ranks):
            nrp = None if rank is None else normalized_rank_position(rank, len(docs))
            placements.append(Placement(qid, a.answer_id, a.system, a.prompt, score, rank, len(docs), nrp))
    return placements


def mean_interval(values: Sequence[float], groups: Sequence[str], *, n_resamples: int = 1000,
                  seed: int = 0) -> tuple[float, float, float]:
    """Mean of ``values`` with a 95% bootstrap interval that resamples whole queries (answers to one
    query are not independent)."""
    interval = bootstrap_interval(lambda v, _: float(v.mean()), values, values, groups, n_resamples=n_resamples,
                                  seed=seed)
    return float(np.mean(values)), interval.low, interval.high


def summarize(placements: Sequence[Placement], *, n_resamples: int = 1000, seed: int = 0) -> list[dict]:
    """One row per system x prompt: answers, failed judgments, mean NRP and its interval; best first."""
    cells: dict[tuple[str, str], list[Placement]] = defaultdict(list)
    for p in placements:
        cells[(p.system, p.prompt)].append(p)
    rows = []
    for (system, prompt), cell in cells.items():
        ok = [p for p in cell if p.nrp is not None]
        mean = low = high = None
        if ok:
            mean, low, high = mean_interval([p.nrp for p in ok], [p.query_id for p in ok],
                                            n_resamples=n_resamples, seed=seed)
        rows.append({"system": system, "prompt": prompt, "n": len(ok), "failed": len(cell) - len(ok),
                     "nrp_mean": mean, "nrp_low": low, "nrp_high": high})
    return sorted(rows, key=lambda r: (r["nrp_mean"] is None, -(r["nrp_mean"] or 0), r["system"], r["prompt"]))


def expert_agreement(expert: dict[str, list[str]], item_scores: dict[tuple[str, str], float], *,
                     p: float = 1.0) -> dict:
    """Per expert-ordered query: the expert's order (best first) against the same items sorted by the
    ranker's score, descending (ties in the expert's order); RBO at ``p`` and Kendall's tau, averaged.
    Queries with an unscored item are skipped and counted."""
    rbos, taus, skipped = [], [], []
    for qid, ranking in sorted(expert.items()):
        if any((qid, i) not in item_scores for i in ranking):
            skipped.append(qid)
            continue
        system = sorted(ranking, key=lambda i: -item_scores[(qid, i)])
        rbos.append(rbo(ranking, system, p=p))
        position = {i: n for n, i in enumerate(system)}
        tau = stats.kendalltau(range(len(ranking)), [position[i] for i in ranking]).statistic
        taus.append(float(tau))
    if not rbos:
        return {"rbo": None, "kendall": None, "topics": 0, "skipped": skipped, "p": p}
    return {"rbo": float(np.mean(rbos)), "kendall": float(np.mean(taus)), "topics": len(rbos), "skipped": skipped,
            "p": p}


def _expert_item_scores(ranker: Ranker, collection: Collection,
                        document_scores: dict[str, dict[str, float]]) -> dict[tuple[str, str], float]:
    """The ranker's scores of every item the expert ordered: documents from the cache, answers scored."""
    scores = {(q, d): s for q, docs in document_scores.items() for d, s in docs.items()}
    texts = collection.item_texts()
    for qid, ranking in sorted(collection.expert.items()):
        items = [(i, texts[(qid, i)]) for i in ranking if (qid, i) not in scores]
        if items:
            fresh = ranker.score(qid, collection.queries[qid], items)
            scores.update({(qid, i): s for (i, _), s in zip(items, fresh) if s is not None})
    return scores


def run_nrp(collection: Collection, rankers: Sequence[Ranker], *, select_by: str = "relevance",
            ties: str = "answer-first", rbo_p: float = 1.0, naive: bool = False, n_resamples: int = 1000,
            seed: int = 0, progress: bool = False) -> dict:
    """Validate every ranker on the documents, rank the answers with the best (by nDCG@10 on
    ``select_by``, a quality dimension or ``mean``), and summarize.

    Returns ``{"rankers": [{name, ndcg@10, agreement, calls, seconds}], "chosen", "systems": [...],
    "agreement": {rbo, kendall, topics} (when the collection has expert orderings), "answers": [...]}``.
    """
    if not rankers:
        raise JudgetuneError("no ranker given")
    if not collection.answers:
        raise JudgetuneError("no answers to place")
    if select_by != "mean" and select_by not in collection.dimensions:
        raise JudgetuneError(f"--select-by {select_by}: expected mean or one of {', '.join(collection.dimensions)}")
    table, document_scores = [], {}
    for ranker in rankers:
        start = time.perf_counter()
        document_scores[ranker.name] = score_documents(ranker, collection, progress=progress)
        values = validate(collection, document_scores[ranker.name])
        defined = [v for v in values.values() if v is not None]
        row = {"name": ranker.name, "ndcg@10": values, "mean": float(np.mean(defined)) if defined else None}
        if collection.expert:
            row["agreement"] = expert_agreement(collection.expert, _expert_item_scores(
                ranker, collection, document_scores[ranker.name]), p=rbo_p)
        table.append({**row, "seconds": time.perf_counter() - start})

    def key(row: dict) -> float:
        value = row["mean"] if select_by == "mean" else row["ndcg@10"].get(select_by)
        return -np.inf if value is None else value

    best = max(range(len(rankers)), key=lambda i: key(table[i]))
    chosen = rankers[best]
    calls_before, start = chosen.calls, time.perf_counter()
    placements = place_answers(chosen, collection, document_scores[chosen.name], ties=ties, naive=naive,
                               progress=progress)
    result = {"rankers": table, "chosen": chosen.name, "select_by": select_by, "ties": ties,
              "placement": {"naive": naive, "ranker_calls": chosen.calls - calls_before,
                            "seconds": time.perf_counter() - start},
              "systems": summarize(placements, n_resamples=n_resamples, seed=seed),
              "answers": [asdict(p) for p in placements]}
    if collection.expert:  # rankers score each item alone, so the chosen ranker's validation row holds it
        result["agreement"] = table[best]["agreement"]
    return result
