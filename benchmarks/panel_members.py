"""A shipped panel against each of its members, on a real run's test items (does a panel beat its best
single member?).

Reads a kept run folder (`python benchmarks/tuning_gain.py ... --runs-dir DIR`): its judge.json (a frozen panel)
and test.jsonl (the run's test items, never seen by the selection). Each member, rebuilt from the frozen panel,
scores the test items (from the answer cache when the run already asked the LM the same); the panel's score is
the mean of the members' standardized raw scores, as the frozen panel computes it. Rankings are compared on raw
scores (Spearman; calibration is monotone), each as the panel minus a member with a paired 95% bootstrap interval
(`judgetune.stats.paired_difference`, the interval `metrics.gain` reports). The best member is the one best on
the labeled items (the selection's figure over search and dev: what a user could have shipped alone), never the
one best on test.

    python benchmarks/panel_members.py /work/runs-keep/msrpar/gain-sts2012-msrpar-likelihood-6-nested \
        --out benchmarks/results/panel_members-qwen1.5b-sts2012-msrpar.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

import judgetune
from judgetune import datasets
from judgetune.stats import correlation, difference_record, paired_difference, panel_mean

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import meta  # noqa: E402


def member_labels(metrics: dict[str, Any], members: int) -> list[float | None]:
    """Each member's Spearman on the labeled items (search and dev), from the selection row of its trial."""
    rows = metrics["selection"]["rows"]
    panel = next(r for r in rows if r.get("panel") and r.get("chosen"))["params"]["panel"]["members"]
    if len(panel) != members:
        raise SystemExit(f"judge.json: the panel row lists {len(panel)} members, the frozen panel {members}")
    figures = []
    for params in panel:
        row = next((r for r in rows if not r.get("panel") and r["params"] == params), None)
        figures.append(None if row is None else row.get("spearman"))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a kept run folder holding judge.json and test.jsonl")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    frozen = judgetune.load(args.run / "judge.json")
    if frozen.config.judge != "panel":
        raise SystemExit(f"{args.run / 'judge.json'}: the shipped judge is {frozen.config.judge}, not a panel")
    items, _ = datasets.load_data(str(args.run / "test.jsonl"))
    gold = np.asarray([e.judgment for e in items], dtype=float)
    panel = frozen.judge
    start = time.perf_counter()
    raw = np.asarray([[v.score if v.parsed else np.nan for v in member.judge_all(items)] for member in panel.members])
    seconds = time.perf_counter() - start
    scores, _ = panel_mean(raw, panel.center, panel.scale)
    judged = ~np.isnan(raw).any(axis=0)
    raw, scores, gold = raw[:, judged], np.asarray(scores)[judged], gold[judged]
    labeled = member_labels(frozen.config.metrics, len(panel.members))
    best = int(np.nanargmax([np.nan if f is None else f for f in labeled]))

    # the run's own test figure of the shipped panel (calibrated; a monotone map), beside this recomputation
    rows = [{"judge": "panel", "spearman": correlation(scores, gold),
             "run_test_spearman": frozen.config.metrics["test"].get("spearman")}]
    for i, record in enumerate(frozen.config.fitted["members"]):
        diff = paired_difference(correlation, scores, raw[i], gold, n_resamples=2000, seed=args.seed)
        rows.append({"judge": f"member {i}", "params": record["params"], "demos": len(record["demos"]),
                     "labeled_spearman": labeled[i], "best_on_labels": i == best, "spearman": correlation(raw[i], gold),
                     "panel_minus_member": difference_record(diff)})
    rows[0]["vs_best_member"] = rows[1 + best]["panel_minus_member"]
    result = {"meta": {**meta(sys.argv), "run": str(args.run),
                       "lm": (frozen.config.lm or {}).get("spec"), "test_items": int(judged.sum()),
                       "failed_items": int((~judged).sum()), "member_seconds": round(seconds, 1), "complete": True},
               "rows": rows}
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
