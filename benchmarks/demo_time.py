"""Time ``judgetune demo`` cold (a fresh LM and embedding cache, a fresh runs folder) and keep its table.

    python benchmarks/demo_time.py [--out benchmarks/results/demo.json]

Wall seconds are inflated on a machine shared with other jobs; the CPU seconds (user + system of the demo
process) are the steadier figure, and on 2 idle cores the wall time is close to the CPU time (llama.cpp
decodes on two threads but the encoders and Python parts run on one).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import write_result  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="jt-demo-") as tmp:
        env = {**os.environ, "JUDGETUNE_CACHE_DIR": str(Path(tmp) / "cache")}
        load_before = os.getloadavg()
        start = time.monotonic()
        done = subprocess.run(["judgetune", "demo", "--json", "--runs-dir", str(Path(tmp) / "runs")], env=env,
                              capture_output=True, text=True)
        wall = time.monotonic() - start
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        print(done.stderr[-3000:], file=sys.stderr)
        return done.returncode
    summary = json.loads(done.stdout)
    timing = {"wall_s": round(wall, 1), "cpu_s": round(usage.ru_utime + usage.ru_stime, 1),
              "load_before": [round(x, 1) for x in load_before], "load_after": [round(x, 1) for x in os.getloadavg()]}
    payload = {"timing": timing, "chosen": summary["chosen"], "rows": summary["rows"],
               "versus": [{"other": k, **v} for k, v in summary["versus"].items()],
               "gain": [{"family": k, **(v or {})} for k, v in summary["gain"].items()],
               "python": summary["python"]}
    if args.out:
        write_result(args.out, payload, sys.argv)
    print(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
