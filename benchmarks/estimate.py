"""Do judge-assisted estimates hold on real data? Coverage and width of `judgetune estimate`'s intervals over
many random labeled subsets, with a judge frozen on other data.

For a set, every row is scored once by a frozen judge (saved in --cache, reused), then for each size n and each
of --draws seeded draws a uniform random subset of the labels is kept and `judgetune.estimating` computes every
system's mean (WebGLM: the 1-3 grade of 3 answering models on 100 questions) or win rate (RAGChecker: 8 RAG
systems in 280 human pairwise comparisons, each labeled by 2 annotators: 560 rows) and every pair's difference,
by PPI++, by the labels alone and by the judge alone. A draw's interval covers when it holds the all-labels value
(the figure with every row labeled). Rows report, per n, estimate ("mean" or "difference") and method: coverage,
mean width, mean absolute error, and for PPI++ the mean labels worth (labels-only over PPI++ variance).

WebGLM draws n questions and labels every model's answer to them (so n rows per system, paired differences);
n = 100 labels every row, which makes the all-labels value known (coverage 1, width 0). RAGChecker draws 4 n of
the 560 rows (one sample of all comparisons; each row counts for both its systems: about n rows per system); the
judge scores each response against the reference answer and a comparison's judge figure is the difference.

    python benchmarks/estimate.py --set webglm --judge runs/hybrid-stsb/judge.json --out FILE
    python benchmarks/estimate.py --set ragchecker --judge runs/hybrid-stsb/judge.json --out FILE
    python benchmarks/estimate.py --speed --out FILE   # 8 systems x 100k scored rows from a score file
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)
import numpy as np  # noqa: E402
from scipy import stats as scipy_stats  # noqa: E402

from judgetune import datasets  # noqa: E402
from judgetune.estimating import Observations, estimate_observations  # noqa: E402

SIZES = (20, 50, 100)
SETS = {"webglm": "linkage-webglm", "ragchecker": "ragchecker"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def _score(judge_path: Path, examples: list) -> list[float]:
    import judgetune

    with judgetune.load(judge_path) as judge:
        return [np.nan if s.score is None else s.score for s in judge.score_many(examples)]


def _cached(cache: Path, name: str, judge_path: Path, examples: list) -> list[float]:
    """The judge's score of every example, computed once per judge and set and kept in ``cache``."""
    path = cache / f"scores-{name}-{_sha(judge_path)}.json"
    if path.exists():
        return json.loads(path.read_text())["scores"]
    scores = _score(judge_path, examples)
    cache.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"judge": str(judge_path), "ids": [e.id for e in examples],
                                "scores": [None if np.isnan(s) else s for s in scores]}))
    return scores


def _codes(values: list[str]) -> tuple[list[str], np.ndarray]:
    names = list(dict.fromkeys(values))
    index = {name: i for i, name in enumerate(names)}
    return names, np.asarray([index[v] for v in values], dtype=int)


def webglm(judge: Path, cache: Path) -> tuple[Observations, tuple[float, float]]:
    """WebGLM's 300 graded answers, each scored by the judge: systems are the answering models."""
    examples, _ = datasets.load_data(SETS["webglm"])
    scores = np.asarray(_cached(cache, "webglm", judge, examples), dtype=float)
    names, system = _codes([e.meta["model"] for e in examples])
    _, inputs = _codes([e.group for e in examples])
    obs = Observations("linkage-webglm", [e.id for e in examples], np.arange(1, len(examples) + 1), names, system,
                       None, inputs, np.asarray([e.label for e in examples], dtype=float),
                       np.full(len(examples), np.nan), scores)
    return obs, _range(judge)


def ragchecker(judge: Path, cache: Path) -> tuple[Observations, tuple[float, float]]:
    """RAGChecker's 560 labeled comparisons; the judge scores each response against the reference answer, and a
    comparison's judge figure is answer_b's score minus answer's (on [low - high, high - low])."""
    from judgetune.datasets import Example

    examples, _ = datasets.load_data(SETS["ragchecker"])
    responses: dict[str, Example] = {}
    for e in examples:  # the two annotators' rows share their responses: each is scored once
        for slot, text in (("a", e.answer), ("b", e.answer_b)):
            key = f"{e.meta['instance_id']}-{slot}"
            responses.setdefault(key, Example(id=key, question=e.question, answer=text, references=e.references))
    scored = dict(zip(responses, _cached(cache, "ragchecker", judge, list(responses.values()))))
    diff = [scored[f"{e.meta['instance_id']}-b"] - scored[f"{e.meta['instance_id']}-a"] for e in examples]
    names, system = _codes([e.meta["model_a"] for e in examples] + [e.meta["model_b"] for e in examples])
    n = len(examples)
    obs = Observations("ragchecker", [e.id for e in examples], np.arange(1, n + 1), names, system[:n], system[n:],
                       np.full(n, -1), np.asarray([e.preference for e in examples], dtype=float), np.full(n, np.nan),
                       np.asarray(diff, dtype=float))
    low, high = _range(judge)
    return obs, (low - high, high - low)


def _range(judge: Path) -> tuple[float, float]:
    low, high = json.loads(judge.read_text())["label_range"]
    return float(low), float(high)


def _masked(obs: Observations, keep: np.ndarray) -> Observations:
    labels = np.where(keep, obs.labels, np.nan)
    return Observations(obs.where, obs.ids, obs.lines, obs.names, obs.system, obs.system_b, obs.inputs, labels,
                        obs.probabilities, obs.scores)


def _draw(obs: Observations, n: int, rng: np.random.Generator) -> np.ndarray:
    """Which rows keep their label: n questions' rows (pointwise), or 4 n rows of all (pairwise)."""
    if obs.pairwise:
        rows = rng.choice(len(obs), min(len(obs), 4 * n), replace=False)
        return np.isin(np.arange(len(obs)), rows)
    inputs = np.unique(obs.inputs)
    return np.isin(obs.inputs, rng.choice(inputs, min(len(inputs), n), replace=False))


FIELDS = {"mean": {"ppi++": ("ppi", "ppi_low", "ppi_high"), "labels": ("labels", "labels_low", "labels_high"),
                   "judge": ("judge", None, None)},
          "difference": {"ppi++": ("difference", "low", "high"),
                         "labels": ("labels_difference", "labels_low", "labels_high"),
                         "judge": ("judge_difference", None, None)}}


def _truth(obs: Observations, scale: tuple[float, float]) -> dict[str, list[float]]:
    """The all-labels value of every system and every pair, in the estimate's order."""
    full = estimate_observations(obs, scale)
    return {"mean": [s["labels"] for s in full.systems], "difference": [p["labels_difference"] for p in full.pairs]}


def _outcomes(records: list[dict], truth: list[float], what: str, tally: dict) -> None:
    """Add one draw's estimates of one kind (system means or differences) to the running tallies."""
    for record, target in zip(records, truth):
        for method, (key, low, high) in FIELDS[what].items():
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
            if method == "ppi++" and record.get("labels_worth") is not None:
                entry["worth"].append(record["labels_worth"])


def _rows(n: int, draws: int, tally: dict) -> list[dict[str, Any]]:
    out = []
    for (what, method), entry in tally.items():
        row = {"n": n, "what": what, "method": method, "coverage": float(np.mean(entry["covered"])),
               "width": float(np.mean(entry["width"])), "draws": draws, "estimates": len(entry["covered"]),
               "missing": entry["missing"], "error": float(np.mean(entry["error"]))}
        if entry["worth"]:
            row["labels_worth"] = float(np.mean(entry["worth"]))
            row["labels_worth_median"] = float(np.median(entry["worth"]))
        out.append(row)
    return out


def coverage(obs: Observations, scale: tuple[float, float], sizes: list[int], draws: int,
             seed: int) -> list[dict[str, Any]]:
    """Per size: every draw's estimates against the all-labels values (see the module)."""
    truth = _truth(obs, scale)
    rows = []
    for n in sizes:
        rng, tally = np.random.default_rng([seed, n]), {}
        for _ in range(draws):
            est = estimate_observations(_masked(obs, _draw(obs, n, rng)), scale)
            _outcomes(est.systems, truth["mean"], "mean", tally)
            _outcomes(est.pairs, truth["difference"], "difference", tally)
        rows += _rows(n, draws, tally)
        print(f"n={n}: " + ", ".join(f"{r['what']} {r['method']} {r['coverage']:.3f}" for r in rows[-6:]),
              file=sys.stderr)
    return rows


def judge_figures(obs: Observations, scale: tuple[float, float]) -> dict[str, Any]:
    """The judge's Spearman with the labels over every row, and what it is worth with every label (per system)."""
    from judgetune import stats
    from judgetune.estimating import sides

    spearman = scipy_stats.spearmanr(obs.scores, obs.labels).statistic
    worth = {side.name: stats.labels_worth(side.y[side.inside], side.f[side.inside])["labels_worth"]
             for side in sides(obs, scale)}
    return {"spearman": float(spearman), "labels_worth_all_rows": worth,
            "labels_worth_all_rows_mean": float(np.mean(list(worth.values())))}


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=sorted(SETS))
    parser.add_argument("--judge", type=Path, help="a judge.json frozen on other data")
    parser.add_argument("--draws", type=int, default=500)
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cache", type=Path, default=Path("runs/estimate-benchmark"),
                        help="where the judge's scores are kept between runs")
    parser.add_argument("--speed", action="store_true", help="time judgetune estimate on --rows x --systems rows")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--systems", type=int, default=8)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.speed:
        payload = {"rows": [speed(args.rows, args.systems, args.seed)], "meta": {"rows_per_system": args.rows}}
    else:
        if args.set is None or args.judge is None:
            parser.error("--set and --judge are needed (or --speed)")
        obs, scale = (webglm if args.set == "webglm" else ragchecker)(args.judge, args.cache)
        judge = json.loads(args.judge.read_text())
        meta = {"set": SETS[args.set], "judge": {"path": str(args.judge), "sha256": _sha(args.judge),
                                                 "kind": judge["judge"], "tuned_on": judge.get("data", {}).get("source"),
                                                 "label_range": judge["label_range"]},
                "systems": obs.names, "rows": len(obs), "draws": args.draws, "seed": args.seed,
                "target": "the all-labels value: each system's mean (win rate) with every row labeled",
                "judge_figures": judge_figures(obs, scale)}
        payload = {"rows": coverage(obs, scale, args.sizes, args.draws, args.seed), "meta": meta}
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
