"""The files of `judgetune estimate` and `pick --for estimate`: every format the data reader reads (CSV with or
without ids, Parquet), its rules (repeated keys, the row size limit, a FIFO), unlabeled rows (null, an empty
cell, NaN), the names printed (escaped, never cut into one another) and the Python API's refusals."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from judgetune.config import JudgeConfig
from judgetune.errors import DataValidationError, JudgetuneError

SYSTEMS = ("llama-3.1-8b-instruct-q4", "llama-3.1-8b-instruct-q8", "B\nfake line")


@pytest.fixture
def length_judge(tmp_path: Path) -> Path:
    """An untuned length judge on 0-5: no model, scores in a blink."""
    return Path(JudgeConfig(judge="length", params={}, lm=None, instruction=None, demos=[], calibrator=None,
                            label_range=[0.0, 5.0]).save(tmp_path / "judge.json"))


def _rows(n: int = 12) -> list[dict]:
    return [{"answer": f"answer {i} " + "word " * (i % 7), "reference": f"reference {i}", "system": system}
            for i in range(n) for system in SYSTEMS]


def _write_csv(path: Path, rows: list[dict], *, ids: bool) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as handle:
        columns = (["id"] if ids else []) + list(rows[0])
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows({"id": f"r{k}", **row} for k, row in enumerate(rows))
    return path


def _label_csv(picked: Path, labeled: Path) -> None:
    """A human's work: the label column filled in on every picked row."""
    rows = list(csv.DictReader(open(picked, encoding="utf-8", newline="")))
    for row in rows:
        row["label"] = str(len(row["answer"]) % 6)
    with open(labeled, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


@pytest.mark.parametrize("ids", [True, False])
def test_a_csv_goes_through_pick_labeling_and_estimate(run_cli, length_judge, tmp_path, ids):
    data = _write_csv(tmp_path / "outputs.csv", _rows(), ids=ids)
    picked, labeled = tmp_path / "to-label.csv", tmp_path / "labeled.csv"
    code, out, err = run_cli(["pick", "--for", "estimate", "--data", str(data), "--by", "system", "--n", "4",
                              "--out", str(picked)])
    assert code == 0, err
    header = next(csv.reader(open(picked, encoding="utf-8", newline="")))
    assert "id" in header and "sampling_probability" in header
    _label_csv(picked, labeled)
    code, out, err = run_cli(["estimate", "--config", str(length_judge), "--data", str(data), "--by", "system",
                              "--labeled", str(labeled), "--json"])
    assert code == 0, err
    systems = json.loads(out)["systems"]
    assert [s["labeled"] for s in systems] == [4, 4, 4]
    assert all(0 <= s["labels"] <= 5 for s in systems)


def test_names_are_printed_whole_and_escaped(run_cli, length_judge, tmp_path):
    rows = _rows()
    for k, row in enumerate(rows[:18]):
        row["label"] = k % 6
    data = _write_csv(tmp_path / "outputs.csv", rows, ids=True)
    with open(data, "w", newline="", encoding="utf-8") as handle:  # labels on some rows, an empty cell elsewhere
        writer = csv.DictWriter(handle, fieldnames=["id", "answer", "reference", "system", "label"])
        writer.writeheader()
        writer.writerows({"id": f"r{k}", **row} for k, row in enumerate(rows))
    code, out, err = run_cli(["estimate", "--config", str(length_judge), "--data", str(data), "--by", "system"])
    assert code == 0, err
    lines = out.splitlines()
    for name in ("llama-3.1-8b-instruct-q4", "llama-3.1-8b-instruct-q8", r"B\\nfake line"):
        assert sum(bool(re.match(name + r" +12 +6 ", line)) for line in lines) == 1, out
    assert not any(line.startswith("fake line") for line in lines)
    assert any(line.startswith("llama-3.1-8b-instruct-q8 - llama-3.1-8b-instruct-q4 ") for line in lines)


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _labeled_rows(n: int = 8) -> list[dict]:
    return [{"id": f"r{i}", "answer": "a" * (i + 1), "label": i % 5 if i < 6 else None,
             "meta": {"system": "AB"[i % 2]}} for i in range(n)]


def test_a_null_label_is_unlabeled_when_the_judge_scores_too(length_judge, tmp_path):
    from judgetune.estimating import estimate_files

    data = _jsonl(tmp_path / "d.jsonl", _labeled_rows())
    result = estimate_files(length_judge, data, "system")  # scored here: every row an Example, nulls unlabeled
    assert [s["labeled"] for s in result.systems] == [3, 3]


def test_nan_labels_are_unlabeled_in_every_format_and_said(length_judge, tmp_path):
    from judgetune.estimating import estimate_files

    rows = _labeled_rows()
    rows[6]["label"] = math.nan
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")  # NaN, as json writes it
    as_jsonl = estimate_files(length_judge, data, "system")
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    flat = [{"id": r["id"], "answer": r["answer"], "label": r["label"], "system": r["meta"]["system"]} for r in rows]
    pq.write_table(pa.Table.from_pylist(flat), tmp_path / "d.parquet")
    as_parquet = estimate_files(length_judge, tmp_path / "d.parquet", "system")
    for result in (as_jsonl, as_parquet):
        assert [s["labeled"] for s in result.systems] == [3, 3]
        assert result.notes[0].startswith("1 label(s) given as NaN are taken as no label")


def test_parquet_data_and_scores_give_the_jsonl_figures(run_cli, length_judge, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    rows = [{"id": r["id"], "answer": r["answer"], "system": r["meta"]["system"]} for r in _labeled_rows(40)]
    for i, row in enumerate(rows):
        row["label"] = i % 5 if i < 20 else None  # null: no label, for score as for estimate
    _jsonl(tmp_path / "d.jsonl", rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet")
    figures = []
    for name in ("d.jsonl", "d.parquet"):
        scored = tmp_path / f"scored-{name}"
        code, out, err = run_cli(["score", "--config", str(length_judge), "--data", str(tmp_path / name), "--label",
                                  "label", "--out", str(scored)])  # --label keeps the system column (under meta)
        assert code == 0, err
        code, out, err = run_cli(["estimate", "--config", str(length_judge), "--data", str(tmp_path / name),
                                  "--by", "system", "--scores", str(scored), "--json"])
        assert code == 0, err
        figures.append(json.loads(out)["systems"])
    assert figures[0] == figures[1]


def test_a_scores_file_without_scores_is_refused_not_filled_with_the_mean(run_cli, length_judge, tmp_path,
                                                                         monkeypatch):
    """The data file given as --scores (no score column), or a score file whose every judgment failed, as
    `judgetune score` writes it in each format: refused, not every row stood in at a mean of no score (the labels'
    figures printed as the judge's). Scored here by a judge that fails every item: exit 3, no temporary file named."""
    pytest.importorskip("pyarrow.parquet")
    from judgetune.datasets import Example
    from judgetune.judges import Verdict
    from judgetune.scoring import write_scored

    rows = [{"answer": r["answer"], "system": r["meta"]["system"], "label": r["label"]} for r in _labeled_rows(12)]
    data = _write_csv(tmp_path / "d.csv", rows, ids=True)
    examples = [Example(id=f"r{k}", answer=row["answer"]) for k, row in enumerate(rows)]
    failed = [Verdict(score=None, parsed=False, raw="timed out") for _ in examples]
    cases = [(data, r"no score field on any row \(fields: 'id', 'answer', 'system', 'label'\)")]
    for suffix in (".jsonl", ".csv", ".parquet"):
        write_scored(tmp_path / f"failed{suffix}", examples, failed, [None] * len(examples))
        cases.append((tmp_path / f"failed{suffix}", r"no score on any row \(every judgment failed\)"))
    for scores, found in cases:
        code, out, err = run_cli(["estimate", "--config", str(length_judge), "--data", str(data), "--by", "system",
                                  "--scores", str(scores)])
        assert code == 2 and out == "", out
        assert re.search(rf"{re.escape(scores.name)}: score: expected the scores `judgetune score` writes, found "
                         rf"{found}", err), err
    from judgetune.config import JudgeConfig

    monkeypatch.setattr(JudgeConfig, "calibrated", lambda self, verdicts, judge, examples: [None] * len(verdicts))
    code, out, err = run_cli(["estimate", "--config", str(length_judge), "--data", str(data), "--by", "system"])
    assert code == 3 and "the judge failed on every one of the 12 rows" in err and "judgetune-estimate-" not in err


def test_the_data_readers_rules_hold(length_judge, tmp_path):
    from judgetune.estimating import estimate_files

    twice = tmp_path / "twice.jsonl"
    twice.write_text('{"id": "a", "answer": "x", "label": 1, "label": 5, "meta": {"system": "A"}}\n'
                     '{"id": "b", "answer": "y", "label": 2, "meta": {"system": "B"}}\n', encoding="utf-8")
    with pytest.raises(DataValidationError, match=r"twice.jsonl:1: label: expected each key once"):
        estimate_files(length_judge, twice, "system")
    long = tmp_path / "long.jsonl"
    rows = _labeled_rows()
    rows[3]["answer"] = "x" * (2 << 20)
    _jsonl(long, rows)
    with pytest.raises(DataValidationError, match=r"long.jsonl:4: row: expected at most 1,048,576 bytes"):
        estimate_files(length_judge, long, "system")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_fifo_is_refused_not_waited_on(length_judge, tmp_path):
    data = _jsonl(tmp_path / "outputs.jsonl", _labeled_rows())
    fifo = tmp_path / "scored.jsonl"
    os.mkfifo(fifo)
    for option in (["--data", str(fifo)], ["--data", str(data), "--scores", str(fifo)]):
        done = subprocess.run([sys.executable, "-m", "judgetune.cli", "estimate", "--config", str(length_judge),
                               "--by", "system", *option], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stderr
        assert "found a FIFO (named pipe)" in done.stderr
        assert "Traceback" not in done.stderr


def test_the_python_api_names_rows_in_memory_and_refuses_a_missing_by(length_judge):
    import judgetune

    rows = [{k: v for k, v in r.items() if k != "label"} for r in _labeled_rows()]
    with pytest.raises(DataValidationError, match=r"^labeled:1: label: expected a finite number") as caught:
        judgetune.estimate(str(length_judge), rows, by="system", labeled=[{"id": "r0", "label": math.inf}])
    assert "judgetune-estimate-" not in str(caught.value)
    with pytest.raises(JudgetuneError, match=r"^by=None: expected a column"):
        judgetune.estimate(str(length_judge), rows, by=None)


def _labeled_data(tmp_path: Path) -> Path:
    """Outputs of two systems, three labeled rows each (so that a labels file that adds nothing would go unseen)."""
    return _jsonl(tmp_path / "d.jsonl", _labeled_rows(12))


@pytest.mark.parametrize("text,expected", [
    ("id,rating\nr6,3\nr7,4\n", r"label: expected a label on at least one row, found none in any row "
                                  r"\(columns: 'id', 'rating'\); .* --label COLUMN"),
    ("", r"label: expected a label on at least one row, found none in a row: the file is empty"),
    ("id;label\nr6;3\nr7;4\n", r"id: expected an id column .*found 'id;label'; the header looks ';'-delimited, "
                                 r"not comma-delimited"),
])
def test_a_labels_file_that_adds_no_label_is_refused_not_ignored(run_cli, length_judge, tmp_path, text, expected):
    labeled = tmp_path / "labels.csv"
    labeled.write_text(text, encoding="utf-8")
    code, out, err = run_cli(["estimate", "--config", str(length_judge), "--data", str(_labeled_data(tmp_path)),
                              "--by", "system", "--labeled", str(labeled)])
    assert code == 2 and out == ""
    assert re.search(rf"labels.csv: {expected}", err), err
    assert len(err.strip().splitlines()) <= 2 and "Traceback" not in err  # one line, not one per row


def test_a_labels_files_problems_name_its_own_lines(length_judge, tmp_path):
    from judgetune.estimating import estimate_files

    data = _labeled_data(tmp_path)
    off = tmp_path / "off.csv"
    off.write_text("id,label\nr6,2\nr7,7\n", encoding="utf-8")
    with pytest.raises(JudgetuneError, match=r"off.csv:3: label: expected a label on the judge's scale 0-5"):
        estimate_files(length_judge, data, "system", labeled=off)
    twice = tmp_path / "twice.csv"
    twice.write_text("id,label\nr6,2\nr8,1\nr6,2\n", encoding="utf-8")
    with pytest.raises(DataValidationError, match=r"twice.csv:4: id: expected each id once, found 'r6' again "
                                                  r"\(first on line 2\)"):
        estimate_files(length_judge, data, "system", labeled=twice)
    unequal = tmp_path / "unequal.csv"
    unequal.write_text("id,label,sampling_probability\nr6,2,0.5\nr8,1,0.25\n", encoding="utf-8")
    with pytest.raises(JudgetuneError, match=r"unequal.csv:3 and .*unequal.csv:2: the labeled rows of system 'A' "
                                             r"were drawn with unequal probabilities"):
        estimate_files(length_judge, data, "system", labeled=unequal)


@pytest.mark.parametrize("chance", [0, -1, 2])
def test_a_sampling_probability_off_zero_to_one_is_refused_in_every_file(length_judge, tmp_path, chance):
    from judgetune.estimating import estimate_files

    rows = _labeled_rows(12)
    rows[2]["sampling_probability"] = chance
    expected = r"sampling_probability: expected the chance the row was drawn to be labeled, a number in \(0, 1\]"
    with pytest.raises(DataValidationError, match=rf"d.jsonl:3: {expected}"):  # Arrow's way in and the row reader's
        estimate_files(length_judge, _jsonl(tmp_path / "d.jsonl", rows), "system")
    labeled = tmp_path / "labels.csv"
    labeled.write_text(f"id,label,sampling_probability\nr6,2,0.5\nr7,1,{chance}\n", encoding="utf-8")
    with pytest.raises(DataValidationError, match=rf"labels.csv:3: {expected}"):
        estimate_files(length_judge, _labeled_data(tmp_path), "system", labeled=labeled)


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_a_by_column_no_row_has_is_said_once(run_cli, length_judge, tmp_path, suffix):
    rows = [{"id": r["id"], "answer": r["answer"], "system": r["meta"]["system"]} for r in _labeled_rows(12)]
    data = _jsonl(tmp_path / "d.jsonl", rows) if suffix == "jsonl" else _write_csv(tmp_path / "d.csv", rows, ids=False)
    code, out, err = run_cli(["estimate", "--config", str(length_judge), "--data", str(data), "--by", "model"])
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert f"d.{suffix}: --by model: expected a column (or meta key) 'model' naming each row's system, found none " \
           f"in any row (columns of the first row: id, answer, system)" in err


def test_an_unvalidated_judge_figure_keeps_the_table_in_line(run_cli, length_judge, tmp_path):
    rows = _labeled_rows(12)
    for row in rows[1:6:2]:  # system B keeps one label: its judge-only figure is unvalidated
        row["label"] = None if row["id"] != "r1" else row["label"]
    code, out, err = run_cli(["estimate", "--config", str(length_judge), "--data",
                              str(_jsonl(tmp_path / "d.jsonl", rows)), "--by", "system"])
    assert code == 0, err
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("system "))
    column = header.index("labels only")
    table = lines[lines.index(header) + 1:lines.index(header) + 3]
    assert len(table) == 2 and any("(unvalidated)" in line for line in table)
    assert all(line[column - 2:column] == "  " and line[column] != " " for line in table), out
