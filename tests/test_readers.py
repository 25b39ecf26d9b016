"""Every error path of the JSONL / CSV / TSV readers, and the happy paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from judgetune.datasets import Example, Reference, Scale, read_examples, write_examples
from judgetune.errors import DataValidationError


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def jsonl(path: Path, *rows) -> Path:
    return write(path, "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def problems(path: Path, **kwargs) -> list[str]:
    with pytest.raises(DataValidationError) as info:
        read_examples(path, **kwargs)
    return info.value.problems


def test_jsonl_round_trip(tmp_path):
    examples = [
        Example(id="a", answer="x", question="q", references=(Reference("r1", 3.0), Reference("r2")),
                context=("c1", "c2"), label=2.5, group="g1", meta={"k": [1, 2]}),
        Example(id="b", answer="y", answer_b="z", preference=-1.0, group="g1"),
    ]
    path = tmp_path / "data.jsonl"
    write_examples(path, examples)
    back = read_examples(path)
    assert back == examples
    assert back[0].meta == {"k": [1, 2]}


def test_csv_and_tsv_rows(tmp_path):
    csv_path = write(tmp_path / "d.csv", 'id,question,answer,reference,label,group\n'
                                         '1,"q, with comma",a1,r1,4.5,g\n2,q2,"multi\nline",r2,0,g\n')
    rows = read_examples(csv_path, scale=Scale(0, 5))
    assert [e.id for e in rows] == ["1", "2"]
    assert rows[0].question == "q, with comma" and rows[0].references == (Reference("r1"),)
    assert rows[1].answer == "multi\nline" and rows[1].label == 0.0
    tsv_path = write(tmp_path / "d.tsv", "answer\tlabel\nhello\t3\n\nworld\t1\n")
    rows = read_examples(tsv_path)
    assert [(e.id, e.answer, e.label) for e in rows] == [("d:2", "hello", 3.0), ("d:4", "world", 1.0)]


def test_every_bad_row_reported_at_once_with_file_line_field(tmp_path):
    path = jsonl(tmp_path / "bad.jsonl",
                 {"id": "1", "answer": "ok", "label": 1},
                 {"id": "2", "question": "no answer", "label": 1},
                 "{not json",
                 {"id": "4", "answer": "x", "label": "high"},
                 {"id": "5", "answer": "x"},
                 {"id": "6", "answer": "x", "label": 9},
                 [1, 2],
                 {"id": "8", "answer": "x", "label": 1, "lable": 2},
                 {"id": "1", "answer": "dup", "label": 1},
                 {"id": "10", "answer": "x", "label": True},
                 {"id": "11", "answer": "x", "label": float("nan")})
    found = problems(path, scale=Scale(0, 5))
    assert found == [
        f"{path}:2: answer: expected text, found nothing",
        f"{path}:3: row: expected a JSON object, found invalid JSON (Expecting property name enclosed in double "
        "quotes at column 2)",
        f"{path}:4: label: expected a number, found 'high'",
        f"{path}:5: label: expected the human label (a number), found nothing",
        f"{path}:6: label: expected a number in [0, 5], found 9.0",
        f"{path}:7: row: expected a JSON object, found a JSON array",
        f"{path}:8: lable: expected a known field (id, question, answer, references, reference, context, answer_b, "
        "preference, label, group, meta); put extra data under 'meta' (or map the file's columns with --field or "
        "--label: the others are kept under meta), found 2",
        f"{path}:9: id: expected a unique id, found '1' already used on line 1",
        f"{path}:10: label: expected a number, found true",
        f"{path}:11: label: expected a finite number, found NaN",
    ]


def test_discrete_scale_and_field_types(tmp_path):
    path = jsonl(tmp_path / "t.jsonl",
                 {"answer": "x", "label": 2.5, "group": ["g"]},
                 {"answer": "x", "label": 1, "references": [{"text": "r", "grade": "A"}], "context": [1]},
                 {"answer": "x", "label": 1, "references": "r", "meta": "m", "question": 3},
                 {"answer": "x", "label": 1, "id": True},
                 {"answer": "x", "answer_b": "y"},
                 {"answer": "x", "preference": 1})
    found = problems(path, scale=Scale(1, 4, (1, 2, 3, 4)))
    assert found == [
        f"{path}:1: group: expected a non-empty string or integer, found [\"g\"]",
        f"{path}:1: label: expected one of 1, 2, 3, 4, found 2.5",
        f"{path}:2: references[0].grade: expected a finite number or null, found 'A'",
        f"{path}:2: context: expected text or a list of texts, found [1]",
        f"{path}:3: question: expected text, found 3",
        f"{path}:3: references: expected a list of texts or {{text, grade}} objects, found 'r'",
        f"{path}:3: meta: expected a JSON object, found 'm'",
        f"{path}:4: id: expected a non-empty string or integer, found true",
        f"{path}:5: preference: expected the human label (a number), found nothing",
        f"{path}:6: answer_b: expected text (a row with a preference compares answer with answer_b), found nothing",
        f"{path}:6: label: expected the human label (a number), found nothing",
    ]


def test_empty_answer_is_an_answer_in_jsonl(tmp_path):
    path = jsonl(tmp_path / "e.jsonl", {"answer": "", "answer_b": "something", "preference": 2})
    assert read_examples(path)[0].answer == ""


def test_labels_optional_when_scoring_new_data(tmp_path):
    path = jsonl(tmp_path / "new.jsonl", {"id": 7, "answer": "x"}, {"answer": "y", "answer_b": "z"})
    rows = read_examples(path, require_label=False)
    assert [(e.id, e.label, e.preference) for e in rows] == [("7", None, None), ("new:2", None, None)]


def test_csv_errors(tmp_path):
    path = write(tmp_path / "b.csv", "answer,label,score\nx,1,2\n")
    assert problems(path) == [f"{path}:1: header: expected columns among id, question, answer, references, "
                              "reference, context, answer_b, preference, label, group, found unknown column(s) 'score'; "
                              "map your columns with --field FIELD=COLUMN and --label COLUMN"]
    path = write(tmp_path / "c.csv", "answer,label\nx,1\ny,abc\nz\n,2\nw,inf\nv,1,extra\n")
    assert problems(path) == [
        f"{path}:3: label: expected a number, found 'abc'",
        f"{path}:4: row: expected 2 CSV cells, found 1",
        f"{path}:5: answer: expected text, found nothing",
        f"{path}:6: label: expected a finite number, found 'inf'",
        f"{path}:7: row: expected 2 CSV cells, found 3",
    ]


def test_file_level_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such data file"):
        read_examples(tmp_path / "missing.jsonl")
    assert problems(write(tmp_path / "x.txt", "a")) == [
        f"{tmp_path / 'x.txt'}: expected a .jsonl, .csv or .tsv file, found suffix '.txt'"]
    empty = write(tmp_path / "e.jsonl", "\n\n")
    assert problems(empty) == [f"{empty}: expected at least one row, found none"]
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b'{"answer": "ok", "label": 1}\n\xff\xfe\n')
    assert problems(binary) == [f"{binary}:2: row: expected UTF-8 text, found undecodable bytes (invalid start byte)"]


def test_error_message_lists_problems_and_truncates(tmp_path):
    path = jsonl(tmp_path / "many.jsonl", *[{"answer": "x", "label": "high"} for _ in range(60)])
    with pytest.raises(DataValidationError) as info:
        read_examples(path)
    assert len(info.value.problems) == 60
    text = str(info.value)
    assert text.startswith("60 problem(s) in the data:\n") and text.endswith("... and 10 more")


def test_a_jsonl_row_cut_short_is_reported_on_its_own_line(tmp_path):
    """A row truncated after a comma (the next line starts a new row) names its own line, not the next."""
    path = tmp_path / "cut.jsonl"
    path.write_text('{"answer": "a", "label": 1}\n{"answer": "b", "label": 2}\n{"answer": "c",\n'
                    '{"answer": "d", "label": 3}\n')
    with pytest.raises(DataValidationError) as err:
        read_examples(path)
    assert f"{path}:3: row: expected a JSON object, found invalid JSON" in str(err.value)
    assert f"{path}:4:" not in str(err.value)


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_a_label_column_no_row_has_is_said_when_a_label_column_is_passed_over(tmp_path, caplog, suffix):
    rows = [{"id": str(i), "answer": f"a{i}", "label": i % 5} for i in range(4)]
    path = tmp_path / f"d.{suffix}"
    if suffix == "csv":
        path.write_text("id,answer,label\n" + "".join(f"{r['id']},{r['answer']},{r['label']}\n" for r in rows))
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with caplog.at_level("WARNING", logger="judgetune"):
        unlabeled = read_examples(path, require_label=False, label="rating")  # a typo for the file's 'label'
    assert [e.label for e in unlabeled] == [None] * 4 and [str(e.meta["label"]) for e in unlabeled] == ["0", "1", "2", "3"]
    assert [r.getMessage() for r in caplog.records] == [
        f"warning: --label rating: no row of {path} has a column 'rating', so every row is unlabeled; its column "
        "'label' is kept under meta, not read as the label (drop --label, or name that column)"]
    caplog.clear()
    with caplog.at_level("WARNING", logger="judgetune"):
        assert [e.label for e in read_examples(path, require_label=False, label="label")] == [0, 1, 2, 3]
        new = jsonl(tmp_path / "new.jsonl", {"id": "n", "answer": "x"})  # new data, read as the tuned data was
        assert read_examples(new, require_label=False, label="score")[0].label is None
    assert caplog.records == []


@pytest.mark.parametrize("suffix", ["jsonl", "csv"])
def test_a_file_not_in_utf8_is_one_problem_at_its_line(tmp_path, suffix):
    rows = ['{"answer": "café", "label": 1}', '{"answer": "thé", "label": 2}'] if suffix == "jsonl" else \
        ["answer,label", "café,1", "thé,2"]
    text = "\n".join(rows) + "\n"
    utf16 = tmp_path / f"utf16.{suffix}"
    utf16.write_bytes(text.encode("utf-16"))  # with its byte-order mark, as Windows' "Unicode" text
    windows = tmp_path / f"cp1252.{suffix}"
    windows.write_bytes(text.replace("thé", "the").encode("cp1252"))
    for path, expected in ((utf16, f"{utf16}:1: file: expected UTF-8 text, found UTF-16 (its byte-order mark); save "
                                   "the file as UTF-8"),
                           (windows, f"{windows}:{1 if suffix == 'jsonl' else 2}: ")):
        with pytest.raises(DataValidationError) as caught:
            read_examples(path)
        assert len(caught.value.problems) == 1 and caught.value.problems[0].startswith(expected), caught.value.problems
        assert "expected UTF-8 text" in caught.value.problems[0]


def test_a_file_without_any_label_is_one_problem_naming_its_columns(tmp_path):
    pairs = jsonl(tmp_path / "pairs.jsonl", {"answer": "x", "answer_b": "y"}, {"answer": "z", "answer_b": "w"})
    assert problems(pairs) == [f"{pairs}: preference: expected a column of human labels, found none in any row "
                               "(columns of the first row: answer, answer_b); name yours with --label COLUMN"]
    half = jsonl(tmp_path / "half.jsonl", {"answer": "x", "label": 1}, {"answer": "y"})
    assert problems(half) == [f"{half}:2: label: expected the human label (a number), found nothing"]


@pytest.mark.parametrize("header, hint", [
    ("Answer,Label", "found unknown column(s) 'Answer', 'Label'; names are lower case: 'answer', 'label'"),
    ("answer,label,", "found unknown column(s) ''; an empty column name: a comma at the end of the header?"),
    ("answer,rating", "found unknown column(s) 'rating'; map your columns with --field FIELD=COLUMN and --label COLUMN"),
])
def test_an_unknown_csv_column_gets_the_hint_that_fits_it(tmp_path, header, hint):
    path = write(tmp_path / "d.csv", f"{header}\n" + ",".join(["x", "1", ""][:header.count(",") + 1]) + "\n")
    [problem] = problems(path)
    assert problem.startswith(f"{path}:1: header: expected columns among") and problem.endswith(hint)
