"""RAG diagnostics: RAGChecker's claim-level metrics for the retriever and the generator.

Claims are extracted from the response and from the gold answer; each claim is checked against
the other text and against every retrieved chunk. The four resulting entailment matrices
(:class:`ClaimChecks`) are computed once per item, and every metric is a plain function of them,
as the RAGChecker paper (Ru et al., NeurIPS 2024) defines it:

- overall: ``precision`` (response claims entailed by the gold answer / response claims),
  ``recall`` (gold claims entailed by the response / gold claims), ``f1``;
- retriever: ``claim_recall`` (gold claims entailed by at least one chunk / gold claims),
  ``context_precision`` (relevant chunks, those entailing at least one gold claim / chunks);
- generator: ``context_utilization`` (gold claims entailed by the chunks and by the response /
  gold claims entailed by the chunks); over response claims: ``noise_sensitivity_relevant``
  (incorrect and entailed by a relevant chunk), ``noise_sensitivity_irrelevant`` (incorrect and
  entailed by an irrelevant chunk only), ``hallucination`` (incorrect and entailed by no chunk),
  ``self_knowledge`` (correct and entailed by no chunk), ``faithfulness`` (entailed by a chunk).
  "Correct" means entailed by the gold answer.

A metric is ``None`` (undefined, and counted) exactly when its denominator is zero: no response
claims, no gold claims, no chunks, no gold claim in the chunks; and every chunk metric is ``None``
for an item that gives no retrieved context. Zero chunks is not "not given": then no claim is in
the context, so claim recall and faithfulness are 0, hallucination is 1 - precision and
self-knowledge is precision, as the definitions say. F1 is 0 when precision or recall is 0 (the
harmonic mean is, whatever the other value is). RAGChecker's code returns 0 for all of these cases.

The metrics take 0/1 matrices (the probabilities thresholded) or the probabilities themselves; on
probabilities the same formulas read "and" as a product, "not" as 1 - p and "any" as the maximum,
which gives exactly the 0/1 result on 0/1 matrices.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from judgetune import datasets
from judgetune.datasets import RagItem, read_rag_items
from judgetune.judges import FactCheckJudge, add_usage
from judgetune.lm import JudgeLM

log = logging.getLogger(__name__)

OVERALL = ("precision", "recall", "f1")
RETRIEVER = ("claim_recall", "context_precision")
GENERATOR = ("context_utilization", "noise_sensitivity_relevant", "noise_sensitivity_irrelevant", "hallucination",
             "self_knowledge", "faithfulness")
METRICS = (*OVERALL, *RETRIEVER, *GENERATOR)

# A worked example for the claim extractor (the embedded model copies whole sentences without one).
CLAIM_DEMO = ("Marie Curie was born in Warsaw in 1867. She won two Nobel Prizes, in physics and in chemistry.",
              ["Marie Curie was born in Warsaw.", "Marie Curie was born in 1867.", "Marie Curie won two Nobel Prizes.",
               "Marie Curie won a Nobel Prize in physics.", "Marie Curie won a Nobel Prize in chemistry."])


@dataclass(frozen=True, eq=False)
class ClaimChecks:
    """The entailment matrices of one item: p(entailed), or 0/1 once thresholded.

    ``response_in_gold[i]``: the gold answer entails response claim i. ``gold_in_response[j]``: the
    response entails gold claim j. ``response_in_chunks[i, k]`` / ``gold_in_chunks[j, k]``: chunk k
    entails the claim; both are None when the item gives no retrieved context.
    """

    response_claims: tuple[str, ...]
    gold_claims: tuple[str, ...]
    response_in_gold: np.ndarray
    gold_in_response: np.ndarray
    response_in_chunks: np.ndarray | None = None
    gold_in_chunks: np.ndarray | None = None

    def __post_init__(self) -> None:
        n_response, n_gold = len(self.response_claims), len(self.gold_claims)
        shapes = {"response_in_gold": (n_response,), "gold_in_response": (n_gold,)}
        if (self.response_in_chunks is None) != (self.gold_in_chunks is None):
            raise ValueError("give both chunk matrices (the item has retrieved context) or neither")
        if self.response_in_chunks is not None:
            n_chunks = np.shape(self.response_in_chunks)[1] if np.ndim(self.response_in_chunks) == 2 else -1
            shapes |= {"response_in_chunks": (n_response, n_chunks), "gold_in_chunks": (n_gold, n_chunks)}
        for name, shape in shapes.items():
            value = np.asarray(getattr(self, name), dtype=float)
            if value.shape != shape or value.size and (value.min() < 0 or value.max() > 1):
                raise ValueError(f"{name}: expected values in [0, 1] of shape {shape}, found shape {value.shape}")
            object.__setattr__(self, name, value)

    @property
    def n_chunks(self) -> int | None:
        return None if self.response_in_chunks is None else self.response_in_chunks.shape[1]

    def thresholded(self, threshold: float) -> ClaimChecks:
        """The 0/1 matrices: entailed when p(entailed) >= ``threshold``."""

        def cut(m: np.ndarray | None) -> np.ndarray | None:
            return None if m is None else (m >= threshold).astype(float)

        return ClaimChecks(self.response_claims, self.gold_claims, cut(self.response_in_gold),
                           cut(self.gold_in_response), cut(self.response_in_chunks), cut(self.gold_in_chunks))

    def to_dict(self) -> dict[str, Any]:
        def plain(m: np.ndarray | None) -> list | None:
            return None if m is None else np.round(m, 6).tolist()

        return {"response_claims": list(self.response_claims), "gold_claims": list(self.gold_claims),
                "response_in_gold": plain(self.response_in_gold), "gold_in_response": plain(self.gold_in_response),
                "response_in_chunks": plain(self.response_in_chunks), "gold_in_chunks": plain(self.gold_in_chunks)}


def _any(m: np.ndarray, axis: int) -> np.ndarray:
    """Entailed by any (the maximum); False (0) over an empty axis."""
    return m.max(axis=axis, initial=0.0)


def _mean(values: np.ndarray) -> float | None:
    return float(values.mean()) if values.size else None


# ---- overall


def precision(c: ClaimChecks) -> float | None:
    return _mean(c.response_in_gold)


def recall(c: ClaimChecks) -> float | None:
    return _mean(c.gold_in_response)


def f1(c: ClaimChecks) -> float | None:
    p, r = precision(c), recall(c)
    if p == 0 or r == 0:
        return 0.0
    if p is None or r is None:
        return None
    return 2 * p * r / (p + r)


# ---- retriever


def claim_recall(c: ClaimChecks) -> float | None:
    return None if c.gold_in_chunks is None else _mean(_any(c.gold_in_chunks, axis=1))


def relevant_chunks(c: ClaimChecks) -> np.ndarray:
    """Per chunk: does it entail at least one gold claim."""
    return _any(c.gold_in_chunks, axis=0)


def context_precision(c: ClaimChecks) -> float | None:
    return None if c.gold_in_chunks is None else _mean(relevant_chunks(c))


# ---- generator


def context_utilization(c: ClaimChecks) -> float | None:
    if c.gold_in_chunks is None:
        return None
    in_context = _any(c.gold_in_chunks, axis=1)
    total = in_context.sum()
    return float((in_context * c.gold_in_response).sum() / total) if total > 0 else None


def _supported(c: ClaimChecks) -> tuple[np.ndarray, np.ndarray]:
    """Per response claim: entailed by a relevant chunk; entailed by an irrelevant chunk and no relevant one."""
    relevant = relevant_chunks(c)
    by_relevant = _any(c.response_in_chunks * relevant, axis=1)
    by_irrelevant = _any(c.response_in_chunks * (1 - relevant), axis=1) * (1 - by_relevant)
    return by_relevant, by_irrelevant


def noise_sensitivity_relevant(c: ClaimChecks) -> float | None:
    if c.response_in_chunks is None:
        return None
    return _mean(_supported(c)[0] * (1 - c.response_in_gold))


def noise_sensitivity_irrelevant(c: ClaimChecks) -> float | None:
    if c.response_in_chunks is None:
        return None
    return _mean(_supported(c)[1] * (1 - c.response_in_gold))


def faithfulness(c: ClaimChecks) -> float | None:
    return None if c.response_in_chunks is None else _mean(_any(c.response_in_chunks, axis=1))


def hallucination(c: ClaimChecks) -> float | None:
    if c.response_in_chunks is None:
        return None
    return _mean((1 - _any(c.response_in_chunks, axis=1)) * (1 - c.response_in_gold))


def self_knowledge(c: ClaimChecks) -> float | None:
    if c.response_in_chunks is None:
        return None
    return _mean((1 - _any(c.response_in_chunks, axis=1)) * c.response_in_gold)


METRIC_FUNCTIONS: dict[str, Callable[[ClaimChecks], float | None]] = {
    "precision": precision, "recall": recall, "f1": f1, "claim_recall": claim_recall,
    "context_precision": context_precision, "context_utilization": context_utilization,
    "noise_sensitivity_relevant": noise_sensitivity_relevant,
    "noise_sensitivity_irrelevant": noise_sensitivity_irrelevant, "hallucination": hallucination,
    "self_knowledge": self_knowledge, "faithfulness": faithfulness,
}


def item_metrics(checks: ClaimChecks, *, threshold: float | None = 0.5) -> dict[str, float | None]:
    """Every metric of one item: on the matrices thresholded at ``threshold``, or on the
    probabilities themselves when ``threshold`` is None."""
    matrices = checks if threshold is None else checks.thresholded(threshold)
    return {name: fn(matrices) for name, fn in METRIC_FUNCTIONS.items()}


def aggregate(rows: Sequence[dict[str, float | None]]) -> tuple[dict[str, float | None], dict[str, int]]:
    """The mean of each metric over the items where it is defined, and how many items that is."""
    means, defined = {}, {}
    for name in METRICS:
        values = [r[name] for r in rows if r.get(name) is not None]
        means[name] = float(np.mean(values)) if values else None
        defined[name] = len(values)
    return means, defined


# ---- the pipeline: extract claims, check them, keep every item


@dataclass(frozen=True)
class ItemChecks:
    """One item's claim checks, or why they failed (``checks`` is None exactly when ``error`` is set)."""

    item: RagItem
    checks: ClaimChecks | None = None
    error: str | None = None
    usage: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.checks is None) == (self.error is None):
            raise ValueError("an ItemChecks holds either checks or an error")


def default_checker(lm: JudgeLM, *, max_claims: int = 12) -> FactCheckJudge:
    """The fact-check judge with its entailment instruction: at most ``max_claims`` claims per text."""
    return FactCheckJudge(lm, instruction="entailment", max_facts=max_claims)


def check_claims(items: Sequence[RagItem], checker: FactCheckJudge, *, progress: bool = False) -> list[ItemChecks]:
    """Extract the claims of every response and gold answer, then check each claim against the other
    text and every chunk; one record per item, in order.

    Extractions and checks are deduplicated across items and run in batches through the checker's LM
    (in threads on a server); checks are ordered by reference text, so that an in-process model reuses
    the text's KV cache. Every answer is cached on disk by the LM. A blank text has no claims and
    entails none (p = 0, no LM call: an empty response covers no gold claim).
    An unreadable claim list, or a check whose labels got no probability, fails its item with the reason.
    """
    texts = list(dict.fromkeys((text, item.query) for item in items for text in (item.response, item.gold_answer)
                               if text.strip()))

    def extract(key: tuple[str, str]) -> tuple[list[str], dict] | str:
        try:
            return checker.extract_facts(key[0], question=key[1], demos=[CLAIM_DEMO])
        except ValueError as err:
            return f"unreadable claim list: {err}"

    extracted = {key: out.value if out.ok else f"LM call failed: {out.error}"
                 for key, out in zip(texts, checker.lm.run(extract, texts, progress=progress))}

    def claims_of(item: RagItem, text: str) -> tuple[list[str], dict] | str:
        return ([], {}) if not text.strip() else extracted[(text, item.query)]

    plans: list[tuple[list[str], list[str]] | str] = []
    pairs: dict[tuple[str, str], None] = {}
    for item in items:
        response, gold = claims_of(item, item.response), claims_of(item, item.gold_answer)
        if isinstance(response, str) or isinstance(gold, str):
            plans.append("; ".join(f"{what} claims: {x}" for what, x in (("response", response), ("gold answer", gold))
                                   if isinstance(x, str)))
            continue
        plans.append((response[0], gold[0]))
        pairs.update(dict.fromkeys(_needed(item, response[0], gold[0])))
    rank = {text: i for i, text in enumerate(dict.fromkeys(text for text, _ in pairs))}
    ordered = sorted(pairs, key=lambda pair: rank[pair[0]])  # grouped by reference text, first seen first
    verdicts = dict(zip(ordered, checker.lm.run(lambda pair: checker.check_fact(*pair), ordered, progress=progress)))
    results = []
    for item, plan in zip(items, plans):
        if isinstance(plan, str):
            results.append(ItemChecks(item, error=plan))
            continue
        usage = [extracted[(text, item.query)][1] for text in (item.response, item.gold_answer) if text.strip()]
        results.append(_fill(item, *plan, verdicts, usage))
    return results


def _needed(item: RagItem, response_claims: list[str], gold_claims: list[str]) -> list[tuple[str, str]]:
    """The (reference text, claim) checks of an item: response claims against the gold answer and each
    chunk, gold claims against the response and each chunk. A blank text entails nothing: not asked."""
    chunks = item.chunks or ()
    return [(reference, claim) for claims, references in ((response_claims, (item.gold_answer, *chunks)),
                                                          (gold_claims, (item.response, *chunks)))
            for claim in claims for reference in references if reference.strip()]


def _fill(item: RagItem, response_claims: list[str], gold_claims: list[str], verdicts: dict,
          usages: list[dict]) -> ItemChecks:
    needed = _needed(item, response_claims, gold_claims)
    usage = add_usage(*usages, *(verdicts[key].value.usage for key in needed if verdicts[key].ok))
    for reference, claim in needed:
        outcome = verdicts[(reference, claim)]
        if not outcome.ok or not outcome.value.parsed:
            why = f"LM call failed: {outcome.error}" if not outcome.ok else outcome.value.raw
            return ItemChecks(item, error=f"checking claim {claim!r}: {why}", usage=usage)

    def matrix(claims: list[str], references: Sequence[str]) -> np.ndarray:
        return np.array([[verdicts[(r, c)].value.distribution["1"] if r.strip() else 0.0 for r in references]
                         for c in claims],
                        dtype=float).reshape(len(claims), len(references))

    chunks = item.chunks
    checks = ClaimChecks(tuple(response_claims), tuple(gold_claims),
                         matrix(response_claims, [item.gold_answer])[:, 0], matrix(gold_claims, [item.response])[:, 0],
                         None if chunks is None else matrix(response_claims, chunks),
                         None if chunks is None else matrix(gold_claims, chunks))
    return ItemChecks(item, checks, usage=usage)


def report(results: Sequence[ItemChecks], *, threshold: float = 0.5) -> dict[str, Any]:
    """The per-item records and the aggregate, as ``judgetune ragcheck --json`` prints them.

    ``aggregate`` holds the mean of each metric over the items where it is defined; ``defined``
    says how many items that is, and ``failed`` how many items have no checks (their ``error`` says why).
    """
    items, rows = [], []
    for r in results:
        metrics = item_metrics(r.checks, threshold=threshold) if r.checks is not None else None
        if metrics is not None:
            rows.append(metrics)
        items.append({"id": r.item.id, "query": r.item.query, "parsed": r.checks is not None, "error": r.error,
                      "chunks": None if r.item.chunks is None else len(r.item.chunks), "metrics": metrics,
                      "entailment": None if r.checks is None else r.checks.to_dict(), "usage": r.usage,
                      **({"meta": r.item.meta} if r.item.meta else {})})
    means, defined = aggregate(rows)
    return {"items": items, "aggregate": means, "defined": defined, "failed": len(results) - len(rows),
            "threshold": threshold}


# ---- RAGChecker's own files

RAGCHECKER_EXAMPLES = "ragchecker/examples_checking_inputs.json"
RAGCHECKER_EXAMPLE_OUTPUTS = "ragchecker/examples_checking_outputs.json"
RAGCHECKER_NAMES = {"noise_sensitivity_in_relevant": "noise_sensitivity_relevant",
                    "noise_sensitivity_in_irrelevant": "noise_sensitivity_irrelevant"}


def read_items(data: str | Path, *, root: Path | None = None, mirror: str | Path | None = None) -> list[RagItem]:
    """The items of a JSON/JSONL file, or of RAGChecker's two example inputs for ``ragchecker-examples``
    (fetched with the ``ragchecker`` catalog source)."""
    if str(data) == "ragchecker-examples":
        data = datasets.ensure_fetched("ragchecker", root=root, mirror=mirror) / RAGCHECKER_EXAMPLES
    return read_rag_items(data)


def read_ragchecker_outputs(path: str | Path) -> list[tuple[RagItem, ClaimChecks, dict[str, float]]]:
    """RAGChecker's output file: per item, the item, its claim checks (1 for "Entailment", else 0)
    and the metrics RAGChecker computed from them (under our metric names, on 0-1)."""
    items = {item.id: item for item in read_rag_items(path)}
    with Path(path).open(encoding="utf-8") as handle:
        rows = json.load(handle)["results"]
    out = []
    for row in rows:
        response_claims, gold_claims = _claim_texts(row["response_claims"]), _claim_texts(row["gt_answer_claims"])
        n_chunks = len(row["retrieved_context"])
        checks = ClaimChecks(response_claims, gold_claims, _entailed(row["answer2response"]),
                             _entailed(row["response2answer"]),
                             _entailed(row["retrieved2response"]).reshape(len(response_claims), n_chunks),
                             _entailed(row["retrieved2answer"]).reshape(len(gold_claims), n_chunks))
        metrics = {RAGCHECKER_NAMES.get(k, k): float(v) for k, v in row["metrics"].items()}
        out.append((items[str(row["query_id"])], checks, metrics))
    return out


def _claim_texts(claims: list) -> tuple[str, ...]:
    """RAGChecker's claims are (subject, relation, object) triplets: one text each."""
    return tuple(" ".join(c) if isinstance(c, list) else c for c in claims)


def _entailed(labels: list) -> np.ndarray:
    return np.array(labels, dtype=object) == "Entailment"
