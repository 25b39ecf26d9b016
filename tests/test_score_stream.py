"""`judgetune score` streamed: chunk by chunk into the output, in input order, resumable after a SIGKILL,
one writer per --out, the same scores as scoring in memory; Parquet and CSV beside JSONL."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from judgetune import load
from judgetune._files import OutputLock
from judgetune.config import JudgeConfig
from judgetune.datasets import Example, Reference
from judgetune.errors import DataValidationError, JudgetuneError
from judgetune.judges import make_judge
from judgetune.scoring import encode_row, file_source, score_stream

REPO = Path(__file__).resolve().parents[1]
WORDS = ("cat mat dog sat ran fast slow red blue green tree house river stone cloud rain sun moon star bird "
         "fish boat road car train city field").split()


def _text(i: int, n: int) -> str:
    rng = random.Random(i)
    return " ".join(rng.choice(WORDS) for _ in range(n))


@pytest.fixture(scope="module")
def judge_path(tmp_path_factory) -> Path:
    train = [Example(id=str(i), answer=_text(i, 6), references=(Reference(_text(i + 1, 8)),), label=float(i % 6))
             for i in range(40)]
    judge = make_judge("bm25", train=train, label_range=(0.0, 5.0), params={})
    return JudgeConfig.from_judge(judge, lm=None, calibrator=None, label_range=(0.0, 5.0)).save(
        tmp_path_factory.mktemp("judge") / "judge.json")


def _rows(n: int) -> list[dict]:
    return [{"id": f"r{i}", "answer": _text(i, 5 + i % 4), "reference": _text(i % 9, 7)} for i in range(n)]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _in_memory(judge_path: Path, rows: list[dict]) -> list[dict]:
    """What scoring every row in memory gives (the path `score` took before streaming)."""
    with load(judge_path) as judge:
        scored = judge.score_many(rows)
    return [{"id": s.id, "score": s.score, "raw_score": s.raw_score, "parsed": s.verdict.parsed, "human": None,
             "distribution": s.verdict.distribution} for s in scored]


def test_chunked_scores_equal_in_memory_scores_in_input_order(tmp_path, judge_path, run_cli):
    rows = _rows(60)
    data = _write_jsonl(tmp_path / "data.jsonl", rows)
    code, out, err = run_cli(["score", "--config", str(judge_path), "--data", str(data), "--out",
                              str(tmp_path / "a.jsonl"), "--chunk-size", "7"])
    assert code == 0, err
    assert "60 items scored" in out and "scoring: 0/60" in err  # progress lines off a terminal
    assert _read_jsonl(tmp_path / "a.jsonl") == _in_memory(judge_path, rows)
    assert len({r["score"] for r in _read_jsonl(tmp_path / "a.jsonl")}) > 10  # the items score differently
    code, _, err = run_cli(["score", "--config", str(judge_path), "--data", str(data), "--out",
                            str(tmp_path / "b.jsonl"), "--chunk-size", "1000"])
    assert code == 0, err
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    # nothing left behind but each output's marker of the judge and input that made it (a re-run finds it complete)
    assert not list(tmp_path.glob("*.part")) and sorted(p.name for p in tmp_path.glob(".*")) == [".a.jsonl.done",
                                                                                                 ".b.jsonl.done"]


def test_a_bad_row_stops_the_run_before_anything_is_written(tmp_path, judge_path, run_cli):
    rows = _rows(30)
    rows[27] = {"id": "r27", "answer": 5}
    data = _write_jsonl(tmp_path / "data.jsonl", rows)
    code, _, err = run_cli(["score", "--config", str(judge_path), "--data", str(data), "--out", str(tmp_path / "s.jsonl"),
                            "--chunk-size", "5"])
    assert code == 2 and f"{data}:28: answer" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl"]  # no run left behind


def test_repeated_ids_are_refused_with_their_lines(tmp_path, judge_path, run_cli):
    rows = _rows(12)
    rows[9]["id"] = "r3"
    data = _write_jsonl(tmp_path / "data.jsonl", rows)
    code, _, err = run_cli(["score", "--config", str(judge_path), "--data", str(data), "--out", str(tmp_path / "s.jsonl")])
    assert code == 2 and f"{data}:10: id: expected a unique id, found 'r3' already used on line 4" in err


@pytest.mark.slow
def test_a_sigkilled_run_resumes_without_losing_or_repeating_a_row(tmp_path, judge_path):
    rows = _rows(3000)
    data = _write_jsonl(tmp_path / "data.jsonl", rows)
    out = tmp_path / "scored.jsonl"
    command = [sys.executable, "-m", "judgetune.cli", "score", "--config", str(judge_path), "--data", str(data),
               "--out", str(out), "--chunk-size", "50"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    part = tmp_path / "scored.jsonl.part" / "rows.jsonl"
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if part.exists() and part.stat().st_size > 20_000:  # some chunks are in
            break
        time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    written = part.read_bytes().count(b"\n")
    assert 0 < written < len(rows) and not out.exists()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "kept from the interrupted run" in done.stdout and "(resumed)" in done.stderr
    result = _read_jsonl(out)
    assert [r["id"] for r in result] == [r["id"] for r in rows]  # none lost, none twice, in order
    assert result == _in_memory(judge_path, rows)


def _interrupted(judge_path: Path, rows: list[dict], out: Path, after: int, source: dict | None = None) -> None:
    """Leave a run in progress on ``out``: the items stop (as Ctrl-C would) after ``after`` of them."""
    def items():
        for i, row in enumerate(rows):
            if i == after:
                raise KeyboardInterrupt
            yield Example(id=row["id"], answer=row["answer"], references=(Reference(row["reference"]),))

    config = JudgeConfig.load(judge_path)
    with pytest.raises(KeyboardInterrupt):
        score_stream(config, config.build_judge(None), None, items(), out, source=source or {"items": "python"},
                     chunk_size=4)


def test_a_run_in_progress_refuses_another_judge_or_input_in_one_line(tmp_path, judge_path, run_cli):
    rows = _rows(20)
    data = _write_jsonl(tmp_path / "data.jsonl", rows)
    out = tmp_path / "s.jsonl"
    _interrupted(judge_path, rows, out, after=9, source=file_source(data, fields={}, label=None))
    part = tmp_path / "s.jsonl.part" / "rows.jsonl"
    assert part.read_bytes().count(b"\n") == 8  # two chunks of 4 were in when it stopped
    other = json.loads(judge_path.read_text())
    other["seed"] = other["seed"] + 1  # any change to the judge.json makes it another judge
    other_path = tmp_path / "other.json"
    other_path.write_text(json.dumps(other))
    code, _, err = run_cli(["score", "--config", str(other_path), "--data", str(data), "--out", str(out)])
    assert code == 2 and "holds a run in progress with a different judge;" in err and len(err.splitlines()) == 1
    changed = _write_jsonl(tmp_path / "changed.jsonl", [*rows[:-1], {**rows[-1], "answer": "changed"}])
    code, _, err = run_cli(["score", "--config", str(judge_path), "--data", str(changed), "--out", str(out)])
    assert code == 2 and "holds a run in progress with a different input;" in err and len(err.splitlines()) == 1
    assert part.read_bytes().count(b"\n") == 8  # untouched
    code, out_text, err = run_cli(["score", "--config", str(judge_path), "--data", str(data), "--out", str(out)])
    assert code == 0, err
    assert "8 kept from the interrupted run" in out_text
    assert _read_jsonl(out) == _in_memory(judge_path, rows)


def test_a_second_writer_on_the_same_out_is_refused_and_stale_temps_are_removed(tmp_path, judge_path, run_cli):
    data = _write_jsonl(tmp_path / "data.jsonl", _rows(5))
    out = tmp_path / "s.jsonl"
    stale = tmp_path / ".s.jsonl.k2j3h4.tmp"
    stale.write_text("half a file")
    os.utime(stale, (time.time() - 60, time.time() - 60))  # left by a write killed a minute ago
    with OutputLock(out, what="another judgetune score"):
        code, _, err = run_cli(["score", "--config", str(judge_path), "--data", str(data), "--out", str(out)])
    assert code == 2 and f"another judgetune score is already writing it (pid {os.getpid()})" in err
    assert not out.exists() and stale.exists()
    code, _, err = run_cli(["score", "--config", str(judge_path), "--data", str(data), "--out", str(out)])
    assert code == 0, err
    assert not stale.exists() and not (tmp_path / ".s.jsonl.lock").exists()


def test_a_lone_surrogate_never_loses_a_run(tmp_path, judge_path):
    """Refused at its item before any work; and should one reach the writer, it is escaped."""
    line = encode_row({"id": "a\ud800b", "score": 1.0})
    assert json.loads(line.decode("utf-8")) == {"id": "a\ud800b", "score": 1.0}
    with load(judge_path) as judge, pytest.raises(DataValidationError, match="item 0: id: .*lone surrogate"):
        judge.score_to([{"id": "x\udc80", "answer": "cat sat", "reference": "the cat sat"},
                        {"id": "y", "answer": "dog", "reference": "a dog ran"}], tmp_path / "s.jsonl")
    assert not (tmp_path / "s.jsonl").exists()


def test_score_to_streams_an_iterable_into_a_file_and_resumes(tmp_path, judge_path):
    rows = _rows(30)
    out = tmp_path / "s.jsonl"
    _interrupted(judge_path, rows, out, after=13)
    with load(judge_path) as judge:
        consumed = []

        def items():
            for row in rows:
                consumed.append(row["id"])
                yield row

        run = judge.score_to(items(), out, chunk_size=4)
        lazy = list(judge.score_iter(iter(rows), chunk_size=4))
    assert (run.resumed, run.scored, run.rows) == (12, 18, 30)
    assert consumed == [r["id"] for r in rows]  # read once, in order
    assert _read_jsonl(out) == _in_memory(judge_path, rows)
    assert [s.score for s in lazy] == [r["score"] for r in _read_jsonl(out)]


def test_parquet_in_and_out_and_csv_out_hold_the_same_scores(tmp_path, judge_path, run_cli):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    rows = _rows(25)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "data.parquet")
    expected = _in_memory(judge_path, rows)
    code, _, err = run_cli(["score", "--config", str(judge_path), "--data", str(tmp_path / "data.parquet"), "--out",
                            str(tmp_path / "s.parquet"), "--chunk-size", "6"])
    assert code == 0, err
    table = pq.read_table(tmp_path / "s.parquet").to_pylist()
    assert [(r["id"], r["score"], r["raw_score"]) for r in table] == [(r["id"], r["score"], r["raw_score"])
                                                                       for r in expected]
    code, _, err = run_cli(["score", "--config", str(judge_path), "--data", str(tmp_path / "data.parquet"), "--out",
                            str(tmp_path / "s.csv")])
    assert code == 0, err
    import csv

    with open(tmp_path / "s.csv", newline="", encoding="utf-8") as handle:
        read = list(csv.DictReader(handle))
    assert [(r["id"], float(r["score"])) for r in read] == [(r["id"], r["score"]) for r in expected]


def test_re_running_a_finished_score_says_it_is_complete_and_exits_0(tmp_path, judge_path, run_cli):
    """The same judge and input again is a resume with nothing left (exit 0, the file untouched);
    another input, or a file changed since, still needs --force."""
    data = _write_jsonl(tmp_path / "in.jsonl", _rows(12))
    out = tmp_path / "scores.jsonl"
    command = ["score", "--config", str(judge_path), "--data", str(data), "--out", str(out)]
    assert run_cli(command)[0] == 0
    before = out.stat().st_mtime_ns, out.read_bytes()
    code, stdout, err = run_cli(command)
    assert code == 0 and "already complete" in stdout and (out.stat().st_mtime_ns, out.read_bytes()) == before
    other = _write_jsonl(tmp_path / "other.jsonl", _rows(13))
    code, _, err = run_cli(["score", "--config", str(judge_path), "--data", str(other), "--out", str(out)])
    assert code == 2 and "not a finished run of this judge and input; pass --force" in err
    out.write_text(out.read_text() + "\n")  # edited since: no longer the run's output
    code, _, err = run_cli(command)
    assert code == 2 and "pass --force" in err
    assert run_cli([*command, "--force"])[0] == 0 and run_cli(command)[0] == 0


@pytest.mark.parametrize("option", [["--max-tokens", "1000"], ["--prompt-price", "0.5"], ["--completion-price", "1"]])
def test_ray_refuses_the_options_it_would_ignore_in_one_line(tmp_path, judge_path, run_cli, option):
    """--max-tokens and the prices are metered in-process only; with --engine ray they are refused before
    any work (never silently ignored)."""
    data = _write_jsonl(tmp_path / "in.jsonl", _rows(3))
    out = tmp_path / "o.jsonl"
    code, _, err = run_cli(["score", "--config", str(judge_path), "--data", str(data), "--out", str(out),
                            "--engine", "ray", *option])
    assert code == 2 and "--engine ray does not meter tokens" in err and len(err.strip().splitlines()) == 1
    assert not out.exists() and not list(tmp_path.glob("*.part"))


@pytest.mark.parametrize("where", ["append", "finish"])
def test_a_full_disk_is_one_line_and_the_run_resumes(tmp_path, judge_path, run_cli, monkeypatch, where):
    """ENOSPC while writing rows (or the final file) is exit 2 and one line, no traceback; the rows
    written before are kept and the same command, with space again, finishes the run."""
    import errno

    from judgetune.scoring import PartFile

    data = _write_jsonl(tmp_path / "in.jsonl", _rows(30))
    out = tmp_path / "o.jsonl"
    command = ["score", "--config", str(judge_path), "--data", str(data), "--out", str(out), "--chunk-size", "10"]
    real = getattr(PartFile, where)
    calls = []

    def full(self, *args, **kwargs):
        calls.append(1)
        if where == "finish" or len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.rows_path))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PartFile, where, full)
    code, _, err = run_cli(command)
    assert code == 2 and "no space left on the device" in err and "Traceback" not in err
    errors = [line for line in err.splitlines() if not line.startswith("scoring:")]  # the progress lines aside
    assert len(errors) == 1 and not out.exists()
    monkeypatch.setattr(PartFile, where, real)
    code, stdout, _ = run_cli(command)
    assert code == 0 and "30 items scored" in stdout and len(_read_jsonl(out)) == 30


def test_a_part_folder_removed_mid_run_stops_at_the_next_chunk_in_one_line(tmp_path, judge_path, run_cli, monkeypatch):
    """The part folder deleted while scoring is noticed before the next chunk is written (not after
    scoring everything into a deleted file); one line, exit 2; the next run starts over and finishes."""
    import shutil

    from judgetune.scoring import PartFile

    data = _write_jsonl(tmp_path / "in.jsonl", _rows(40))
    out = tmp_path / "o.jsonl"
    command = ["score", "--config", str(judge_path), "--data", str(data), "--out", str(out), "--chunk-size", "10"]
    real = PartFile.append_bytes
    written = []

    def remove_after_first(self, lines):
        written.append(1)
        if len(written) == 2:
            shutil.rmtree(self.folder)
        return real(self, lines)

    monkeypatch.setattr(PartFile, "append_bytes", remove_after_first)
    code, _, err = run_cli(command)
    assert code == 2 and "removed (or replaced) while scoring" in err and "Errno" not in err
    assert len(written) == 2 and not out.exists()
    monkeypatch.setattr(PartFile, "append_bytes", real)
    code, stdout, _ = run_cli(command)
    assert code == 0 and len(_read_jsonl(out)) == 40


def test_saving_the_token_usage_keeps_the_validation_record(tmp_path, judge_path, monkeypatch):
    """A run that spends tokens saves them in the part's state without losing the record that the file
    was validated (which a resume reads instead of validating the whole file again)."""
    import judgetune.scoring._run as run_module
    from judgetune.config import JudgeConfig
    from judgetune.scoring import PartFile, file_source, score_stream

    real = run_module._score_chunk

    def spending(*args, **kwargs):
        rows, spent, per_item = real(*args, **kwargs)
        return rows, spent or {"prompt_tokens": 5}, per_item

    monkeypatch.setattr(run_module, "_score_chunk", spending)
    seen = []
    real_save = PartFile.save_state
    monkeypatch.setattr(PartFile, "save_state", lambda self, state: (seen.append(dict(state)), real_save(self, state)))
    data = _write_jsonl(tmp_path / "in.jsonl", _rows(20))
    config = JudgeConfig.load(judge_path)
    score_stream(config, config.build_judge(None), None, None, tmp_path / "o.jsonl", source=file_source(data),
                 chunk_size=5)
    with_usage = [s for s in seen if s.get("usage")]
    assert with_usage and all(s.get("validated") and s.get("rows") == 20 for s in with_usage)


def test_a_resume_with_other_python_items_of_the_same_ids_is_refused(tmp_path, judge_path):
    """Items given from Python without ids get positional ids, so ids alone cannot tell two lists apart;
    the run records a digest of the items it scored, and a resume with other contents is refused."""
    rows = [{k: v for k, v in r.items() if k != "id"} for r in _rows(30)]  # positional ids
    out = tmp_path / "s.jsonl"

    def stopping(items, after):
        for i, item in enumerate(items):
            if i == after:
                raise KeyboardInterrupt
            yield item

    other = [{**r, "answer": r["answer"] + " changed"} for r in rows]
    with load(judge_path) as judge:
        with pytest.raises(KeyboardInterrupt):
            judge.score_to(stopping(rows, 13), out, chunk_size=4)
        with pytest.raises(JudgetuneError, match=r"same ids, other contents"):
            judge.score_to(other, out, chunk_size=4)
        run = judge.score_to(rows, out, chunk_size=4)  # the same items resume
    assert run.resumed == 12 and run.rows == 30


def test_a_resume_with_another_lm_endpoint_is_refused(tmp_path):
    """The LM that answers is part of a run's identity: a resume at another server (or with another
    model file) is refused, never mixed into one output."""
    from types import SimpleNamespace

    from judgetune.lm import parse_lm_spec
    from judgetune.scoring import PartFile
    from judgetune.scoring._output import identity_of

    def at(url):
        return SimpleNamespace(spec=parse_lm_spec("openai/m", api_base=url), client=object(), model_id="m")

    out = tmp_path / "o.jsonl"
    first = PartFile(out, identity_of({"judge": "rubric"}, {"items": "python"}, out, at("http://127.0.0.1:8001/v1")))
    first.open()
    first.close()
    again = PartFile(out, identity_of({"judge": "rubric"}, {"items": "python"}, out, at("http://127.0.0.1:8002/v1")))
    with pytest.raises(JudgetuneError, match="different lm"):
        again.open()
    same = PartFile(out, identity_of({"judge": "rubric"}, {"items": "python"}, out, at("http://127.0.0.1:8001/v1")))
    assert same.open() == 0
    same.close()


def test_the_kill_windows_of_a_score_run_are_closed(tmp_path, judge_path, run_cli, monkeypatch):
    """(1) the token usage is saved before the rows it paid for, so a kill between never lets a resume
    pass --max-tokens; (2) a part folder left empty by a kill right after its mkdir does not block the next run;
    (3) a kill after the output is complete but before the part is removed leaves a part the next run clears, saying
    the run is complete."""
    import judgetune.scoring._run as run_module
    from judgetune.scoring import PartFile

    data = _write_jsonl(tmp_path / "in.jsonl", _rows(12))
    out = tmp_path / "o.jsonl"
    command = ["score", "--config", str(judge_path), "--data", str(data), "--out", str(out), "--chunk-size", "4"]
    # (1) the order of the writes
    order = []
    real_save, real_append = PartFile.save_state, PartFile.append
    monkeypatch.setattr(PartFile, "save_state", lambda self, state: (
        order.append("usage") if state.get("usage") else None, real_save(self, state))[1])
    monkeypatch.setattr(PartFile, "append", lambda self, rows: (order.append("rows"), real_append(self, rows))[1])
    real_chunk = run_module._score_chunk

    def spending(*args, **kwargs):
        rows, spent, per_item = real_chunk(*args, **kwargs)
        return rows, {"prompt_tokens": 3}, per_item

    monkeypatch.setattr(run_module, "_score_chunk", spending)
    assert run_cli(command)[0] == 0
    assert order[:2] == ["usage", "rows"] and order.count("usage") == order.count("rows") == 3
    monkeypatch.undo()
    # (2) an empty part folder (killed between mkdir and run.json)
    out.unlink()
    (tmp_path / "o.jsonl.part").mkdir()
    code, _, err = run_cli(command)
    assert code == 0, err
    # (3) the part of a run killed after its output and marker were written
    out.unlink()
    import judgetune.scoring._output as output_module

    def killed(path, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(output_module.shutil, "rmtree", killed)
    assert run_cli(command)[0] == 130
    monkeypatch.undo()
    assert out.exists() and (tmp_path / "o.jsonl.part").is_dir()
    code, stdout, _ = run_cli(command)
    assert code == 0 and "already complete" in stdout and not (tmp_path / "o.jsonl.part").exists()
