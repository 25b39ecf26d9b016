"""Evaluate a judge against human labels, side by side with the trivial baselines.

Failed judgments (``parsed`` False) are counted and left out of the agreement figures, never
scored as a number; the baselines are scored on every item.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from judgetune.datasets import Example, groups_of
from judgetune.errors import shown
from judgetune.judges import ConstantJudge, EmbeddingJudge, Judge, RandomJudge, Verdict, target_text
from judgetune.stats import evaluate_predictions


def label_range_of(examples: Sequence[Example]) -> tuple[float, float]:
    values = [e.judgment for e in examples if e.judgment is not None]
    if not values:
        raise ValueError("no human labels to evaluate against")
    return float(min(values)), float(max(values))


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


def cost_per_item(verdicts: Sequence[Verdict], seconds: float) -> dict[str, float | None]:
    """Tokens and wall seconds per judged item (answers from the cache cost their lookup time), and the prompt
    tokens a server's prompt cache served per item (``None`` where the server reports none)."""
    if not verdicts:
        return {"tokens_per_item": None, "seconds_per_item": None, "cached_tokens_per_item": None}
    cached = [v.usage["cached_tokens"] for v in verdicts if "cached_tokens" in v.usage]
    return {"tokens_per_item": float(np.mean([v.tokens for v in verdicts])), "seconds_per_item": seconds / len(verdicts),
            "cached_tokens_per_item": float(np.mean(cached)) if cached else None}


def judge_row(name: str, verdicts: Sequence[Verdict], examples: Sequence[Example], *, seconds: float,
              label_range: tuple[float, float], pred_range: tuple[float, float], n_resamples: int = 1000,
              seed: int = 0) -> dict[str, Any]:
    """Agreement of the parsed verdicts with the human labels, plus failure rate and cost."""
    scores = [v.score for v in verdicts]  # None exactly for the failed judgments
    metrics = agreement(scores, examples, label_range, pred_range=pred_range, n_resamples=n_resamples, seed=seed)
    row: dict[str, Any] = {"name": name,
                           "parse_failure_rate": metrics["parse_failures"] / len(verdicts) if verdicts else None,
                           **cost_per_item(verdicts, seconds)}
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
        table.append([shown(r["name"]), str(r["n"]), f"{100 * (r['parse_failure_rate'] or 0):.1f}",
                      f"{r['tokens_per_item']:.0f}", f"{r['seconds_per_item']:.3f}", *(cell(r, k) for k in keys)])
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    text = "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)) for line in table)
    if not keys:  # said, not left as a table of costs that looks complete
        text += ("\nno agreement figures: fewer than 2 labeled items were scored (measure on a larger file or "
                 "split)")
    elif "mae" in keys and "spearman" not in keys and not any("pair_accuracy" in r for r in rows):
        text += "\nno rank correlations: the labels (or every judge's scores) are all equal on these items"
    return text
