"""Do judge-assisted estimates hold on real data? Coverage and width of `judgetune estimate`'s intervals over
many random labeled subsets: labels alone, PPI++ with a judge frozen on other data, and ``cross``: a judge fitted
on the drawn labels themselves (``judgetune estimate --fit signals``: the frozen judge's score and the hybrid's cheap
signals, cross-fitted over folds of every system's labels).

For a set, every row is scored once by the frozen judge and its signals computed once (kept in --cache), then for
each size n and each of --draws seeded draws a random subset of the labels is kept and `judgetune.estimating`
computes every system's mean (or win rate) and every pair's difference by each method. A draw's interval covers
when it holds the all-labels value (the figure with every row labeled).

- webglm: the 1-3 grade of 3 answering models on 100 questions; n questions drawn, every model's answer to them
  labeled (n rows per system, paired differences).
- xsumfaith: SummaC's XSum faithfulness labels (0/1; 90% are 0: piled at one end), 485 summaries by 5 systems
  (BERTS2S 250, TConvS2S 132, Gold 57, PtGen 37, TranS2S 9); n rows drawn per system (a system with n rows or
  fewer is all labeled: its value known).
- summeval: SummaC's SummEval subset (0/1; 63% are 1), 2 systems x 50 summaries; n rows per system.
- stsb: STS Benchmark's test split (1,379 sentence pairs, 0-5), the mean similarity per source (6: MSRvid,
  images, track5, answer-answer, MSRpar, headlines); n rows per source. Labels spread over the scale; the
  hybrid judge was tuned on the train split.
- ragchecker: 8 RAG systems in 280 human pairwise comparisons, each labeled by 2 annotators (560 rows); 4 n rows
  drawn of all (one sample of all comparisons: about n per system); win rates. ``cross`` also reads RAGChecker's
  own metric values for each response (overall, correctness, completeness: an LLM judge's, computed by
  RAGChecker's authors, ragchecker/baseline_ragchecker.json), answer_b's minus answer's.

Rows, per n, estimate ("mean" or "difference") and method: coverage, mean width, mean absolute error, and the mean
labels worth (labels-only over the method's variance).

    python benchmarks/estimate.py --set webglm --judge runs/hybrid-stsb/judge.json --out FILE
    python benchmarks/estimate.py --speed --out FILE   # 8 systems x 100k scored rows from a score file
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)
import numpy as np  # noqa: E402
from scipy import stats as scipy_stats  # noqa: E402

from judgetune import datasets  # noqa: E402
from judgetune.estimating import Observations, estimate_observations  # noqa: E402
from judgetune.estimating._cross import cross_observations, pooled_weight  # noqa: E402
from judgetune.judges import signal_features  # noqa: E402

SIZES = (2, 3, 5, 10, 20, 50)
SETS = {"webglm": "linkage-webglm", "ragchecker": "ragchecker", "xsumfaith": "summac-xsumfaith",
        "summeval": "summac-summeval", "stsb": "stsb"}
SYSTEM_FIELD = {"summac-xsumfaith": "model_name", "summac-summeval": "model_name"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _cached(cache: Path, name: str, judge_path: Path, examples: list) -> tuple[np.ndarray, np.ndarray]:
    """The judge's score and the cheap signals of every example, computed once per judge and set (in ``cache``)."""
    import judgetune

    path = cache / f"features-{name}-{_sha(judge_path)}.json"
    if path.exists():
        saved = json.loads(path.read_text())
        return (np.asarray(saved["scores"], dtype=float),
                np.asarray(saved["signals"], dtype=float).reshape(len(examples), -1))
    with judgetune.load(judge_path) as judge:
        scores = np.asarray([np.nan if s.score is None else s.score for s in judge.score_many(examples)])
    signals, names = signal_features(examples)
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"judge": str(judge_path), "ids": [e.id for e in examples], "signal_names": names,
                                "scores": [None if np.isnan(s) else s for s in scores],
                                "signals": [[None if np.isnan(v) else v for v in row] for row in signals]}))
    return scores, signals


def _codes(values: list[str]) -> tuple[list[str], np.ndarray]:
    names = list(dict.fromkeys(values))
    index = {name: i for i, name in enumerate(names)}
    return names, np.asarray([index[v] for v in values], dtype=int)


def _systems(source: str, examples: list) -> list[str]:
    """Each example's system: its ``model`` (WebGLM), its source (STS-B) or, for the SummaC sets, the summarizer
    named in the source file (the catalog keeps the claim, not who wrote it)."""
    if source == "stsb":
        return [e.meta["source"] for e in examples]
    if source not in SYSTEM_FIELD:
        return [e.meta["model"] for e in examples]
    name = source.split("-", 1)[1]
    raw = json.loads((Path(os.environ["JUDGETUNE_DATA_MIRROR"]) / "summac_subsets" / f"{name}.json").read_text())
    return [raw[e.id][SYSTEM_FIELD[source]] for e in examples]


def pointwise(source: str, judge: Path, cache: Path) -> tuple[Observations, tuple[float, float], np.ndarray]:
    """A set's rows as observations scored by the judge, its scale, and the features ``cross`` fits on."""
    examples, _ = datasets.load_data(source)
    if source == "stsb":
        examples = [e for e in examples if e.meta["split"] == "test"]
    scores, signals = _cached(cache, source, judge, examples)
    names, system = _codes(_systems(source, examples))
    _, inputs = _codes([e.group for e in examples])
    obs = Observations(source, [e.id for e in examples], np.arange(1, len(examples) + 1), names, system, None, inputs,
                       np.asarray([e.label for e in examples], dtype=float), np.full(len(examples), np.nan), scores)
    known = datasets.get_source(source).scale
    obs.scale = (float(known.low), float(known.high))  # the labels' bounds (the judge's scale may be wider)
    return obs, _range(judge), np.column_stack([scores, signals])


def ragchecker(judge: Path, cache: Path) -> tuple[Observations, tuple[float, float], np.ndarray]:
    """RAGChecker's 560 labeled comparisons; the judge scores each response against the reference answer, and a
    comparison's judge figure (and each signal) is answer_b's minus answer's (on [low - high, high - low])."""
    from judgetune.datasets import Example

    examples, _ = datasets.load_data(SETS["ragchecker"])
    responses: dict[str, Example] = {}
    for e in examples:  # the two annotators' rows share their responses: each is scored once
        for slot, text in (("a", e.answer), ("b", e.answer_b)):
            key = f"{e.meta['instance_id']}-{slot}"
            responses.setdefault(key, Example(id=key, question=e.question, answer=text, references=e.references))
    scores, signals = _cached(cache, "ragchecker", judge, list(responses.values()))
    at = {key: i for i, key in enumerate(responses)}
    a = [at[f"{e.meta['instance_id']}-a"] for e in examples]
    b = [at[f"{e.meta['instance_id']}-b"] for e in examples]
    metrics = _ragchecker_metrics()
    own = np.asarray([[metrics[(str(e.meta["instance_id"]), slot)][k] for k in ("overall", "correctness", "completeness")
                       for slot in ("b", "a")] for e in examples], dtype=float)
    features = np.column_stack([scores[b] - scores[a], signals[b] - signals[a], own[:, ::2] - own[:, 1::2]])
    names, system = _codes([e.meta["model_a"] for e in examples] + [e.meta["model_b"] for e in examples])
    n = len(examples)
    obs = Observations("ragchecker", [e.id for e in examples], np.arange(1, n + 1), names, system[:n], system[n:],
                       np.full(n, -1), np.asarray([e.preference for e in examples], dtype=float), np.full(n, np.nan),
                       features[:, 0])
    low, high = _range(judge)
    return obs, (low - high, high - low), features


def _ragchecker_metrics() -> dict[tuple[str, str], dict[str, float]]:
    """RAGChecker's own metric values per response, keyed by (instance id, "a" or "b")."""
    import ast

    raw = json.loads((Path(os.environ["JUDGETUNE_DATA_MIRROR"]) / "ragchecker" / "baseline_ragchecker.json").read_text())
    out = {}
    for item in raw:
        for slot, key in (("a", "model1"), ("b", "model2")):
            model = ast.literal_eval(item[key]) if isinstance(item[key], str) else item[key]
            out[(str(item["instance_id"]), slot)] = {k.removesuffix("_label"): float(v)
                                                     for k, v in model["ragchecker"].items()}
    return out


def _range(judge: Path) -> tuple[float, float]:
    low, high = json.loads(judge.read_text())["label_range"]
    return float(low), float(high)


def _masked(obs: Observations, keep: np.ndarray) -> Observations:
    return replace(obs, labels=np.where(keep, obs.labels, np.nan))


def _draw(obs: Observations, n: int, rng: np.random.Generator, paired: bool) -> np.ndarray:
    """Which rows keep their label: 4 n rows of all (pairwise), n inputs' rows (``paired``), or n rows per system."""
    if obs.pairwise:
        rows = rng.choice(len(obs), min(len(obs), 4 * n), replace=False)
        return np.isin(np.arange(len(obs)), rows)
    if paired:
        inputs = np.unique(obs.inputs)
        return np.isin(obs.inputs, rng.choice(inputs, min(len(inputs), n), replace=False))
    keep = np.zeros(len(obs), dtype=bool)
    for code in range(len(obs.names)):
        rows = np.flatnonzero(obs.system == code)
        keep[rng.choice(rows, min(len(rows), n), replace=False)] = True
    return keep


FIELDS = {"mean": {"labels": ("labels", "labels_low", "labels_high"), "judge": ("judge", None, None),
                   "estimate": ("ppi", "ppi_low", "ppi_high")},
          "difference": {"labels": ("labels_difference", "labels_low", "labels_high"),
                         "judge": ("judge_difference", None, None), "estimate": ("difference", "low", "high")}}


def _truth(obs: Observations, scale: tuple[float, float]) -> dict[str, list[float]]:
    """The all-labels value of every system and every pair, in the estimate's order."""
    full = estimate_observations(obs, scale)
    return {"mean": [s["labels"] for s in full.systems], "difference": [p["labels_difference"] for p in full.pairs]}


def _known(systems: list[dict]) -> set[str]:
    """The systems whose every row is labeled in a draw: their values are known, so they are left out of the tallies
    (a difference only when both of its systems are known)."""
    return {s["system"] for s in systems if s["labeled"] == s["rows"]}


def _outcomes(records: list[dict], truth: list[float], what: str, tally: dict, methods: dict[str, str],
              known: set[str]) -> None:
    """Add one draw's estimates of one kind (system means or differences) to the running tallies, but for the known
    values; ``methods`` maps a field group of FIELDS to the method name it is tallied under."""
    for record, target in zip(records, truth):
        if (record["system"] in known) if what == "mean" else (record["a"] in known and record["b"] in known):
            continue
        for group, method in methods.items():
            key, low, high = FIELDS[what][group]
            value = record.get(key)
            entry = tally.setdefault((what, method), {"covered": [], "width": [], "error": [], "worth": [],
                                                      "missing": 0})
            if value is None:
                entry["missing"] += 1
                continue
            lo, hi = (record[low], record[high]) if low else (value, value)
            entry["covered"].append(lo - 1e-9 <= target <= hi + 1e-9)
            entry["width"].append(hi - lo)
            entry["error"].append(abs(value - target))
            if group == "estimate" and record.get("labels_worth") is not None:
                entry["worth"].append(record["labels_worth"])


def _t_outcomes(obs: Observations, truth: list[float], tally: dict) -> None:
    """Each system's labels-only mean with Student's t interval (no scale): what the estimate gave before its
    intervals knew the scale, tallied as method ``labels-t``."""
    from judgetune import stats
    from judgetune.estimating import sides

    entry = tally.setdefault(("mean", "labels-t"), {"covered": [], "width": [], "error": [], "worth": [], "missing": 0})
    for side, target in zip(sides(obs, (0.0, 1.0) if obs.pairwise else obs.scale or (0.0, 1.0)), truth):
        y = side.y[side.mine]
        if len(y) == int(side.inside.sum()):  # every row labeled: the value is known (see _known)
            continue
        if len(y) < 2:
            entry["missing"] += 1
            continue
        est = stats.labels_mean(y, rows=int(side.inside.sum()))
        entry["covered"].append(est.low - 1e-9 <= target <= est.high + 1e-9)
        entry["width"].append(est.width)
        entry["error"].append(abs(est.value - target))


def _rows(n: int, draws: int, tally: dict) -> list[dict[str, Any]]:
    out = []
    for (what, method), entry in tally.items():
        if not entry["covered"]:  # every value known at this n (see _known)
            continue
        covered = np.asarray(entry["covered"], dtype=float)
        row = {"n": n, "what": what, "method": method, "coverage": float(covered.mean()),
               "coverage_se": float(covered.std(ddof=1) / np.sqrt(len(covered))) if len(covered) > 1 else None,
               "width": float(np.mean(entry["width"])), "draws": draws, "estimates": len(entry["covered"]),
               "missing": entry["missing"], "error": float(np.mean(entry["error"]))}
        if entry["worth"]:
            row["labels_worth"] = float(np.mean(entry["worth"]))
            row["labels_worth_median"] = float(np.median(entry["worth"]))
        out.append(row)
    return out


def coverage(obs: Observations, scale: tuple[float, float], features: np.ndarray, sizes: list[int], draws: int,
             seed: int, paired: bool) -> list[dict[str, Any]]:
    """Per size: every draw's estimates by each method against the all-labels values (see the module)."""
    truth = _truth(obs, scale)
    rows = []
    for n in sizes:
        rng, tally = np.random.default_rng([seed, n]), {}
        for draw in range(draws):
            drawn = _masked(obs, _draw(obs, n, rng, paired))
            est = estimate_observations(drawn, scale)
            known = _known(est.systems)
            _t_outcomes(drawn, truth["mean"], tally)
            for what, records in (("mean", est.systems), ("difference", est.pairs)):
                _outcomes(records, truth[what], what, tally, {"labels": "labels", "judge": "judge", "estimate": "ppi++"},
                          known)
            if (~np.isnan(drawn.labels)).sum() >= 10:
                bounds = scale if obs.pairwise else obs.scale
                fitted = cross_observations(drawn, features, bounds, seed=draw)
                crossed = estimate_observations(fitted, scale, lam=pooled_weight(fitted, bounds), method="cross")
                for what, records in (("mean", crossed.systems), ("difference", crossed.pairs)):
                    _outcomes(records, truth[what], what, tally, {"estimate": "cross"}, known)
        rows += _rows(n, draws, tally)
        print(f"n={n}: " + ", ".join(f"{r['what']} {r['method']} {r['coverage']:.3f} {r['width']:.3f}"
                                     for r in rows if r["n"] == n and r["method"] != "judge"), file=sys.stderr)
    return rows


def judge_figures(obs: Observations, scale: tuple[float, float]) -> dict[str, Any]:
    """The judge's Spearman with the labels over every row, and what it is worth with every label (per system)."""
    from judgetune import stats
    from judgetune.estimating import sides

    ok = ~np.isnan(obs.scores)
    spearman = scipy_stats.spearmanr(obs.scores[ok], obs.labels[ok]).statistic
    worth = {side.name: stats.labels_worth(side.y[side.inside], side.f[side.inside])["labels_worth"]
             for side in sides(obs, scale) if side.inside.sum() > 2}
    return {"spearman": float(spearman), "failed": int((~ok).sum()), "labels_worth_all_rows": worth,
            "labels_worth_all_rows_mean": float(np.mean(list(worth.values())))}


def piles(obs: Observations) -> dict[str, float]:
    """The share of labels at the scale's top value, at its bottom value, and at the commonest value."""
    y = obs.labels[~np.isnan(obs.labels)]
    values, counts = np.unique(y, return_counts=True)
    return {"labels_at_top": float(np.mean(y == y.max())), "labels_at_bottom": float(np.mean(y == y.min())),
            "labels_at_commonest": float(counts.max() / len(y)), "commonest": float(values[counts.argmax()])}


def _speed_files(folder: Path, rows: int, systems: int, seed: int) -> tuple[Path, Path, Path]:
    """A data file of ``systems`` x ``rows`` outputs (labels on 2% of the inputs), its score file, and a judge.json
    on the 1-5 scale (an untuned length judge: the scores are given, the judge only names the scale)."""
    from judgetune.config import JudgeConfig

    rng = np.random.default_rng(seed)
    labeled = rng.random(rows) < 0.02
    data, scores = folder / "outputs.jsonl", folder / "scored.jsonl"
    with open(data, "w") as d, open(scores, "w") as s:
        for k in range(systems):
            truth = np.clip(np.round(rng.normal(3 + 0.05 * k, 1, rows)), 1, 5)
            judged = truth + rng.normal(0, 0.8, rows)
            for i in range(rows):
                row = {"id": f"q{i}-s{k}", "question": f"question {i}", "answer": f"answer {k} to {i}",
                       "group": f"q{i}", "meta": {"system": f"s{k}"}}
                if labeled[i]:
                    row["label"] = float(truth[i])
                d.write(json.dumps(row) + "\n")
                s.write(json.dumps({"id": row["id"], "score": float(judged[i]), "parsed": True}) + "\n")
    config = JudgeConfig(judge="length", params={}, lm=None, instruction=None, demos=[], calibrator=None,
                         label_range=[1.0, 5.0]).save(folder / "judge.json")
    return Path(config), data, scores


def speed(rows: int, systems: int, seed: int) -> dict[str, Any]:
    """Seconds and peak memory of `judgetune estimate --scores` on ``systems`` x ``rows`` rows, in a process of
    its own."""
    import resource
    import subprocess
    import tempfile
    import time

    with tempfile.TemporaryDirectory(prefix="estimate-speed-") as folder:
        config, data, scores = _speed_files(Path(folder), rows, systems, seed)
        command = [sys.executable, "-m", "judgetune.cli", "estimate", "--config", str(config), "--data", str(data),
                   "--by", "system", "--scores", str(scores), "--out", str(Path(folder) / "estimate.json")]
        start, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - start
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise SystemExit(f"estimate failed: {done.stderr}")
        result = json.loads((Path(folder) / "estimate.json").read_text())
    return {"rows": rows * systems, "systems": systems, "seconds": round(seconds, 2),
            "cpu_seconds": round(usage.ru_utime + usage.ru_stime - cpu.ru_utime - cpu.ru_stime, 2),
            "peak_mb": round(usage.ru_maxrss / 1024), "pairs": len(result["pairs"]), "command": "judgetune estimate "
            "--config judge.json --data outputs.jsonl --by system --scores scored.jsonl --out estimate.json"}


def table(paths: list[Path]) -> str:
    """A Markdown table of result files: per set, size and estimate, each method's coverage and width, and what
    the judge-assisted methods are worth (docs/estimate.md quotes it)."""
    lines = ["| set (labels at the commonest value) | n | estimate | labels, t (unbounded) | labels only | PPI++ | "
             "cross (`--fit signals`) | worth: PPI++ / cross |", "|---|---|---|---|---|---|---|---|"]
    for path in paths:
        result = json.loads(path.read_text())
        meta = result["meta"]
        rows = {(r["n"], r["what"], r["method"]): r for r in result["rows"]}
        name = f"{meta['set']} ({100 * meta['labels_at_commonest']:.0f}%)"
        for n, what in sorted({(r["n"], r["what"]) for r in result["rows"]}, key=lambda k: (k[0], k[1] != "mean")):
            cells = []
            for method in ("labels-t", "labels", "ppi++", "cross"):
                r = rows.get((n, what, method))
                cells.append("-" if r is None else f"{100 * r['coverage']:.1f}% / {r['width']:.3f}")
            worth = [rows.get((n, what, m), {}).get("labels_worth") for m in ("ppi++", "cross")]
            shown = " / ".join("-" if w is None else f"{w:.2f}" for w in worth)
            lines.append(f"| {name} | {n} | {what} | " + " | ".join(cells) + f" | {shown} |")
            name = ""
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=sorted(SETS))
    parser.add_argument("--judge", type=Path, help="a judge.json frozen on other data")
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=Path("runs/estimate-benchmark"),
                        help="where the judge's scores and the signals are kept between runs")
    parser.add_argument("--speed", action="store_true", help="time judgetune estimate on --rows x --systems rows")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--systems", type=int, default=8)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--table", type=Path, nargs="+", metavar="RESULT", help="print the Markdown table of these "
                        "result files (coverage / mean width per method) and stop")
    args = parser.parse_args()
    if args.table:
        print(table(args.table))
        return
    if args.speed:
        payload = {"rows": [speed(args.rows, args.systems, args.seed)], "meta": {"rows_per_system": args.rows}}
    else:
        if args.set is None or args.judge is None:
            parser.error("--set and --judge are needed (or --speed)")
        if args.set == "ragchecker":
            obs, scale, features = ragchecker(args.judge, args.cache)
        else:
            obs, scale, features = pointwise(SETS[args.set], args.judge, args.cache)
        judge = json.loads(args.judge.read_text())
        meta = {"set": SETS[args.set], "judge": {"path": str(args.judge), "sha256": _sha(args.judge),
                                                 "kind": judge["judge"], "tuned_on": judge.get("data", {}).get("source"),
                                                 "label_range": judge["label_range"]},
                "systems": obs.names, "rows": len(obs), "draws": args.draws, "seed": args.seed,
                "target": "the all-labels value: each system's mean (win rate) with every row labeled",
                "cross": "judgetune estimate --fit signals: ridge on the judge's score and the hybrid's cheap signals, "
                         "5 folds over every system's drawn labels (whole inputs per fold); needs 10 labels in all",
                "judge_figures": judge_figures(obs, scale), **piles(obs)}
        payload = {"rows": coverage(obs, scale, features, args.sizes, args.draws, args.seed,
                                    paired=args.set == "webglm"), "meta": meta}
    print(json.dumps(payload, indent=1))
    if args.out:
        note = f"loadavg at the end {os.getloadavg()[0]:.1f} (other jobs share the 2 cores)"
        extra = payload.pop("meta", {})
        path = _results.write_result(args.out, payload, sys.argv, machine_note=note)
        written = json.loads(path.read_text())
        written["meta"].update(extra)  # the set, the judge and its figures beside the date, commit and command
        path.write_text(json.dumps(written, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
