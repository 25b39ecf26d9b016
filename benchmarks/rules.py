"""Selection rules measured on a saved score matrix (issue 47), in seconds and with no LM time.

Each draw takes ``--labels`` items (300, whole questions) as the user's labeled items and the rest of the
matrix as test. Every rule picks a candidate from the labeled items alone; on the test items the shipped
candidate's Spearman minus the untuned default's is its gain. The same draw with the labeled items'
labels shuffled (within the draw) gives the rule's ship rate when no candidate is truly better.

Rules (candidate 0 is the default; a rule that ships nothing ships the default):
- ``gate``: tune's dev gate. The labeled items are split as ``tune`` splits them (dev a quarter of the
  non-test labels); the winner is the best of ``--search-items`` training items (40, ``tune``'s default),
  and ships only if its advantage on dev passes the one-sided 95% paired t test.
- ``gate-wide``: the same with every training item as a search item.
- ``nested``: the nested cross-fitted gate (``judgetune.stats.nested_gate``): every label chooses and confirms.
- ``nested-k10``: the same with 10 folds (x3 repeats) instead of 5.
- ``nested-df14``: the nested gate as it was until session 9, its t read with 14 degrees of freedom (15 fold
  estimates) instead of one cut's 4: the repeats re-use the same items, and it shipped too often on shuffled labels.
- ``nested-panel``: ``tune --panel``: the nested gate with one more candidate, the panel of every candidate (each
  standardized by its mean and spread on the labeled items, no labels read; averaged over the candidates that
  judged an item). In ``tune`` the panel's members are the scored candidates (default and up to eight trials) and
  their centres come from the search items; here they are the matrix's candidates and the labeled items.
- ``panel-gate``: ``tune --panel`` as it ships (``judgetune.stats.panel_gate``): the panel tested alone against
  the default on every label (one fixed challenger, paired t, one-sided at 2.5%) beside the nested gate over the
  other candidates at 2.5%; of those that pass, the larger estimated gain ships.
- ``panel-first``: the same two tests, the panel shipped whenever it passes (the nested gate's choice only when
  it does not).
- ``panel``: the same panel shipped always, with no test (its null ship rate is 1 by construction).
- ``old``: ``--gate off``: the best of the search items' top four re-scored on dev; nothing tested.
- ``best-all``: the best on all labeled items, nothing tested (what most tools report).
- ``oracle``: the best on the test items (an upper bound no rule can reach).

Per rule: ``mean_gain`` (with a 95% interval over draws), ``gain_sd``, ``ship_rate``, ``worse_rate`` (draws whose
shipped judge is significantly worse than the default on test: the upper end of the two-sided 95% paired
interval below 0), ``null_ship_rate``; ``undefined_draws``, the draws left out of the mean because the shipped
judge ranked no test question (per-question figures on a set whose questions hold few items, or one label each).

Figures are per question where the matrix's items have questions, as ``tune`` takes them. ``--pooled`` takes them
over all items instead (jackknife units of one item), the questions kept only to make each draw of whole ones: for a
set whose groups are clusters rather than questions to rank within (SummaC's documents, each with 1 to 9 claims
and most with one label), as ``tune --pooled`` takes them; written to ``rules-...-pooled.json``.

    python benchmarks/rules.py benchmarks/results/matrix-smollm2-likelihood-sts2012-msrpar.json [--labels 300]
        [--draws 200] [--seed 0] [--json] [--pooled] [--out PATH]

Writes ``benchmarks/results/rules-<lm>-<judge>-<set>.json`` (``labels``, ``draws``, ``default_rule``, ``rules``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _results import meta as meta_of_run
from scipy import stats as sps

from judgetune.stats import (
    best_candidate_index,
    figures,
    nested_gate,
    one_sided_lower,
    paired_unit_differences,
    panel_gate,
    panel_mean,
    standardizers,
)

RULES = ("gate", "gate-wide", "nested", "nested-k10", "nested-df14", "nested-panel", "panel-gate", "panel-first",
         "panel", "old", "best-all", "oracle")
PANEL_RULES = ("nested-panel", "panel-gate", "panel-first", "panel")  # they see the panel as one more (last) candidate
DEFAULT_RULE = "nested"  # what `judgetune tune` uses by default (RunSpec.gate)


def load_matrix(path: Path) -> dict[str, Any]:
    """The matrix's scored prefix as arrays: ``scores`` (C, n) with NaN for failures, ``gold``, ``groups``."""
    m = json.loads(path.read_text())
    n = m["scored"]
    scores = np.array([[np.nan if v is None else v for v in row[:n]] for row in m["scores"]], dtype=float)
    groups = [str(g) for g in m["items"]["groups"][:n]]
    grouped = len(set(groups)) < n
    return {"meta": m["meta"], "candidates": m["candidates"], "scores": scores,
            "gold": np.asarray(m["items"]["labels"][:n], dtype=float),
            "groups": groups if grouped else None, "all_groups": groups, "n": n}


def _split_units(groups: list[str], take: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Indices of about ``take`` items made of whole questions (seeded), and the rest."""
    keys = list(dict.fromkeys(groups))
    chosen, count = set(), 0
    sizes = {k: 0 for k in keys}
    for g in groups:
        sizes[g] += 1
    for i in rng.permutation(len(keys)):
        if count >= take:
            break
        chosen.add(keys[i])
        count += sizes[keys[i]]
    inside = np.array([g in chosen for g in groups])
    return np.flatnonzero(inside), np.flatnonzero(~inside)


def _sub(groups: list[str] | None, idx: np.ndarray) -> list[str] | None:
    return None if groups is None else [groups[i] for i in idx]


def gate_rule(scores, gold, groups, all_groups, rng, search_items: int | None) -> int:
    """tune's gate: dev a quarter of the labels (whole questions); the winner the best on the search items."""
    n = len(gold)
    dev, train = _split_units(all_groups, n // 4, rng)
    if search_items is None:
        search = train
    else:
        sub, _ = _split_units([all_groups[i] for i in train], search_items, rng)
        search = train[sub]
    win = best_candidate_index(scores[:, search], gold[search], _sub(groups, search))
    if win == 0:
        return 0
    d = paired_unit_differences(scores[:, dev][[0, win]], gold[dev], _sub(groups, dev), 1)
    test = one_sided_lower(d)
    return win if test["lower"] is not None and test["lower"] > 0 else 0


def old_rule(scores, gold, groups, all_groups, rng, search_items: int = 40, rescore: int = 4) -> int:
    """``--gate off``: the top ``rescore`` challengers on the search items re-scored on dev; the best on dev ships."""
    n = len(gold)
    dev, train = _split_units(all_groups, n // 4, rng)
    sub, _ = _split_units([all_groups[i] for i in train], search_items, rng)
    search = train[sub]
    fig = np.nan_to_num(figures(scores[1:, search], gold[search], _sub(groups, search)), nan=-np.inf)
    top = (np.argsort(-fig, kind="stable")[:rescore] + 1).tolist()
    dev_fig = np.nan_to_num(figures(scores[top][:, dev], gold[dev], _sub(groups, dev)), nan=-np.inf)
    return int(top[int(np.argmax(dev_fig))])


def panel_row(scores: np.ndarray, lab: np.ndarray) -> np.ndarray:
    """The panel of every candidate on every item: each standardized by its mean and spread on the labeled items
    ``lab`` (scores only), averaged over the candidates that judged the item (NaN where none did); candidates with
    no spread there are left out (what ``judgetune.tuning`` does with ``--panel``)."""
    kept, centers, scales = standardizers(scores, lab)
    return panel_mean(scores[kept], centers, scales)[0]


def significantly_worse(scores, gold, groups, shipped: int) -> bool:
    """The shipped judge's paired 95% interval (two-sided t over units) against the default lies below 0."""
    if shipped == 0:
        return False
    d = paired_unit_differences(scores[[0, shipped]], gold, groups, 1)
    if d.size < 2 or np.ptp(d) == 0:
        return False
    half = sps.t.ppf(0.975, d.size - 1) * d.std(ddof=1) / np.sqrt(d.size)
    return bool(d.mean() + half < 0)


def apply_rule(rule: str, m: dict[str, Any], lab: np.ndarray, test: np.ndarray, gold_lab: np.ndarray,
               rng: np.random.Generator, seed: int) -> int:
    scores, groups, all_groups = m["scores"], m["groups"], m["all_groups"]
    s, g, ag = scores[:, lab], _sub(groups, lab), [all_groups[i] for i in lab]
    if rule == "gate":
        return gate_rule(s, gold_lab, g, ag, rng, 40)
    if rule == "gate-wide":
        return gate_rule(s, gold_lab, g, ag, rng, None)
    if rule == "nested":
        return nested_gate(s, gold_lab, g, seed=seed)["shipped"]
    if rule == "nested-k10":
        return nested_gate(s, gold_lab, g, folds=10, seed=seed)["shipped"]
    if rule == "nested-df14":
        return nested_gate(s, gold_lab, g, df=14, seed=seed)["shipped"]
    if rule == "nested-panel":
        return nested_gate(s, gold_lab, g, seed=seed)["shipped"]
    if rule == "panel-gate":
        return panel_gate(s, gold_lab, g, panel=len(scores) - 1, seed=seed)["shipped"]
    if rule == "panel-first":
        out = panel_gate(s, gold_lab, g, panel=len(scores) - 1, seed=seed)
        return len(scores) - 1 if out["panel"]["passed"] else out["nested"]["chosen"] if out["nested"]["passed"] else 0
    if rule == "panel":
        return len(scores) - 1
    if rule == "old":
        return old_rule(s, gold_lab, g, ag, rng)
    if rule == "best-all":
        return best_candidate_index(s, gold_lab, g)
    if rule == "oracle":
        return best_candidate_index(scores[:, test], m["gold"][test], _sub(groups, test))
    raise ValueError(rule)


def evaluate(m: dict[str, Any], labels: int, draws: int, seed: int, rules=RULES, progress=None) -> dict[str, Any]:
    """Every rule over ``draws`` seeded draws of ``labels`` labeled items (the rest test)."""
    per = {r: {"gain": [], "shipped": [], "worse": [], "null_shipped": []} for r in rules}
    groups, all_groups = m["groups"], m["all_groups"]
    test_sizes = []
    for d in range(draws):
        rng = np.random.default_rng([seed, d])
        lab, test = _split_units(all_groups, labels, rng)
        test_sizes.append(len(test))
        gold_lab = m["gold"][lab]
        shuffled = gold_lab.copy()
        rng.shuffle(shuffled)
        with_panel = {**m, "scores": np.vstack([m["scores"], panel_row(m["scores"], lab)])}
        fig_test = figures(with_panel["scores"][:, test], m["gold"][test], _sub(groups, test))
        for rule in rules:
            rule_seed = seed * 100_003 + d
            mm = with_panel if rule in PANEL_RULES else m
            shipped = apply_rule(rule, mm, lab, test, gold_lab, np.random.default_rng([seed, d, 1]), rule_seed)
            per[rule]["gain"].append(float(fig_test[shipped] - fig_test[0]))
            per[rule]["shipped"].append(shipped != 0)
            per[rule]["worse"].append(significantly_worse(mm["scores"][:, test], m["gold"][test], _sub(groups, test),
                                                          shipped))
            if rule in PANEL_RULES and shipped == len(m["scores"]):
                per[rule].setdefault("panel_shipped", []).append(True)
            if rule != "oracle":
                null = apply_rule(rule, mm, lab, test, shuffled, np.random.default_rng([seed, d, 1]), rule_seed)
                per[rule]["null_shipped"].append(null != 0)
        if progress:
            progress(d + 1)
    out = {}
    for rule, v in per.items():
        every = np.asarray(v["gain"])
        gains = every[np.isfinite(every)]  # a draw whose test ranks nothing by the shipped judge: no gain
        half = 1.96 * gains.std(ddof=1) / np.sqrt(len(gains)) if len(gains) > 1 else None
        out[rule] = {"mean_gain": float(gains.mean()), "undefined_draws": int(len(every) - len(gains)),
                     "mean_gain_ci": None if half is None else
                     [float(gains.mean() - half), float(gains.mean() + half)],
                     "gain_sd": float(gains.std(ddof=1)) if len(gains) > 1 else None,
                     "gain_p10": float(np.quantile(gains, 0.1)), "gain_p90": float(np.quantile(gains, 0.9)),
                     "worse_rate": float(np.mean(v["worse"])), "ship_rate": float(np.mean(v["shipped"])),
                     "null_ship_rate": float(np.mean(v["null_shipped"])) if v["null_shipped"] else None,
                     **({"panel_ship_rate": len(v.get("panel_shipped", [])) / len(gains)} if rule in PANEL_RULES
                        else {})}
    return {"rules": out, "test_items": {"min": int(min(test_sizes)), "max": int(max(test_sizes))}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("matrix", type=Path)
    parser.add_argument("--labels", type=int, default=300)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--pooled", action="store_true",
                        help="figures over all items pooled, the questions kept for the draws' splits only (a set "
                             "whose groups are clusters, such as SummaC's documents, rather than questions to rank in)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    m = load_matrix(args.matrix)
    if args.pooled:
        m["groups"] = None
    if m["n"] < args.labels + 100:
        sys.exit(f"{args.matrix}: {m['n']} items scored; need at least {args.labels + 100} ({args.labels} labels + test)")
    t0 = time.time()
    figs = figures(m["scores"], m["gold"], m["groups"])
    result = evaluate(m, args.labels, args.draws, args.seed,
                      progress=None if args.json else lambda d: d % 50 == 0 and print(f"  {d}/{args.draws} draws",
                                                                                       file=sys.stderr, flush=True))
    meta = m["meta"]
    record = {"meta": {**meta_of_run(sys.argv), "matrix": args.matrix.name, "lm": meta["lm"], "judge": meta["judge"],
                       "dataset": meta["dataset"],
                       "matrix_complete": meta["complete"], "items": m["n"], "candidates": int(len(m["scores"])),
                       "grouped": m["groups"] is not None, "figure": "pooled" if args.pooled else "per question",
                       "seconds": round(time.time() - t0, 1)},
              "labels": args.labels, "draws": args.draws, "default_rule": DEFAULT_RULE,
              "whole_matrix_spearman": [None if not np.isfinite(f) else round(float(f), 4) for f in figs],
              **result}
    name = args.matrix.name.replace("matrix-", "rules-", 1)
    if args.labels != 300:  # the file is the 300-label one; other sizes beside it, never over it
        name = name.replace(".json", f"-{args.labels}labels.json")
    if args.pooled:
        name = name.replace(".json", "-pooled.json")
    out = args.out or args.matrix.parent / name
    out.write_text(json.dumps(record, indent=1) + "\n")
    if args.json:
        print(json.dumps(record))
        return
    print(f"{meta['judge']} on {meta['dataset']} ({meta['lm']}): {m['n']} items, {len(m['scores'])} candidates; "
          f"{args.draws} draws of {args.labels} labels; whole-matrix Spearman "
          + " ".join(f"{f:.3f}" for f in figs))
    print(f"{'rule':10} {'mean gain [95%]':>26} {'sd':>6} {'ship':>6} {'worse':>6} {'null ship':>9}")
    for rule, r in result["rules"].items():
        ci = r["mean_gain_ci"] or [float("nan")] * 2
        null = "" if r["null_ship_rate"] is None else f"{r['null_ship_rate']:.3f}"
        print(f"{rule:10} {r['mean_gain']:+.4f} [{ci[0]:+.4f}, {ci[1]:+.4f}] {r['gain_sd']:6.3f} "
              f"{r['ship_rate']:6.3f} {r['worse_rate']:6.3f} {null:>9}")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
