"""The embedded model against llama.cpp's own figure: prompt tokens per second in judgetune (the peak rate of
`lm_throughput.py`: one decode of up to 512 new rubric-prompt tokens after a cached shared prefix) beside
llama.cpp's `llama-bench` prompt processing (pp512) on the same GGUF with the same threads.

`llama-bench` is built from the llama.cpp source llama-cpp-python vendors, as `.ci/llama_server.sh` builds the
server (benchmark only, never installed): `bash .ci/llama_server.sh && cmake --build .ci/llama.cpp/build --target
llama-bench`.

    python benchmarks/embedded_speed.py --llama-bench .ci/llama.cpp/build/bin/llama-bench [--models local:smollm2]
        [--json] [--out benchmarks/results/embedded_speed.json]

Writes ``{rows: [{model, params, prompt_tokens_per_s, llama_bench_pp_tokens_per_s, threads}], ratio}``, ``ratio``
judgetune over llama-bench for SmolLM2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)
from lm_throughput import model_rates  # noqa: E402

from judgetune.lm import load_lm  # noqa: E402


def llama_bench(binary: Path, gguf: str, threads: int, repetitions: int = 3) -> dict:
    """llama-bench's pp512 on ``gguf`` with ``threads`` threads: mean tokens/s and its spread over repetitions."""
    done = subprocess.run([str(binary), "-m", gguf, "-t", str(threads), "-p", "512", "-n", "0", "-r", str(repetitions),
                           "-o", "json"], capture_output=True, text=True, check=True)
    row = json.loads(done.stdout)[0]
    return {"tokens_per_s": row["avg_ts"], "stddev": row["stddev_ts"], "n_batch": row["n_batch"],
            "n_ubatch": row["n_ubatch"], "params": row.get("model_n_params")}


def measure(spec: str, binary: Path) -> dict:
    lm = load_lm(spec, use_cache=False)
    gguf, threads = lm.model._llm.model_path, lm.model.n_threads
    lm.close()
    ours = model_rates(spec)
    theirs = llama_bench(binary, gguf, threads)
    return {"model": spec, "params": theirs["params"], "prompt_tokens_per_s": ours["prompt_tokens_per_s"],
            "llama_bench_pp_tokens_per_s": theirs["tokens_per_s"], "llama_bench_stddev": theirs["stddev"],
            "threads": threads, "gguf": Path(gguf).name, "load": os.getloadavg()[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-bench", type=Path, required=True, help="the llama-bench binary")
    parser.add_argument("--models", nargs="+", default=["local:smollm2"])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = [measure(spec, args.llama_bench) for spec in args.models]
    small = next((r for r in rows if r["model"] == "local:smollm2"), None)
    payload = {"rows": rows, "ratio": None if small is None else
               small["prompt_tokens_per_s"] / small["llama_bench_pp_tokens_per_s"]}
    if args.json:
        print(json.dumps(payload, indent=1))
    else:
        for r in rows:
            print(f"{r['model']:<16} judgetune {r['prompt_tokens_per_s']:7.1f} tok/s   llama-bench pp512 "
                  f"{r['llama_bench_pp_tokens_per_s']:7.1f} tok/s   ({r['threads']} threads)")
    if args.out:
        _results.write_result(args.out, payload, sys.argv)


if __name__ == "__main__":
    main()
