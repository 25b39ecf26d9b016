"""Write one benchmark result file: ``{"meta": {date, commit, machine, command}, ...payload}``.

Every benchmark that is quoted writes its figures with :func:`write_result` (usually behind ``--out PATH``);
``benchmarks/results.py`` renders all of them into ``benchmarks/RESULTS.md``. Never edit a result file by hand.

    from _results import write_result          # benchmarks/ is on sys.path when a benchmark runs
    write_result(args.out, {"rows": rows}, sys.argv)
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["lm_name", "machine", "meta", "write_result"]


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                             cwd=Path(__file__).resolve().parent)
        sha = out.stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True,
                               timeout=10, cwd=Path(__file__).resolve().parent).stdout.strip()
        return f"{sha}{'+dirty' if dirty else ''}" if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def lm_name(spec: str) -> str:
    """``local:qwen1.5b`` -> ``qwen1.5b``: the model's name as the result files spell it."""
    return spec.split(":", 1)[-1].replace("/", "-")


def machine() -> str:
    """``"2-core x86_64, load 1.2/0.8/0.5"``: the cores, architecture and load averages at the time of the call."""
    load = "/".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    return f"{os.cpu_count()}-core {platform.machine()}, load {load}"


def meta(argv: Sequence[str]) -> dict[str, str]:
    """The ``meta`` block of a result: today's date, the git short sha, the machine and the exact command."""
    return {"date": _dt.date.today().isoformat(), "commit": _commit(), "machine": machine(),
            "command": "python " + shlex.join(list(argv))}


def write_result(path: str | Path, payload: Mapping[str, Any], argv: Sequence[str], *,
                 machine_note: str | None = None) -> Path:
    """Write ``payload`` with a filled ``meta`` block to ``path`` (JSON, indented); returns the path.

    ``machine_note`` is appended to the machine line (e.g. "shared with 6 other jobs"): timings measured on a
    loaded machine must say so.
    """
    info = meta(argv)
    if machine_note:
        info["machine"] += f"; {machine_note}"
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": info, **payload}, indent=2, default=str) + "\n", encoding="utf-8")
    return path
