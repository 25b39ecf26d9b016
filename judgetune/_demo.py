"""``judgetune demo``: tune judges of several families on MSRpar with the embedded defaults, choose one on
dev, and show every family's held-out figures beside the trivial baselines, each family's gain over its
own default settings, and the chosen judge scoring a pair from Python.

Sizes are cut so the demo fits in about three minutes on two idle cores: the LM family (the likelihood
judge, the one the embedded 135M model does well) gets 3 trials on 16 search pairs; every family is
chosen and calibrated on 40 dev pairs and tested on the same 80 test pairs. The intervals are wide at
that size, and the output says so by printing them.

Each family is an ordinary tuning run (``runs/NAME-FAMILY/``: study, judge.json, report); the chosen
judge is also copied to ``runs/NAME/`` so ``judgetune.load("runs/NAME/judge.json")`` finds it. All runs
share the split seed, so every family is scored on the same test items, once.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonlines

from judgetune import tuning
from judgetune._files import make_folder, write_text
from judgetune.config import JudgeConfig
from judgetune.report import write_report
from judgetune.stats import correlation, mae, paired_difference

__all__ = ["FAMILIES", "Family", "run_demo"]
log = logging.getLogger(__name__)
DATA = "sts2012-msrpar"
# the gate scores the search items, the 40 dev items and 10 of the demo pool's (gate_items), the 50 confirming items
# the nested gate needs; the whole pool would cost the embedded model minutes a candidate
SIZES = {"search_items": 16, "chunk": 8, "dev_items": 40, "test_items": 80, "gate_items": 66}
EXAMPLE = {"answer": "A man is slicing a tomato on a board.", "reference": "Someone cuts a tomato."}


@dataclass(frozen=True)
class Family:
    """One judge family of the demo: its kind, trial budget and fixed settings."""

    name: str
    judge: str
    trials: int
    fixed: dict[str, Any]
    lm_only: bool  # an LM judge on its own (no signals beside it)


FAMILIES = (
    Family("likelihood", "likelihood", 3, {}, True),
    Family("embedding", "embedding", 1, {}, False),
    Family("hybrid", "hybrid", 4, {}, False),
)


def _spec(family: Family, name: str, seed: int) -> tuning.RunSpec:
    return tuning.RunSpec(name=f"{name}-{family.name}", judge=family.judge, data=DATA, n_trials=family.trials,
                          seed=seed, fixed=dict(family.fixed), rescore=2, **SIZES)


def _row(name: str, metrics: dict[str, Any]) -> dict[str, Any]:
    keys = ("n", "mae", "mae_ci", "spearman", "spearman_ci", "bracket_accuracy", "bracket_accuracy_ci",
            "tokens_per_item", "seconds_per_item", "parse_failures")
    return {"name": name, **{k: metrics.get(k) for k in keys}}


def _test_scores(run_dir: Path) -> dict[str, tuple[float | None, float]]:
    with jsonlines.open(run_dir / "test_predictions.jsonl") as rows:
        return {row["id"]: (row["score"], row["human"]) for row in rows}


def versus(a_dir: Path, b_dir: Path, *, seed: int = 0) -> dict[str, Any]:
    """Judge A minus judge B on the held-out items both scored: Spearman and MAE differences with
    paired 95% bootstrap intervals (the same resampled items for both)."""
    a, b = _test_scores(a_dir), _test_scores(b_dir)
    ids = [i for i in a if i in b and a[i][0] is not None and b[i][0] is not None]
    pa, pb, gold = [a[i][0] for i in ids], [b[i][0] for i in ids], [a[i][1] for i in ids]
    out: dict[str, Any] = {"n": len(ids)}
    for metric, fn in (("spearman", correlation), ("mae", mae)):
        diff = paired_difference(fn, pa, pb, gold, seed=seed)
        out[metric], out[f"{metric}_ci"] = diff["difference"], diff["ci"]
    return out


def from_python(path: Path) -> dict[str, Any]:
    """The frozen judge used as a user would: ``judgetune.load(path).score(...)`` on one pair."""
    import judgetune

    with judgetune.load(path) as judge:
        return {"code": f'judgetune.load("{path}").score(answer=..., reference=...)', **EXAMPLE,
                "score": judge.score(**EXAMPLE), "label_range": list(judge.label_range)}


def run_demo(*, name: str = "demo", runs_dir: str | Path = "runs", seed: int = 0,
             families: tuple[Family, ...] = FAMILIES) -> dict[str, Any]:
    """Tune every family, choose the one with the best dev Spearman, and return the held-out table:
    ``{"chosen": NAME, "chosen_label": its row's name, "best_lm_only": NAME (None when no LM-only run kept its own
    kind), "moved": {family: the other kind its run froze}, "rows": [...], "versus": {row name: chosen minus it},
    "runs": {family: folder}}``. A row is named ``FAMILY: KIND`` when its run's gate shipped another family's
    default (``--also``)."""
    runs_dir = Path(runs_dir)
    results: dict[str, tuple[JudgeConfig, Path]] = {}
    start = time.monotonic()
    for step, family in enumerate(families, 1):
        print(f"demo [{step}/{len(families)}]: tuning the {family.name} judge ({family.trials} trial(s)) on {DATA} "
              f"({time.monotonic() - start:.0f} s so far)", file=sys.stderr, flush=True)
        config, run_dir, study = tuning.tune(_spec(family, name, seed), runs_dir=runs_dir)
        write_report(run_dir, study=study, config=config)
        results[family.name] = (config, run_dir)

    def dev_rank(family: str) -> tuple[float, float]:
        dev = results[family][0].metrics["dev"]
        return (dev.get("spearman") if dev.get("spearman") is not None else -1.0, -(dev.get("mae") or 0.0))

    chosen = max(results, key=dev_rank)
    moved = {f.name: results[f.name][0].judge for f in families if results[f.name][0].judge != f.judge}  # --also
    lm_only = [f.name for f in families if f.lm_only and f.name not in moved]
    best_lm = max(lm_only, key=dev_rank) if lm_only else None
    config, run_dir = results[chosen]
    out_dir = make_folder(runs_dir / name)
    for file in ("judge.json", "test_predictions.jsonl", "test.jsonl", "report.html"):
        shutil.copyfile(run_dir / file, out_dir / file)
    label = {f.name: f"{f.name}: {moved[f.name]}" if f.name in moved else f.name for f in families}
    rows = [_row(label[family], {**results[family][0].metrics["test"], **results[family][0].metrics["cost"]["test"]})
            for family in [chosen, *(f.name for f in families if f.name != chosen)]]
    for baseline, metrics in config.metrics["baselines"].items():
        rows.append(_row(baseline, {**metrics, "tokens_per_item": 0, "seconds_per_item": 0.0}))
    comparisons = {label[other]: versus(run_dir, results[other][1], seed=seed) for other in results if other != chosen}
    gains = {f: results[f][0].metrics.get("gain") for f in results}  # every family: tuned minus its default
    summary = {"chosen": chosen, "chosen_label": label[chosen], "best_lm_only": best_lm, "moved": moved,
               "data": DATA, "rows": rows, "versus": comparisons, "gain": gains,
               "gain_lines": {f: tuning.gain_line(results[f][0].metrics) for f in results},
               "seconds_lines": {f: tuning.seconds_line(results[f][0].metrics) for f in results},
               "dev": {f: _row(f, results[f][0].metrics["dev"]) for f in results},
               "runs": {f: str(results[f][1]) for f in results}, "python": from_python(out_dir / "judge.json"),
               "seconds": round(time.monotonic() - start, 1)}
    write_text(out_dir / "demo.json", json.dumps(summary, indent=2) + "\n")
    return summary
