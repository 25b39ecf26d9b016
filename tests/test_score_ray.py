"""`judgetune score --engine ray` on a local two-worker Ray cluster: the same output as in-process scoring, and
the same resume. Skipped where Ray is not installed, unless $JUDGETUNE_REQUIRE_RAY is set (CI installs
`judgetune[ray]` and sets it)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

if importlib.util.find_spec("ray") is None:
    if os.environ.get("JUDGETUNE_REQUIRE_RAY"):
        raise ImportError("JUDGETUNE_REQUIRE_RAY is set but ray is not installed: pip install -e '.[ray]'")
    pytest.skip("ray is not installed (pip install -e '.[ray]')", allow_module_level=True)

from test_score_stream import _read_jsonl, _rows, _write_jsonl, judge_path  # noqa: E402,F401  (a fixture)

pytestmark = pytest.mark.slow


def test_ray_scores_equal_in_process_scores_and_resume_the_same_way(tmp_path, judge_path, run_cli):  # noqa: F811
    rows = _rows(90)
    data = _write_jsonl(tmp_path / "data.jsonl", rows)
    local, on_ray = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    code, _, err = run_cli(["score", "--config", str(judge_path), "--data", str(data), "--out", str(local)])
    assert code == 0, err
    # a run in progress on --out (40 rows in, the 41st cut by a kill mid-write) that the Ray run keeps and continues
    part = tmp_path / "ray.jsonl.part"
    lines = local.read_bytes().splitlines(keepends=True)
    part.mkdir()
    (part / "rows.jsonl").write_bytes(b"".join(lines[:40]) + lines[40][:10])
    state = {"version": 1, **_identity(judge_path, data, on_ray), "state": {}}
    (part / "run.json").write_text(json.dumps(state))
    code, out, err = run_cli(["score", "--config", str(judge_path), "--data", str(data), "--out", str(on_ray),
                              "--engine", "ray", "--workers", "2", "--chunk-size", "15"])
    assert code == 0, err
    assert "40 kept from the interrupted run" in out
    assert on_ray.read_bytes() == local.read_bytes()
    assert [r["id"] for r in _read_jsonl(on_ray)] == [r["id"] for r in rows]


def _identity(judge: Path, data: Path, out: Path) -> dict:
    from judgetune.config import JudgeConfig
    from judgetune.scoring import file_source
    from judgetune.scoring._output import identity_of

    return identity_of(JudgeConfig.load(judge).to_dict(), file_source(data, fields={}, label=None), out)


def _likelihood_config(path: Path, embedded_lm) -> Path:
    """A frozen likelihood judge on the embedded model (no demos: the train items only fix its settings)."""
    from judgetune.config import JudgeConfig
    from judgetune.judges import make_judge

    judge = make_judge("likelihood", embedded_lm, train=[], label_range=(0.0, 5.0), params={})
    return JudgeConfig.from_judge(judge, lm={"spec": "local:smollm2"}, calibrator=None,
                                  label_range=(0.0, 5.0)).save(path)


def _write_parquet(path: Path, rows: list[dict], row_group_size: int) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=row_group_size)
    return path


@pytest.mark.model
def test_ray_scores_parquet_with_an_lm_judge_as_in_process_does(tmp_path, run_cli, embedded_lm):
    """An LM judge (SmolLM2 likelihood) on Parquet, chunks that cross row groups: the same bytes as
    in-process scoring, which also means the same run identity (the LM's fingerprint) and the same tallies."""
    config = _likelihood_config(tmp_path / "judge.json", embedded_lm)
    data = _write_parquet(tmp_path / "data.parquet", _rows(12), row_group_size=5)
    local, on_ray = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    code, _, err = run_cli(["score", "--config", str(config), "--data", str(data), "--out", str(local)])
    assert code == 0, err
    code, out, err = run_cli(["score", "--config", str(config), "--data", str(data), "--out", str(on_ray),
                              "--engine", "ray", "--workers", "2", "--chunk-size", "4"])
    assert code == 0, err
    assert on_ray.read_bytes() == local.read_bytes()
    assert all(r["score"] is not None for r in _read_jsonl(on_ray))
    # the run's identity is the in-process one: a re-run in-process finds it complete
    code, out, err = run_cli(["score", "--config", str(config), "--data", str(data), "--out", str(on_ray)])
    assert code == 0 and "already complete" in out, err


def test_ray_actors_score_with_the_judge_the_run_started_with(tmp_path, judge_path, run_cli, monkeypatch):  # noqa: F811
    """A judge.json replaced after the driver read it (here: just before the actors start) changes
    nothing; the actors build the judge from the driver's copy."""
    from judgetune.scoring import ray_engine

    config = tmp_path / "judge.json"
    config.write_bytes(judge_path.read_bytes())
    data = _write_jsonl(tmp_path / "data.jsonl", _rows(20))
    local, on_ray = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    assert run_cli(["score", "--config", str(config), "--data", str(data), "--out", str(local)])[0] == 0
    from judgetune.config import JudgeConfig
    from judgetune.judges import make_judge

    other = JudgeConfig.from_judge(make_judge("overlap", train=[], label_range=(0.0, 5.0)), lm=None, calibrator=None,
                                   label_range=(0.0, 5.0)).to_dict()  # another judge
    plan = ray_engine.chunk_plan

    def swap_then_plan(*args, **kwargs):
        config.write_text(json.dumps(other))
        return plan(*args, **kwargs)

    monkeypatch.setattr(ray_engine, "chunk_plan", swap_then_plan)
    code, _, err = run_cli(["score", "--config", str(config), "--data", str(data), "--out", str(on_ray),
                            "--engine", "ray", "--workers", "1", "--chunk-size", "7"])
    assert code == 0, err
    assert on_ray.read_bytes() == local.read_bytes()


def test_ray_counts_degraded_items_and_leaves_no_part_after_bad_rows(tmp_path, run_cli):
    """Items scored without some of their signals are counted as in-process; a data file with bad rows
    is refused before any work and leaves no part folder behind."""
    from test_untrusted import cheap_hybrid_config

    config = cheap_hybrid_config(tmp_path / "judge.json")
    items = [{"id": "whole", "answer": "word word x", "reference": "word word word"},
             {"id": "no-reference", "answer": "zebra quantum bicycle"}]
    data = _write_jsonl(tmp_path / "new.jsonl", items)
    out = tmp_path / "scores.jsonl"
    code, stdout, err = run_cli(["score", "--config", str(config), "--data", str(data), "--out", str(out),
                                 "--engine", "ray", "--workers", "1"])
    assert code == 0, err
    assert "1 scored without some of their signals" in stdout and "bm25:" in stdout
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(items[0]) + "\n{\"id\": 3, \"answer\": \n")
    code, _, err = run_cli(["score", "--config", str(config), "--data", str(bad), "--out", str(tmp_path / "b.jsonl"),
                            "--engine", "ray"])
    assert code == 2 and "bad.jsonl:2" in err
    assert not (tmp_path / "b.jsonl.part").exists() and not (tmp_path / "b.jsonl").exists()


@pytest.mark.model
def test_ray_with_a_model_that_does_not_load_is_one_line_and_leaves_nothing(tmp_path, judge_path, run_cli):  # noqa: F811
    """A judge whose GGUF is garbage: refused in one line (exit 2) before Ray starts, as in-process."""
    garbage = tmp_path / "broken.gguf"
    garbage.write_bytes(b"GGUF" + b"\0" * 200)
    config = json.loads(judge_path.read_text())
    config.update(judge="likelihood", params={}, lm={"spec": f"llamacpp:{garbage}"})
    config.pop("fitted", None)
    path = tmp_path / "judge.json"
    path.write_text(json.dumps(config))
    data = _write_jsonl(tmp_path / "data.jsonl", _rows(5))
    for engine in ("local", "ray"):
        out = tmp_path / f"{engine}.jsonl"
        code, _, err = run_cli(["score", "--config", str(path), "--data", str(data), "--out", str(out),
                                "--engine", engine])
        assert code == 2, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert not out.exists() and not (tmp_path / f"{engine}.jsonl.part").exists()


def test_parquet_chunks_decode_each_row_group_once(tmp_path, monkeypatch):
    """Reading the chunks of a one-group Parquet file decodes the group once per actor (it was decoded
    and converted whole for every chunk: quadratic in the file)."""
    import pyarrow.parquet as pq

    from judgetune.scoring import ray_engine

    rows = _rows(60)
    data = _write_parquet(tmp_path / "one.parquet", rows, row_group_size=60)
    reads = []
    original = pq.ParquetFile.read_row_group
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", lambda self, g, *a, **k: reads.append(g) or
                        original(self, g, *a, **k))
    slices = ray_engine._ParquetSlices(str(data))
    got = []
    for chunk in ray_engine.chunk_plan(data, "parquet", 0, 60, 7):
        got += ray_engine._read_chunk(str(data), "parquet", chunk, None, None, slices)
    assert [e.id for e in got] == [r["id"] for r in rows]
    assert reads == [0]


def test_an_lm_judges_actors_reserve_the_threads_their_model_runs_on(monkeypatch):
    """An in-process model's actor reserves as many CPUs as llama.cpp threads it runs, no more than the
    machine's cores shared by the workers; a server's or a signal judge's actor one."""
    from judgetune.scoring.ray_engine import actor_threads

    class Model:
        client = None

    class Server:
        client = object()

    monkeypatch.setenv("JUDGETUNE_THREADS", "2")
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert actor_threads(Model(), 2, None) == 2
    assert actor_threads(Model(), 8, None) == 1
    assert actor_threads(Model(), 8, "auto") == 2  # a cluster's nodes have their own cores
    assert actor_threads(Server(), 2, None) == actor_threads(None, 2, None) == 1


def test_jsonl_chunk_offsets_skip_blank_lines_as_the_reader_does(tmp_path):
    """The chunk plan counts rows as the reader does: blank lines (a first line holding only a byte-order mark too)
    are not rows, so every chunk starts at its own first row."""
    from judgetune.scoring import ray_engine

    rows = _rows(7)
    lines = ["\ufeff\n", json.dumps(rows[0]) + "\n", "\n", *[json.dumps(r) + "\n" for r in rows[1:4]], "  \n",
             *[json.dumps(r) + "\n" for r in rows[4:]]]
    data = tmp_path / "data.jsonl"
    data.write_text("".join(lines), encoding="utf-8")
    got = []
    for chunk in ray_engine.chunk_plan(data, "jsonl", 0, 7, 3):
        got += ray_engine._read_chunk(str(data), "jsonl", chunk, None, None)
    assert [e.id for e in got] == [r["id"] for r in rows]
