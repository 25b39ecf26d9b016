"""Prompt tokens per second of llama.cpp builds: the same GGUF evaluated by each build's Python.

Each ``--python`` is the interpreter of a virtualenv holding one llama-cpp-python build (e.g. the native build
with AMX kernels, and install.sh's build without them). A child process loads the model and evaluates a prompt
of ``--tokens`` tokens ``--repeats`` times (a fresh KV cache each time); a build that dies is reported with its
signal (SIGILL: an illegal instruction) instead of a speed.

    python benchmarks/llama_build_speed.py --gguf PATH [--gguf PATH ...] --python NAME=PYTHON [--python ...]
        [--tokens 512] [--repeats 3] [--threads 2] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
from pathlib import Path

from _results import write_result

CHILD = r"""
import json, sys, time
import llama_cpp
path, n_tokens, repeats, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
llm = llama_cpp.Llama(path, n_ctx=n_tokens + 16, n_threads=threads, n_threads_batch=threads, n_batch=n_tokens,
                      verbose=False)
text = " ".join(["The committee reviewed the paraphrase pairs and scored each one for similarity."] * 80)
tokens = llm.tokenize(text.encode())[:n_tokens]
rates = []
for _ in range(repeats):
    llm.reset()
    start = time.perf_counter()
    llm.eval(tokens)
    rates.append(len(tokens) / (time.perf_counter() - start))
print(json.dumps({"tokens": len(tokens), "rates": rates,
                  "features": llama_cpp.llama_print_system_info().decode().strip(" |")}))
"""


def measure(python: str, gguf: str, tokens: int, repeats: int, threads: int) -> dict:
    run = subprocess.run([python, "-c", CHILD, gguf, str(tokens), str(repeats), str(threads)],
                         capture_output=True, text=True)
    if run.returncode != 0:
        died = -run.returncode if run.returncode < 0 else None
        return {"ok": False, "exit": run.returncode,
                "signal": signal.Signals(died).name if died else None, "stderr": run.stderr.strip()[-300:]}
    out = json.loads(run.stdout.strip().splitlines()[-1])
    rates = sorted(out["rates"])
    return {"ok": True, "prompt_tokens": out["tokens"], "tokens_per_s_median": round(rates[len(rates) // 2], 1),
            "tokens_per_s": [round(r, 1) for r in out["rates"]], "features": out["features"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gguf", action="append", required=True)
    parser.add_argument("--python", action="append", required=True, metavar="NAME=PYTHON")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = []
    for gguf in args.gguf:
        for item in args.python:
            name, python = item.split("=", 1)
            row = {"build": name, "model": Path(gguf).name, **measure(python, gguf, args.tokens, args.repeats,
                                                                       args.threads)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    if args.out:
        write_result(args.out, {"rows": rows}, sys.argv)


if __name__ == "__main__":
    main()
