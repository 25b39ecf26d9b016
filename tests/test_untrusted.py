"""The third reliability sweep (issue 39): a shared judge.json, a data file or a server is untrusted input.
Devices and FIFOs are refused unread, a key goes only where the user sent it, runs survive races, text that
cannot be written is refused at its line, the Python API checks what it is given, and a judgment that
lacks what it needs is flagged and counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from judgetune.config import JudgeConfig

REPO = Path(__file__).resolve().parents[1]


def jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def rows(n: int = 24) -> list[dict]:
    return [{"id": str(i), "question": f"question {i}", "answer": "word " * (1 + i % 5) + f"x{i}",
             "reference": "word word word word word", "label": 1 + i % 5, "group": f"g{i // 2}"} for i in range(n)]


def length_config(path: Path, **fields) -> Path:
    return JudgeConfig(judge="length", params={}, lm=None, instruction=None, demos=[], calibrator=None,
                       label_range=[1.0, 5.0], **fields).save(path)


def run_python(code: str, *, cwd: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})}, timeout=timeout)


# --- 1. devices and FIFOs: refused unread, in bounded time and memory ----------------------------------------

def test_devices_and_fifos_as_any_input_exit_2_at_once_in_bounded_memory(tmp_path):
    """Every input (--config, --data as JSONL/CSV, --instructions, --criterion, load()) that is a device or a FIFO
    is refused with what it is: each in under 2 s and under 200 MB more than the imports."""
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    (tmp_path / "random.jsonl").symlink_to("/dev/urandom")
    (tmp_path / "zero.csv").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "pipe.jsonl")
    os.mkfifo(tmp_path / "pipe.json")
    jsonl(tmp_path / "ok.jsonl", rows())
    length_config(tmp_path / "len.json")
    cases = [
        (["score", "--config", "zero.json", "--data", "ok.jsonl", "--out", "o.jsonl"], "zero.json", "character device"),
        (["score", "--config", "pipe.json", "--data", "ok.jsonl", "--out", "o.jsonl"], "pipe.json", "FIFO"),
        (["score", "--config", "len.json", "--data", "random.jsonl", "--out", "o.jsonl"], "random.jsonl",
         "character device"),
        (["score", "--config", "len.json", "--data", "pipe.jsonl", "--out", "o.jsonl"], "pipe.jsonl", "FIFO"),
        (["evaluate", "--judge", "length", "--data", "zero.csv"], "zero.csv", "character device"),
        (["tune", "--judge", "length", "--data", "ok.jsonl", "--instructions", "zero.json"], "zero.json",
         "character device"),
        (["tune", "--judge", "length", "--data", "ok.jsonl", "--instructions", "pipe.json"], "pipe.json", "FIFO"),
        (["tune", "--judge", "length", "--data", "ok.jsonl", "--criterion", "pipe.json"], "pipe.json", "FIFO"),
    ]
    done = run_python(f"""
        import contextlib, io, json, resource, time
        import judgetune, judgetune.cli
        from judgetune.errors import JudgetuneError
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        out = []
        for argv in {[c[0] for c in cases]!r}:
            err = io.StringIO()
            start = time.perf_counter()
            with contextlib.redirect_stderr(err):
                code = judgetune.cli.main(argv)
            out.append([code, err.getvalue(), time.perf_counter() - start])
        for path in ("zero.json", "pipe.json"):
            start = time.perf_counter()
            try:
                judgetune.load(path)
                out.append([0, "loaded", 0])
            except JudgetuneError as error:
                out.append([2, str(error), time.perf_counter() - start])
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base
        print(json.dumps({{"results": out, "grown_kb": grown}}))
        """, cwd=tmp_path, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.splitlines()[-1])
    expected = [*((path, kind) for _, path, kind in cases), ("zero.json", "character device"), ("pipe.json", "FIFO")]
    for (code, message, seconds), (path, kind) in zip(report["results"], expected):
        assert code == 2 and path in message and kind in message, message
        assert "no such" not in message and "Traceback" not in message and len(message.strip().splitlines()) == 1
        assert seconds < 2.0
    assert report["grown_kb"] < 200 * 1024


def test_read_bounded_reads_at_most_its_limit_whatever_the_size_a_file_reports(tmp_path):
    from judgetune._files import FileKindError, FileTooLargeError, read_bounded

    path = tmp_path / "small.txt"
    path.write_bytes(b"x" * 10)
    assert read_bounded(path, 10) == b"x" * 10
    with pytest.raises(FileTooLargeError):
        read_bounded(path, 9)
    with pytest.raises(FileKindError, match="character device"):
        read_bounded("/dev/zero", 1 << 20)
    with pytest.raises(FileKindError, match="folder"):
        read_bounded(tmp_path, 10)
