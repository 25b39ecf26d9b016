"""How `judgetune score` scales: rows per second and peak memory from 10k to 1M rows, what a SIGKILL costs.

Each size is a JSONL file of MSRpar pairs repeated under unique ids, scored by a frozen judge (bm25 or
hybrid fitted on 200 MSRpar training pairs; embedding; likelihood on the embedded model) in a fresh
process: `judgetune score` streaming (engine ``local``), the same on a local Ray cluster of
``--ray-workers`` CPUs (engine ``ray``, when Ray is installed) and, up to ``--in-memory-max`` rows, the
way `score` worked before streaming (engine ``in-memory``: read every row, score, write at the end).
Peak RSS is the scoring process's own (``wait4``). With ``--kill-at`` one run per size is SIGKILLed
when that share of its rows is written, then re-run: ``resume_lost_rows`` counts the input ids missing
or repeated in the final output (the goal is 0) and ``rescored_rows`` the rows written before the kill
that the re-run scored again.

    python benchmarks/score_scale.py --sizes 10000 100000 1000000 --json --out benchmarks/results/score_scale.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_result  # noqa: E402

IN_MEMORY = """
import sys
from judgetune import datasets
from judgetune.config import JudgeConfig
from judgetune.scoring import load_config_lm, score_protocol
from judgetune.tuning import write_predictions
config = JudgeConfig.load(sys.argv[1])
examples = datasets.read_examples(sys.argv[2], require_label=False)
scored = score_protocol(config, examples, load_config_lm(config))
write_predictions(sys.argv[3], scored.items, scored.verdicts, scored.scores)
"""


def make_judge_file(kind: str, folder: Path) -> Path:
    from judgetune import datasets
    from judgetune.config import JudgeConfig
    from judgetune.judges import make_judge
    from judgetune.lm import load_lm

    examples = datasets.load("sts2012-msrpar")
    train = [e for e in examples if e.meta["split"] == "train"][:200]
    lm = load_lm("local:smollm2") if kind == "likelihood" else None
    judge = make_judge(kind, lm, train=train, label_range=(0.0, 5.0), params={})
    spec = {"spec": "local:smollm2", "kind": "local", "model": "smollm2", "api_base": None} if lm else None
    return JudgeConfig.from_judge(judge, lm=spec, calibrator=None, label_range=(0.0, 5.0)).save(folder / f"{kind}.json")


def make_data(rows: int, folder: Path) -> Path:
    from judgetune import datasets

    path = folder / f"data-{rows}.jsonl"
    if path.exists():
        return path
    pairs = [(e.answer, e.references[0].text) for e in datasets.load("sts2012-msrpar")]
    with open(path, "w", encoding="utf-8") as handle:
        for i in range(rows):
            answer, reference = pairs[i % len(pairs)]
            handle.write(json.dumps({"id": f"r{i}", "answer": answer, "reference": reference}) + "\n")
    return path


def run(command: list[str], *, kill_when: tuple[Path, int] | None = None) -> dict:
    """Run a scoring process; its wall time, peak RSS (MB) and exit; SIGKILL it when the part file has that many rows."""
    # a fresh answer cache per run: an LM judge's answers are computed, never read from an earlier run's cache
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_WAIT_POLICY": "PASSIVE",
           "JUDGETUNE_CACHE_DIR": tempfile.mkdtemp(prefix="score-scale-cache-")}
    start = time.monotonic()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO)
    killed = False
    if kill_when is not None:
        part, rows = kill_when
        while process.poll() is None:
            if part.exists() and _lines(part) >= rows:
                process.send_signal(signal.SIGKILL)
                killed = True
                break
            time.sleep(0.2)
    _, status, usage = os.wait4(process.pid, 0)
    seconds = time.monotonic() - start
    stdout, stderr = process.stdout.read().decode(), process.stderr.read().decode()
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0 and not killed:
        raise SystemExit(f"{' '.join(command)} failed ({process.returncode}):\n{stderr[-2000:]}")
    return {"seconds": seconds, "peak_rss_mb": round(usage.ru_maxrss / 1024, 1), "killed": killed, "stdout": stdout}


def _lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(block.count(b"\n") for block in iter(lambda: handle.read(1 << 20), b""))


def score_command(judge: Path, data: Path, out: Path, engine: str, workers: int) -> list[str]:
    if engine == "in-memory":
        return [sys.executable, "-c", IN_MEMORY, str(judge), str(data), str(out)]
    command = [sys.executable, "-m", "judgetune.cli", "score", "--config", str(judge), "--data", str(data), "--out",
               str(out), "--force"]
    return command + (["--engine", "ray", "--workers", str(workers)] if engine == "ray" else [])


def cores_used(judge: str, engine: str, workers: int) -> int:
    """The cores a run keeps busy: an LM judge's llama.cpp threads in-process; on Ray, its actors times the threads
    each reserves (``ray_engine.actor_threads``); one per actor or process for any other judge."""
    from judgetune.lm import embedded_threads

    threads = embedded_threads() if judge == "likelihood" else 1
    if engine != "ray":
        return threads
    return workers * (min(threads, max(1, (os.cpu_count() or 1) // workers)) if judge == "likelihood" else 1)


def resume_cost(judge: Path, data: Path, rows: int, folder: Path, kill_at: float) -> dict:
    """Kill a run when ``kill_at`` of its rows are written, re-run it, and check the output against the input."""
    out = folder / "resumed.jsonl"
    out.unlink(missing_ok=True)
    part = folder / "resumed.jsonl.part"
    command = score_command(judge, data, out, "local", 0)[:-1]  # without --force: the re-run resumes
    first = run(command, kill_when=(part / "rows.jsonl", int(rows * kill_at)))
    written = _lines(part / "rows.jsonl") if first["killed"] else rows
    second = run(command)
    kept = int(re.search(r"(\d+) kept from the interrupted run", second["stdout"]).group(1)) if first["killed"] else rows
    with open(out, encoding="utf-8") as handle:
        ids = [json.loads(line)["id"] for line in handle]
    expected = [f"r{i}" for i in range(rows)]
    lost = len(set(expected) - set(ids)) + (len(ids) - len(set(ids)))
    out.unlink()
    return {"killed_at_rows": written, "kept_rows": kept, "rescored_rows": written - kept,
            "resume_lost_rows": lost,
            "in_order": ids == expected, "resume_seconds": round(second["seconds"], 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--judge", default="bm25", choices=("bm25", "hybrid", "embedding", "likelihood"))
    parser.add_argument("--engines", nargs="+", default=["local", "in-memory", "ray"])
    parser.add_argument("--in-memory-max", type=int, default=100_000, help="largest size scored the old way")
    parser.add_argument("--ray-max", type=int, default=100_000, help="largest size scored on Ray")
    parser.add_argument("--ray-workers", type=int, default=2)
    parser.add_argument("--kill-at", type=float, default=0.5, help="share of rows written when a run is killed "
                                                                   "(0: no resume measurement)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per size and engine, alternating engines "
                                                               "(rows_per_s and peak_rss_mb are the medians)")
    parser.add_argument("--dir", type=Path, help="where data files are made (default: a temporary folder)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--out", type=Path, help="write the result file here")
    parser.add_argument("--note", default="", help="said about the machine (e.g. shared with other jobs)")
    args = parser.parse_args()

    folder = args.dir or Path(tempfile.mkdtemp(prefix="score-scale-"))
    folder.mkdir(parents=True, exist_ok=True)
    judge = make_judge_file(args.judge, folder)
    try:
        import ray  # noqa: F401
        has_ray = True
    except ImportError:
        has_ray = False
    rows_out = []
    for size in args.sizes:
        data = make_data(size, folder)
        engines = [e for e in args.engines if not ((e == "in-memory" and size > args.in_memory_max) or (
            e == "ray" and (not has_ray or size > args.ray_max)))]
        timings: dict[str, list[dict]] = {e: [] for e in engines}
        for _ in range(args.repeat):  # engines alternate, so a change in the machine's load hits each alike
            for engine in engines:
                out = folder / f"out-{engine}.jsonl"
                timings[engine].append(run(score_command(judge, data, out, engine, args.ray_workers)))
        for engine in engines:
            runs = timings[engine]
            seconds = sorted(r["seconds"] for r in runs)[len(runs) // 2]
            row = {"rows": size, "judge": args.judge, "engine": engine, "rows_per_s": round(size / seconds, 1),
                   "peak_rss_mb": sorted(r["peak_rss_mb"] for r in runs)[len(runs) // 2],
                   "seconds": round(seconds, 1), "runs": len(runs),
                   "cores": cores_used(args.judge, engine, args.ray_workers)}
            row["rows_per_core_s"] = round(row["rows_per_s"] / row["cores"], 2)
            out = folder / f"out-{engine}.jsonl"
            if engine == "local" and args.kill_at > 0:
                row.update(resume_cost(judge, data, size, folder, args.kill_at))
            out.unlink(missing_ok=True)
            rows_out.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(rows_out, indent=1))
    if args.out:
        note = "; ".join(filter(None, [args.note, "timings on a 2-core machine shared with other jobs"]))
        write_result(args.out, {"rows": rows_out}, sys.argv, machine_note=note)


if __name__ == "__main__":
    main()
