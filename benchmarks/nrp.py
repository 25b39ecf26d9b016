"""NRP on the NRP paper's CLEF eHealth 2021 files.

1. Rankers: the shipped monoT5 scores, BM25, the bundled MiniLM embedding and (with --judge) a frozen
   judge from the tuner; nDCG@10 per quality dimension on the judged documents and agreement with the
   expert's orderings (RBO p=1, Kendall's tau).
2. NRP per LLM with each ranker on the top-1 answers (8 LLMs x 50 topics), and per LLM x prompt on
   the answers under the paper's 4 prompts (2 answers per LLM, prompt and topic with --quick), and how
   close each ranker's ordering is to monoT5's (Kendall's tau between the mean NRPs).
3. Efficiency: the answers placed with one ranker call each among cached document scores, against
   re-ranking |D_q| + 1 items per answer, on the full answer set (13 LLMs x 10 answers x the topics
   kept); calls and seconds, and the ratio. A fresh ranker for each timing (no cache carried over).

    python benchmarks/nrp.py [--quick] [--judge runs/NAME/judge.json] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from scipy import stats  # noqa: E402

from judgetune import nrp  # noqa: E402


def ranker_specs(judge: str | None) -> list[str]:
    return ["monot5", "bm25", "embedding"] + ([f"judge:{judge}"] if judge else [])


def nrp_by_ranker(collection: nrp.Collection, specs: list[str]) -> list[dict]:
    """One run per ranker (each ranker forced): its validation, NRP table and expert agreement."""
    runs = []
    for spec in specs:
        ranker = nrp.make_ranker(spec, collection)
        start = time.perf_counter()
        result = nrp.run_nrp(collection, [ranker], progress=True)
        result["seconds"] = time.perf_counter() - start
        result["ranker_calls"] = ranker.calls
        runs.append(result)
        print(f"  {spec}: done in {result['seconds']:.1f} s", file=sys.stderr)
    return runs


def efficiency(collection: nrp.Collection, spec: str) -> dict:
    row = {"ranker": spec, "answers": len(collection.answers), "documents": len(collection.documents)}
    for naive in (False, True):
        ranker = nrp.make_ranker(spec, collection)
        start = time.perf_counter()
        documents = nrp.score_documents(ranker, collection)
        placements = nrp.place_answers(ranker, collection, documents, naive=naive, progress=True)
        key = "naive" if naive else "cached"
        row[key] = {"calls": ranker.calls, "seconds": time.perf_counter() - start}
        row[f"{key}_ranks"] = [p.rank for p in placements]
    row["same_ranks"] = row.pop("cached_ranks") == row.pop("naive_ranks")
    row["call_ratio"] = row["naive"]["calls"] / row["cached"]["calls"]
    row["time_ratio"] = row["naive"]["seconds"] / row["cached"]["seconds"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="efficiency on 10 topics instead of all 50")
    parser.add_argument("--judge", help="a frozen judge config (judgetune tune writes runs/NAME/judge.json)")
    parser.add_argument("--judge-topics", type=int, default=20,
                        help="the judge ranker runs on the expert's topics only, at most this many")
    parser.add_argument("--no-efficiency", action="store_true", help="skip part 3")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    top1 = nrp.read_clef_ehealth(answers="top1")
    runs = nrp_by_ranker(top1, ranker_specs(None))
    if args.judge:
        expert_topics = set(sorted(top1.expert, key=int)[:args.judge_topics])
        subset = top1.subset(query_ids=expert_topics)
        runs += nrp_by_ranker(subset, ["monot5", f"judge:{args.judge}", "bm25", "embedding"])
        for run in runs[-4:]:
            run["topics"] = "expert topics"
    prompts = nrp.read_clef_ehealth(answers="prompts").subset(samples=2 if args.quick else None)
    prompt_runs = nrp_by_ranker(prompts, ["monot5", "bm25", "embedding"])
    for run in prompt_runs:
        run["topics"] = f"all topics, 4 prompts, {'2' if args.quick else '10'} answers each"
    runs += prompt_runs
    speed = []
    if not args.no_efficiency:
        full = nrp.read_clef_ehealth(answers="multimedqa")
        if args.quick:
            full = full.subset(query_ids=set(sorted(full.queries, key=int)[:10]))
        speed = [efficiency(full, spec) for spec in ("bm25", "embedding")]

    reference: dict[str, dict[str, float]] = {}
    table = []
    for run in runs:
        topics = run.get("topics", "all topics")
        means = {(r["system"], r["prompt"]): r["nrp_mean"] for r in run["systems"]}
        if run["chosen"] == "monot5":  # each group of runs starts with monoT5: the reference order
            reference.setdefault(topics, means)
        ref = reference[topics]
        systems = sorted(ref)
        tau = stats.kendalltau([ref[s] for s in systems], [means[s] for s in systems]).statistic
        ranker_row = run["rankers"][0]
        table.append({"ranker": run["chosen"], "topics": topics, "ndcg@10": ranker_row["ndcg@10"],
                      "expert": ranker_row.get("agreement"), "systems": run["systems"],
                      "kendall_vs_monot5_system_order": float(tau), "answers": len(run["answers"]),
                      "seconds": run["seconds"], "ranker_calls": run["ranker_calls"]})
    if args.json:
        print(json.dumps({"rankers": table, "efficiency": speed}, indent=2))
        return
    for row in table:
        n = row["ndcg@10"]
        e = row["expert"] or {}
        expert = (f"expert RBO {e['rbo']:.3f}, tau {e['kendall']:.3f} ({e['topics']} topics)" if e.get("rbo") is not None
                  else "no expert ordering among these answers")
        print(f"\n{row['ranker']} ({row['topics']}): nDCG@10 relevance {n['relevance']:.3f}, readability "
              f"{n['readability']:.3f}, credibility {n['credibility']:.3f}; {expert}; LLM x prompt order vs monoT5: "
              f"Kendall {row['kendall_vs_monot5_system_order']:.3f}; {row['ranker_calls']} calls, {row['seconds']:.1f} s")
        for s in row["systems"]:
            print(f"    {s['system']:<32} {s['prompt']:<11} n={s['n']:<4} NRP {s['nrp_mean']:.3f} "
                  f"[{s['nrp_low']:.3f}, {s['nrp_high']:.3f}]")
    if speed:
        print("\nefficiency (full answer set: 13 LLMs x 10 answers per topic)")
    for row in speed:
        print(f"  {row['ranker']:<10} {row['answers']} answers, {row['documents']} documents: one call per answer "
              f"{row['cached']['calls']} calls {row['cached']['seconds']:.1f} s; naive {row['naive']['calls']} calls "
              f"{row['naive']['seconds']:.1f} s; ratio calls {row['call_ratio']:.2f}x, time {row['time_ratio']:.2f}x; "
              f"same ranks: {row['same_ranks']}")


if __name__ == "__main__":
    main()
