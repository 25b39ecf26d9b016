"""The embedded model against llama.cpp's own figure: prompt tokens per second in judgetune (the peak rate of
`lm_throughput.py`: one decode of up to 512 new rubric-prompt tokens after a cached shared prefix) beside
llama.cpp's `llama-bench` prompt processing (pp512) on the same GGUF with the same threads; and the judges' own
scoring rates on the same MSRpar pairs: the rubric judge reading a label distribution (``label``) and the
likelihood judge (GPTScore-style, ``likelihood``), each through ``judge.judge_all`` (its own batching: label reads
coalesced from threads, likelihood pairs in one call), the answer cache off (``use_cache=False``: every item is
computed), each judge warmed on other items first (its scoring context made, its instruction prefix cached).

A judge's tokens are those run through the model (``evaluated_tokens``: each item's tokens after the cached prefix,
with the padding of items decoded side by side), per second of ``judge_all``. Its gap to pp512 is split into
factors that multiply to it (``breakdown``): ``in_decode`` (the share of the time spent in ``llama_decode``; the
rest is Python: DSPy, tokenizing, reading logits, threads), ``decode_vs_llama`` (tokens/s inside ``llama_decode`` over
llama-bench at the judge's mean decode size, flash attention off as judgetune runs it: the decodes' own cost, e.g.
logits rows, several KV streams), ``decode_size`` (llama-bench at that size over pp512, both flash attention off)
and ``flash_attn`` (pp512 off over llama-bench's default, auto). ``--profile N`` also prints, per judge, a cProfile
of every thread over N more items (not timed).

`llama-bench` is built from the llama.cpp source llama-cpp-python vendors, as `.ci/llama_server.sh` builds the
server (benchmark only, never installed): `bash .ci/llama_server.sh && cmake --build .ci/llama.cpp/build --target
llama-bench`.

    python benchmarks/embedded_speed.py --llama-bench .ci/llama.cpp/build/bin/llama-bench [--models local:smollm2]
        [--items 20] [--rounds 3] [--profile N] [--json] [--out benchmarks/results/embedded_speed.json]

``--models`` defaults to SmolLM2 and, when installed (``judgetune install qwen1.5b``), the grading model.
Writes ``{rows: [{model, params, prompt_tokens_per_s, llama_bench_pp_tokens_per_s, threads, label_tokens_per_s,
likelihood_tokens_per_s, ratio, label_ratio, likelihood_ratio, breakdown, ...}], ratio, label_ratio,
likelihood_ratio}``, each ratio judgetune over llama-bench pp512, the top-level ones for SmolLM2.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)
import numpy as np  # noqa: E402
from lm_throughput import demos_and_items, model_rates  # noqa: E402

from judgetune.judges import make_judge  # noqa: E402
from judgetune.lm import JudgeLM, LMSpecError, load_lm, parse_lm_spec  # noqa: E402
from judgetune.lm._spec import model_file  # noqa: E402

JUDGES = {"label": ("rubric", {}), "likelihood": ("likelihood", {})}  # path -> (judge kind, params: its defaults)
LABEL_RANGE = (0.0, 5.0)  # MSRpar's similarity scale
WARM = 6  # items each judge scores before it is timed (two coalesced batches of three)


def llama_bench(binary: Path, gguf: str, threads: int, *, sizes: tuple[int, ...] = (512,), flash_attn: str = "auto",
                repetitions: int = 3) -> dict[int, dict]:
    """llama-bench's prompt processing of ``sizes`` tokens on ``gguf`` with ``threads`` threads: per size, mean
    tokens/s and its spread over repetitions."""
    done = subprocess.run([str(binary), "-m", gguf, "-t", str(threads), "-p", ",".join(map(str, sizes)), "-n", "0",
                           "-fa", flash_attn, "-r", str(repetitions), "-o", "json"],
                          capture_output=True, text=True, check=True)
    return {row["n_prompt"]: {"tokens_per_s": row["avg_ts"], "stddev": row["stddev_ts"], "n_batch": row["n_batch"],
                              "n_ubatch": row["n_ubatch"], "params": row.get("model_n_params")}
            for row in json.loads(done.stdout)}


@contextmanager
def decode_clock() -> Iterator[dict[str, float]]:
    """Counts every ``llama_decode`` (both of the model's llama.cpp contexts) while inside: calls, tokens,
    logits rows asked for, seconds and this process's CPU seconds (less inflated than seconds by other load)."""
    import llama_cpp
    import llama_cpp.llama_cpp as raw  # llama_cpp._internals calls through this module

    real = raw.llama_decode
    stats = {"decodes": 0, "tokens": 0, "rows": 0, "seconds": 0.0, "cpu": 0.0}

    def timed(ctx, batch):
        start, start_cpu = time.perf_counter(), time.process_time()
        code = real(ctx, batch)
        stats["seconds"] += time.perf_counter() - start
        stats["cpu"] += time.process_time() - start_cpu
        stats["decodes"] += 1
        stats["tokens"] += batch.n_tokens
        stats["rows"] += int(np.ctypeslib.as_array(batch.logits, shape=(batch.n_tokens,)).astype(bool).sum())
        return code

    llama_cpp.llama_decode = raw.llama_decode = timed
    try:
        yield stats
    finally:
        llama_cpp.llama_decode = raw.llama_decode = real


@contextmanager
def all_threads_profiled() -> Iterator[list[cProfile.Profile]]:
    """cProfile of this thread and of every thread started inside (``judge_all``'s workers)."""
    profiles = [cProfile.Profile()]

    def start(*_) -> None:  # the first profiling event of a new thread: give it a profiler of its own
        profiles.append(cProfile.Profile())
        profiles[-1].enable()

    threading.setprofile(start)
    profiles[0].enable()
    try:
        yield profiles
    finally:
        profiles[0].disable()
        threading.setprofile(None)


def judge_run(lm: JudgeLM, judge, items: list) -> dict:
    """``judge.judge_all(items)`` timed: wall and CPU seconds, tokens run and the decodes' own figures."""
    model, calls = lm.model, lm.label_calls
    before = model.evaluated_tokens
    with decode_clock() as decodes:
        start, start_cpu = time.perf_counter(), time.process_time()
        verdicts = judge.judge_all(items)
        wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    if lm.label_calls - calls != len(items) or not all(v.parsed for v in verdicts):
        raise SystemExit(f"{judge.kind}: {lm.label_calls - calls} of {len(items)} items computed and scored")
    return {"items": len(items), "tokens": model.evaluated_tokens - before, "wall_s": wall, "cpu_s": cpu,
            "decode_s": decodes["seconds"], "decode_cpu_s": decodes["cpu"], "decodes": decodes["decodes"],
            "decode_tokens": decodes["tokens"], "logits_rows": decodes["rows"]}


def judge_rates(lm: JudgeLM, train: list, items: list, rounds: int) -> dict[str, dict]:
    """Per judge path, ``rounds`` runs over disjoint slices of ``items`` (the paths alternate first), after
    warming each judge on the first WARM items: the median tokens/s and the runs' summed figures."""
    judges = {path: make_judge(kind, lm, train=train, label_range=LABEL_RANGE, params=params)
              for path, (kind, params) in JUDGES.items()}
    for judge in judges.values():
        judge.judge_all(items[:WARM])
    rest, runs = items[WARM:], {path: [] for path in judges}
    size = len(rest) // rounds
    for r in range(rounds):
        for path in (list(judges) if r % 2 == 0 else list(judges)[::-1]):
            runs[path].append(judge_run(lm, judges[path], rest[r * size:(r + 1) * size]))
    out = {}
    for path, done in runs.items():
        total = {key: sum(run[key] for run in done) for key in done[0]}
        out[path] = {"tokens_per_s": statistics.median(run["tokens"] / run["wall_s"] for run in done),
                     "tokens_per_cpu_s": total["tokens"] / total["cpu_s"], **total,
                     "spread": [min(run["tokens"] / run["wall_s"] for run in done),
                                max(run["tokens"] / run["wall_s"] for run in done)]}
    return out


def profile_judges(lm: JudgeLM, train: list, items: list, top: int = 14) -> str:
    """Per judge path, a cProfile of every thread while it scores ``items`` (after one warming call), the
    ``top`` functions by own time."""
    text = io.StringIO()
    for path, (kind, params) in JUDGES.items():
        judge = make_judge(kind, lm, train=train, label_range=LABEL_RANGE, params=params)
        judge.judge_all(items[:WARM])
        with all_threads_profiled() as profiles, decode_clock() as decodes:
            judge.judge_all(items[WARM:])
        stats = pstats.Stats(*profiles, stream=text)
        text.write(f"--- {lm.spec} {path} ({kind}), {len(items) - WARM} items, {len(profiles) - 1} worker threads: "
                   f"{decodes['decodes']} decodes of {decodes['tokens']} tokens, {decodes['seconds']:.2f} s in "
                   f"llama_decode (threads' times add up)\n")
        stats.sort_stats("tottime").print_stats(top)
    return text.getvalue()


def breakdown(judge: dict, at_size: dict, off_512: float, auto_512: float) -> dict:
    """The factors whose product is the judge's tokens/s over llama-bench's pp512 (see the module docstring)."""
    in_decode = judge["decode_tokens"] / judge["decode_s"]
    factors = {"in_decode": judge["decode_s"] / judge["wall_s"],
               "decode_vs_llama": in_decode / at_size["tokens_per_s"],
               "decode_size": at_size["tokens_per_s"] / off_512, "flash_attn": off_512 / auto_512}
    return {**factors, "product": float(np.prod(list(factors.values()))), "decode_tokens_per_s": in_decode,
            "decode_tokens_per_cpu_s": judge["decode_tokens"] / judge["decode_cpu_s"],
            "tokens_per_decode": judge["decode_tokens"] / judge["decodes"],
            "logits_rows_per_item": judge["logits_rows"] / judge["items"],
            "tokens_per_item": judge["tokens"] / judge["items"],
            "other_ms_per_item": 1000 * (judge["wall_s"] - judge["decode_s"]) / judge["items"],
            "llama_bench_at_decode_size": at_size["tokens_per_s"]}


def measure(spec: str, binary: Path, *, items: int, rounds: int, profile: int) -> dict:
    demos, pool = demos_and_items(WARM + items * rounds + (WARM + profile if profile else 0))
    lm = load_lm(spec, use_cache=False)  # no answer cache: every item computed
    gguf, threads = lm.model._llm.model_path, lm.model.n_threads
    judges = judge_rates(lm, demos, pool[:WARM + items * rounds], rounds)
    if profile:
        print(profile_judges(lm, demos, pool[WARM + items * rounds:]), file=sys.stderr)
    lm.close()
    ours = model_rates(spec)
    theirs = llama_bench(binary, gguf, threads)[512]
    sizes = sorted({512, *(round(j["decode_tokens"] / j["decodes"]) for j in judges.values())})
    off = llama_bench(binary, gguf, threads, sizes=tuple(sizes), flash_attn="off", repetitions=2)
    row = {"model": spec, "params": theirs["params"], "prompt_tokens_per_s": ours["prompt_tokens_per_s"],
           "llama_bench_pp_tokens_per_s": theirs["tokens_per_s"], "llama_bench_stddev": theirs["stddev"],
           "threads": threads, "gguf": Path(gguf).name,
           "ratio": ours["prompt_tokens_per_s"] / theirs["tokens_per_s"],
           "prompt_tokens_per_cpu_s": ours["prompt_tokens_per_cpu_s"],
           "llama_bench_pp_off_tokens_per_s": off[512]["tokens_per_s"], "items_per_round": items, "rounds": rounds,
           "answer_cache": "off", "breakdown": {}}
    for path, judge in judges.items():
        row[f"{path}_tokens_per_s"] = judge["tokens_per_s"]
        row[f"{path}_ratio"] = judge["tokens_per_s"] / theirs["tokens_per_s"]
        row[f"{path}_items_per_s"] = judge["items"] / judge["wall_s"]
        row["breakdown"][path] = {**breakdown(judge, off[round(judge["decode_tokens"] / judge["decodes"])],
                                              off[512]["tokens_per_s"], theirs["tokens_per_s"]),
                                  "run": judge}
    row["load"] = os.getloadavg()[0]
    return row


def installed(spec: str) -> bool:
    try:
        return model_file(parse_lm_spec(spec)).is_file()
    except LMSpecError:
        return False


def print_row(r: dict) -> None:
    print(f"{r['model']} ({r['params'] / 1e6:.0f}M, {r['threads']} threads): llama-bench pp512 "
          f"{r['llama_bench_pp_tokens_per_s']:.1f} tok/s (flash attention off {r['llama_bench_pp_off_tokens_per_s']:.1f})")
    print(f"  engine peak  {r['prompt_tokens_per_s']:7.1f} tok/s  ratio {r['ratio']:.2f} "
          f"({r['prompt_tokens_per_cpu_s']:.0f} per CPU-second)")
    for path in JUDGES:
        b = r["breakdown"][path]
        print(f"  {path:<11}  {r[f'{path}_tokens_per_s']:7.1f} tok/s  ratio {r[f'{path}_ratio']:.2f} "
              f"({r[f'{path}_items_per_s']:.2f} items/s, {b['tokens_per_item']:.0f} tokens and "
              f"{b['logits_rows_per_item']:.1f} logits rows per item, {b['tokens_per_decode']:.0f} tokens per decode)")
        print(f"      = in llama_decode {b['in_decode']:.2f} (other {b['other_ms_per_item']:.0f} ms/item) x decode "
              f"vs llama-bench at its size {b['decode_vs_llama']:.2f} ({b['decode_tokens_per_s']:.0f} vs "
              f"{b['llama_bench_at_decode_size']:.0f} tok/s; {b['decode_tokens_per_cpu_s']:.0f} per CPU-second) x size "
              f"{b['decode_size']:.2f} x flash attention {b['flash_attn']:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-bench", type=Path, required=True, help="the llama-bench binary")
    parser.add_argument("--models", nargs="+", help="default: local:smollm2, and local:qwen1.5b when installed")
    parser.add_argument("--items", type=int, default=20, help="items per judge per round (default 20)")
    parser.add_argument("--rounds", type=int, default=3, help="timed runs per judge (default 3)")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="also print a cProfile of each judge over N items (stderr, not timed)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    models = args.models or ["local:smollm2", *(["local:qwen1.5b"] if installed("local:qwen1.5b") else [])]
    rows = [measure(spec, args.llama_bench, items=args.items, rounds=args.rounds, profile=args.profile)
            for spec in models]
    small = next((r for r in rows if r["model"] == "local:smollm2"), None)
    payload = {"rows": rows, **{key: None if small is None else small[key]
                                for key in ("ratio", "label_ratio", "likelihood_ratio")}}
    if args.json:
        print(json.dumps(payload, indent=1))
    else:
        for r in rows:
            print_row(r)
    if args.out:
        _results.write_result(args.out, payload, sys.argv)


if __name__ == "__main__":
    main()
