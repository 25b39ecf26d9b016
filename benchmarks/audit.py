"""The audit on the planted-bias testbed (replicated), and on real frozen judges of the embedded model.

Testbed: for each replicate seed, a rubric and a pairwise judge on :class:`judgetune.testing.biased.BiasedLM`
(known position and length biases) and on its unbiased twin; a row per (testbed, probe) with the
planted effect and the audit's effect and interval, and a summary: how often the 95% interval
covered the planted effect, and how often a probe of the twin was flagged (q < 0.05).

Real (``--real``): an untuned judge of each kind on the embedded model (pairwise on LLMBar-natural,
rubric and likelihood on MSRpar, listwise on TREC-DL-NF), and any ``--configs`` judge.json files (each
with ``=DATA``), audited on their data's test split (at most ``--real-items`` items, two per question).

    python benchmarks/audit.py --quick --json
    python benchmarks/audit.py --replicates 20 --out benchmarks/results/audit-testbed.json
    python benchmarks/audit.py --replicates 0 --real --real-items 40 --out benchmarks/results/audit-real.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import _results  # benchmarks/ is on sys.path when a benchmark runs

from judgetune import audit, datasets
from judgetune.config import JudgeConfig
from judgetune.scoring import load_config_lm
from judgetune.testing.biased import PLANTED, audit_testbeds, unbiased_twin


def _words(probe: str) -> int:
    return len({"verbosity": audit.PADDING, "distraction": audit.DISTRACTION}.get(probe, "").split())


def testbed_rows(replicates: int, n: int) -> list[dict]:
    rows = []
    for rep in range(replicates):
        for name, biases in (("planted", PLANTED), ("twin", unbiased_twin())):
            for bed in audit_testbeds(biases, n=n, seed=rep):
                result = audit.audit(bed.config, bed.examples, bed.lm, seed=rep)
                for r in result["probes"]:
                    planted = biases.planted(r["probe"], pairwise=bed.pairwise, words=_words(r["probe"]))
                    rows.append({"testbed": f"{name}-{bed.name}", "replicate": rep, "probe": r["probe"],
                                 "planted": planted, "effect": r["effect"], "low": r["low"], "high": r["high"],
                                 "q": r["q"], "mde": r["mde"], "n": r["n"],
                                 "covered": r["low"] <= planted <= r["high"], "flagged": r["q"] < 0.05})
    return rows


def summary(rows: list[dict]) -> list[dict]:
    out = {}
    for r in rows:
        key = (r["testbed"], r["probe"])
        s = out.setdefault(key, {"testbed": r["testbed"], "probe": r["probe"], "planted": r["planted"],
                                 "replicates": 0, "covered": 0, "flagged": 0, "mean_effect": 0.0})
        s["replicates"] += 1
        s["covered"] += r["covered"]
        s["flagged"] += r["flagged"]
        s["mean_effect"] += r["effect"]
    for s in out.values():
        s["mean_effect"] /= s["replicates"]
    return list(out.values())


PER_GROUP = 2  # audited answers per question
# name -> (kind, data, settings): the defaults of each kind, and a rubric with demos (self-consistency applies)
REAL = {"pairwise": ("pairwise", "llmbar-natural", {}), "rubric": ("rubric", "sts2012-msrpar", {}),
        "likelihood": ("likelihood", "sts2012-msrpar", {}), "linkage": ("linkage", "linkage-trec-dl-nf", {}),
        "rubric-k2": ("rubric", "sts2012-msrpar", {"k": 2})}


def untuned(kind: str, data: str, lm, seed: int, params: dict) -> JudgeConfig:
    """The judge of ``kind`` with its default settings (and ``params``) on ``data`` (demos and references
    from the train split where it has any), frozen uncalibrated: what the tuner starts from."""
    from judgetune.judges import make_judge
    from judgetune.lm import parse_lm_spec

    examples, label_range = datasets.load_data(data)
    splits = datasets.split_examples(examples, seed=seed)
    judge = make_judge(kind, lm, train=splits["train"], label_range=label_range, params=params,
                       seed=seed)
    return JudgeConfig.from_judge(judge, lm=parse_lm_spec("local:smollm2").to_dict(), calibrator=None,
                                  label_range=label_range, seed=seed, data={"source": data})


def audit_rows(config: JudgeConfig, data: str, lm, items: int, seed: int, name: str) -> list[dict]:
    examples, _ = datasets.load_data(data, **{k: config.data[k] for k in ("fields", "label") if config.data.get(k)})
    pool = datasets.split_examples(examples, seed=config.seed)["test"]
    # a few answers of many questions (clusters), references drawn from every answer of the test split
    test = datasets.limit_by_group(datasets.sample_per_group(pool, PER_GROUP, seed=seed), items, seed=seed)
    start = time.time()
    result = audit.audit(config, test, lm, seed=seed, progress=True)
    seconds = round(time.time() - start, 1)
    rows = [{"judge": name, "data": data, "seconds": seconds, **r} for r in result["probes"]]
    return rows + [{"judge": name, "data": data, "probe": r["probe"], "not_run": r["why"]}
                   for r in result["not_applicable"]]


def real_rows(names: list[str], specs: list[str], items: int, seed: int, freeze: Path | None) -> list[dict]:
    from judgetune.lm import load_lm

    rows = []
    if names:
        lm = load_lm("local:smollm2")
        try:
            for name in names:
                kind, data, params = REAL[name]
                config = untuned(kind, data, lm, seed, params)
                if freeze:
                    config.save(freeze / f"{name}-{data}" / "judge.json")
                rows += audit_rows(config, data, lm, items, seed, f"{name} (untuned)")
        finally:
            lm.close()
    for spec in specs:
        path, _, data = spec.partition("=")
        config = JudgeConfig.load(path)
        lm = load_config_lm(config)
        try:
            rows += audit_rows(config, data, lm, items, seed, path)
        finally:
            if lm is not None:
                lm.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 replicates, 45 items")
    parser.add_argument("--replicates", type=int, default=20)
    parser.add_argument("--items", type=int, default=60, help="testbed items per judge")
    parser.add_argument("--real", nargs="*", choices=list(REAL), metavar="NAME",
                        help="audit untuned judges on the embedded model (no NAME: the four kinds, pairwise/"
                             f"LLMBar-natural, rubric and likelihood/MSRpar, listwise/TREC-DL-NF; names: {', '.join(REAL)})")
    parser.add_argument("--freeze", type=Path, help="with --real: write the untuned judges' judge.json files here")
    parser.add_argument("--configs", nargs="*", default=[], metavar="JUDGE.JSON=DATA")
    parser.add_argument("--real-items", type=int, default=60, help="items audited per real judge (whole groups)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    replicates, n = (2, 45) if args.quick else (args.replicates, args.items)
    real = [] if args.real is None else (args.real or ["pairwise", "rubric", "likelihood", "linkage"])
    start = time.time()
    rows = testbed_rows(replicates, n)
    payload = {
        "meta": _results.meta(sys.argv),
        "rows": rows, "summary": summary(rows), "testbed_seconds": round(time.time() - start, 1),
        "real": real_rows(real, args.configs, args.real_items, args.seed, args.freeze)}
    text = json.dumps(payload, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    if args.json:
        print(text)
    elif not args.out:
        for s in payload["summary"]:
            print(f"{s['testbed']:<18}{s['probe']:<17}planted {s['planted']:+.3f}  mean {s['mean_effect']:+.3f}  "
                  f"covered {s['covered']}/{s['replicates']}  flagged {s['flagged']}/{s['replicates']}")
        for r in payload["real"]:
            print(json.dumps(r))


if __name__ == "__main__":
    main()
