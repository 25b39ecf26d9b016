"""Evaluate a judge against human labels, side by side with the trivial baselines.

Failed judgments (``parsed`` False) are counted and left out of the agreement figures, never
scored as a number; the baselines are scored on every item.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from judgetune.calibration.metrics import evaluate_predictions
from judgetune.datasets import Example
from judgetune.judges import ConstantJudge, EmbeddingJudge, Judge, RandomJudge, Verdict
from judgetune.judges._baselines import target_text


def label_range_of(examples: Sequence[Example]) -> tuple[float, float]:
    values = [e.judgment for e in examples if e.judgment is not None]
    if not values:
        raise ValueError("no human labels to evaluate against")
    return float(min(values)), float(max(values))


def _groups_shuffled(examples: Sequence[Example], seed: int) -> dict[str, list[Example]]:
    """Examples by group; each group's members in a seeded order that depends only on the seed and group."""
    groups: dict[str, list[Example]] = {}
    for ex in sorted(examples, key=lambda e: e.id):
        groups.setdefault(ex.group_key, []).append(ex)
    for key, members in groups.items():
        random.Random(f"{seed}:{key}").shuffle(members)
    return groups


def limit_by_group(examples: Sequence[Example], n: int | None, *, seed: int = 0) -> list[Example]:
    """``n`` examples taken group by group, groups in a seeded order (all when n is None); only the
    last group taken may be cut, keeping a random part of it rather than its first ids."""
    if n is None or n >= len(examples):
        return list(examples)
    groups = _groups_shuffled(examples, seed)
    keys = sorted(groups)
    random.Random(seed).shuffle(keys)
    picked: list[Example] = []
    for key in keys:
        picked.extend(groups[key])
        if len(picked) >= n:
            return picked[:n]
    return picked


def sample_per_group(examples: Sequence[Example], m: int, *, seed: int = 0) -> list[Example]:
    """At most ``m`` examples of every group, drawn seeded per group (per-question metrics keep every question)."""
    groups = _groups_shuffled(examples, seed)
    return [ex for key in sorted(groups) for ex in groups[key][:m]]


def data_defaults(kind: str, examples: Sequence[Example], label_range: tuple[float, float]) -> dict[str, Any]:
    """Judge settings that fit the data when the user sets none (the tuner searches them instead)."""
    pairwise = any(ex.answer_b is not None for ex in examples)
    has_refs = any(ex.references for ex in examples)
    if kind == "pairwise":
        return {"mode": "answers" if pairwise else "references"}
    if kind == "factcheck":
        return {"direction": "correctness" if has_refs else "support"}
    if kind == "rubric" and label_range == (0.0, 5.0):
        return {"scale": "0-5"}
    return {}


def groups_of(examples: Sequence[Example]) -> list[str] | None:
    """Per-example group keys when some group holds several examples, else None (nothing to group)."""
    keys = [ex.group_key for ex in examples]
    return keys if len(set(keys)) < len(keys) else None


def agreement(scores: Sequence[float | None], examples: Sequence[Example], label_range: tuple[float, float], *,
              pred_range: tuple[float, float] | None = None, n_resamples: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Agreement of scores with the human labels; a ``None`` score is a failure, counted and not scored."""
    kept = [(s, e) for s, e in zip(scores, examples) if s is not None]
    row: dict[str, Any] = {"items": len(examples), "parse_failures": len(examples) - len(kept)}
    if len(kept) < 2:
        return {**row, "n": len(kept)}
    return {**row, **evaluate_predictions([s for s, _ in kept], [e.judgment for _, e in kept], label_range=label_range,
                                          pred_range=pred_range, groups=groups_of([e for _, e in kept]),
                                          n_resamples=n_resamples, seed=seed)}


def judge_row(name: str, verdicts: Sequence[Verdict], examples: Sequence[Example], *, seconds: float,
              label_range: tuple[float, float], pred_range: tuple[float, float], n_resamples: int = 1000,
              seed: int = 0) -> dict[str, Any]:
    """Agreement of the parsed verdicts with the human labels, plus failure rate and cost."""
    scores = [v.score for v in verdicts]  # None exactly for the failed judgments
    metrics = agreement(scores, examples, label_range, pred_range=pred_range, n_resamples=n_resamples, seed=seed)
    row: dict[str, Any] = {"name": name,
                           "parse_failure_rate": metrics["parse_failures"] / len(verdicts) if verdicts else None,
                           "tokens_per_item": float(np.mean([v.tokens for v in verdicts])) if verdicts else None,
                           "seconds_per_item": seconds / len(verdicts) if verdicts else None}
    masses = [v.detail["label_mass"] for v in verdicts if "label_mass" in v.detail]
    if masses:  # how much of its probability the LM put on the labels at all (1 = always on format)
        row["label_mass"] = float(np.mean(masses))
    kept = [(s, ex) for s, ex in zip(scores, examples) if s is not None]
    if len(kept) >= 2 and any(ex.answer_b is not None for _, ex in kept):
        row["pair_accuracy"] = pair_accuracy([s for s, _ in kept], [ex.judgment for _, ex in kept])
    return {**row, **metrics}


def pair_accuracy(pred: Sequence[float], gold: Sequence[float]) -> float | None:
    """How often the predicted preference picks the human's side, over pairs the human did not tie;
    a predicted tie (exactly 0) counts half."""
    hits = [1.0 if p * g > 0 else 0.5 if p == 0 else 0.0 for p, g in zip(pred, gold) if g != 0]
    return float(np.mean(hits)) if hits else None


def timed_verdicts(judge: Judge, examples: Sequence[Example], *, progress: bool = False) -> tuple[list[Verdict], float]:
    start = time.perf_counter()
    verdicts = judge.judge_all(examples, progress=progress)
    return verdicts, time.perf_counter() - start


def evaluate_judge(judge: Judge, test: Sequence[Example], *, train: Sequence[Example],
                   label_range: tuple[float, float] | None = None, embedding: bool = True, n_resamples: int = 1000,
                   seed: int = 0, progress: bool = False) -> dict[str, Any]:
    """Rows for the judge and the baselines (constant training median, random training label, and
    embedding similarity where the examples have a text to compare with), and the judge's verdicts."""
    train_labels = [e.judgment for e in train if e.judgment is not None]
    if not train_labels:
        raise ValueError("the training split has no human labels (the baselines are fitted on it)")
    label_range = label_range or label_range_of([*train, *test])
    common = {"label_range": label_range, "n_resamples": n_resamples, "seed": seed}
    verdicts, seconds = timed_verdicts(judge, test, progress=progress)
    rows = [judge_row(judge.kind, verdicts, test, seconds=seconds, pred_range=judge.range_for(test), **common)]
    baselines: list[Judge] = [ConstantJudge.from_labels(train_labels, label_range),
                              RandomJudge(labels=train_labels, score_range=label_range, seed=seed)]
    if embedding and judge.kind != "embedding" and all(target_text(ex, "auto") for ex in test):
        baselines.append(EmbeddingJudge())
    for baseline in baselines:
        base_verdicts, base_seconds = timed_verdicts(baseline, test)
        rows.append(judge_row(baseline.kind, base_verdicts, test, seconds=base_seconds,
                              pred_range=baseline.range_for(test), **common))
    return {"rows": rows, "verdicts": verdicts, "label_range": list(label_range)}


def make_judge(kind: str, lm=None, *, train: Sequence[Example], pool: Sequence[Example],
               label_range: tuple[float, float], params: dict[str, Any] | None = None, seed: int = 0) -> Judge:
    """A judge set up for this data: demos drawn from ``train``, references (LINKAGE, pairwise against
    references, reference similarity) from the graded answers in ``pool``, settings = data defaults
    overridden by ``params``. A hybrid judge comes back fitted on ``train``."""
    from judgetune.judges import LM_JUDGES, ReferencePool, build_judge

    settings = {**data_defaults(kind, [*train, *pool], label_range), **(params or {})}
    if kind in ("refsim", "hybrid"):
        settings.update(pool=ReferencePool(pool), seed=seed)
    if kind == "hybrid":  # fitted on the training examples alone (their references drawn among themselves)
        return build_judge(kind, **settings).fit(train)
    if kind not in LM_JUDGES:
        return build_judge(kind, **settings)
    extra: dict[str, Any] = {"demo_pool": list(train), "label_range": label_range, "demo_seed": seed}
    if kind in ("linkage", "pairwise"):
        extra.update(pool=ReferencePool(pool), seed=seed)
    return build_judge(kind, lm, **extra, **settings)


def format_rows(rows: Sequence[dict[str, Any]]) -> str:
    """A plain-text table of evaluation rows, intervals in brackets."""
    def cell(row: dict, key: str) -> str:
        value = row.get(key)
        if value is None:
            return "-"
        ci = row.get(f"{key}_ci")
        text = f"{value:.3f}"
        if ci and ci[0] is not None:
            text += f" [{ci[0]:.2f},{ci[1]:.2f}]"
        return text

    keys = ["mae", "bracket_accuracy", "spearman", "kendall", "pearson", "spearman_per_group", "best_accuracy",
            "best_worst_accuracy", "pair_accuracy", "label_mass"]
    keys = [k for k in keys if any(r.get(k) is not None for r in rows)]
    header = ["judge", "n", "fail%", "tok/item", "s/item", *keys]
    table = [header]
    for r in rows:
        table.append([r["name"], str(r["n"]), f"{100 * (r['parse_failure_rate'] or 0):.1f}",
                      f"{r['tokens_per_item']:.0f}", f"{r['seconds_per_item']:.3f}", *(cell(r, k) for k in keys)])
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in table)
