"""Time a from-scratch install of judgetune in a fresh virtualenv (no pip cache), as a new user would.

    python benchmarks/install_time.py [--cmake-args "-DLLAVA_BUILD=OFF"] [--extras test] [--out FILE]

Reports wall seconds and the CPU seconds of every process the install ran (user + system): on a machine
shared with other jobs the wall time is inflated, the CPU time much less so (on 2 idle cores the wall
time of the compile is about half its CPU time, since ninja builds on both cores).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_result  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    code = subprocess.run(cmd, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return time.monotonic() - start, cpu, code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cmake-args", default="", help="CMAKE_ARGS for llama-cpp-python's build")
    parser.add_argument("--extras", default="", help="e.g. test: install '.[test]'")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    env = {**os.environ, "CMAKE_ARGS": args.cmake_args, "PIP_NO_CACHE_DIR": "1"}
    target = f".[{args.extras}]" if args.extras else "."
    rows = []
    with tempfile.TemporaryDirectory(prefix="jt-install-") as tmp:
        venv = Path(tmp) / "venv"
        for step, cmd in (("venv", [sys.executable, "-m", "venv", str(venv)]),
                          ("pip install", [str(venv / "bin" / "pip"), "install", "--no-cache-dir", "-e", target])):
            wall, cpu, code = timed(cmd, env)
            rows.append({"step": step, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "exit_code": code})
            print(rows[-1], file=sys.stderr, flush=True)
            if code:
                break
        check = subprocess.run([str(venv / "bin" / "python"), "-c", "import llama_cpp, judgetune; print('ok')"],
                               capture_output=True, text=True)
        rows.append({"step": "import check", "wall_s": None, "cpu_s": None,
                     "exit_code": check.returncode})
    total = {"step": "total", "wall_s": round(sum(r["wall_s"] or 0 for r in rows), 1),
             "cpu_s": round(sum(r["cpu_s"] or 0 for r in rows), 1), "exit_code": max(r["exit_code"] for r in rows)}
    payload = {"cmake_args": args.cmake_args, "target": target, "load_after": os.getloadavg(), "rows": [*rows, total]}
    if args.out:
        write_result(args.out, payload, sys.argv)
    print(payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
