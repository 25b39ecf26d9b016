"""Wrong arguments of the Python API are refused up front with one JudgetuneError line naming the argument, what
was expected and what was found: never a raw TypeError, never a silent empty result, never an input overwritten.

Every test runs on the frozen ``length`` judge (no model)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from _kits import jsonl, length_config

import judgetune
from judgetune.errors import DataValidationError, JudgetuneError, SettingsError

ITEM = [{"answer": "a short answer"}]
GROUP = [{"id": str(i), "answer": "word " * (1 + i), "group": "g", "label": 1 + i % 2} for i in range(4)]


@pytest.fixture
def judge(tmp_path: Path) -> judgetune.FrozenJudge:
    return judgetune.load(length_config(tmp_path / "judge.json"))


def _rows(n: int = 8) -> list[dict]:
    return [{"id": f"r{i}", "answer": "a" * (i + 1), "label": 1 + i % 5 if i < 6 else None,
             "meta": {"system": "AB"[i % 2]}} for i in range(n)]


@pytest.mark.parametrize("protocol", [None, "group"])
@pytest.mark.parametrize("force", [False, True])
def test_score_to_never_writes_over_its_own_input(judge, tmp_path, monkeypatch, force, protocol):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "d.csv"
    data.write_text("id,answer,group\n1,one two,g\n2,three,g\n", encoding="utf-8")
    before = data.read_bytes()
    os.symlink(data.name, tmp_path / "link.csv")
    for given, out in (("d.csv", "d.csv"), (data, "./d.csv"), ("link.csv", "d.csv"), ("d.csv", "link.csv")):
        with pytest.raises(JudgetuneError, match=rf"^out {out}: that is the input file of this call; write the "
                                                 "scores elsewhere$") as caught:
            judge.score_to(given, out, force=force, protocol=protocol)
        assert "force" not in str(caught.value)
    assert data.read_bytes() == before and not list(tmp_path.glob("*.part"))


@pytest.mark.parametrize("call,expected", [
    (lambda j: j.score_iter(ITEM, chunk_size=0), r"^chunk_size: expected a whole number >= 1, found 0$"),
    (lambda j: j.score_iter(ITEM, chunk_size=-1), r"^chunk_size: expected a whole number >= 1, found -1$"),
    (lambda j: j.score_iter(5), r"^items: expected an iterable of Examples or dicts, or a DataFrame, found int$"),
    (lambda j: j.score_iter({"answer": "x"}), r"^items: .*found dict \(one row\? give a list of rows\)$"),
    (lambda j: j.score_iter("d.csv"), r"^items: .*found a path \(d\.csv\); score a data file with score_to"),
    (lambda j: j.score_iter(Path("d.csv")), r"^items: .*found a path \(d\.csv\)"),
    (lambda j: j.score_to(None, "o.jsonl"), r"^items: expected a list of Examples .*found NoneType$"),
    (lambda j: j.score_to(5, "o.jsonl"), r"^items: expected a list of Examples .*found int$"),
    (lambda j: j.score_to(ITEM, 5), r"^out: expected the path of a .jsonl, .csv or .parquet file, found int$"),
    (lambda j: j.score_to(ITEM, None), r"^out: expected the path .* found NoneType$"),
    (lambda j: j.score_to(ITEM, "o.jsonl", chunk_size=0), r"^chunk_size: expected a whole number >= 1, found 0$"),
    (lambda j: j.score_to(ITEM, "o.jsonl", chunk_size=-1), r"^chunk_size: .*found -1$"),
    (lambda j: j.score_to(ITEM, "o.jsonl", max_tokens=-5), r"^max_tokens: expected a whole number >= 1, found -5$"),
    (lambda j: j.score_to(ITEM, "o.jsonl", prices="1,2"), r"^prices: expected \(prompt, completion\), two prices "
                                                         r">= 0 per million tokens, found '1,2'$"),
    (lambda j: j.score_to(ITEM, "o.jsonl", prices=(1, -2)), r"^prices: .*found \[1, -2\]$"),
    (lambda j: j.score_to(GROUP, "o.jsonl", protocol="linkage", per_grade=0), r"^per_grade: .*found 0$"),
    (lambda j: j.score_many(GROUP, protocol="linkage", per_grade="a"),
     r"^per_grade: expected a whole number >= 1, found 'a'$"),
    (lambda j: j.score_many(GROUP, protocol="linkage", per_grade=0), r"^per_grade: .*found 0$"),
    (lambda j: j.score_many(GROUP, protocol="linkage", seed=-1), r"^seed: expected a whole number >= 0, found -1$"),
    (lambda j: j.score_many(GROUP, protocol="linkage", seed="a"), r"^seed: .*found 'a'$"),
])
def test_frozen_judge_methods_refuse_wrong_arguments_at_the_call(judge, tmp_path, monkeypatch, call, expected):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d.csv").write_text("id,answer\n1,one\n", encoding="utf-8")
    with pytest.raises(JudgetuneError, match=expected):
        call(judge)  # score_iter refuses at the call, before anything is iterated
    assert not (tmp_path / "o.jsonl").exists() and not list(tmp_path.glob("*.part"))


def test_score_iter_scores_every_item_and_a_dataframe_row_by_row(judge):
    pd = pytest.importorskip("pandas")
    items = [{"id": str(i), "answer": "w " * (i + 1)} for i in range(5)]
    assert [s.id for s in judge.score_iter(items, chunk_size=2)] == ["0", "1", "2", "3", "4"]
    assert [s.id for s in judge.score_iter(pd.DataFrame(items), chunk_size=3)] == ["0", "1", "2", "3", "4"]


def test_score_to_of_no_items_leaves_no_part_folder(judge, tmp_path):
    with pytest.raises(JudgetuneError, match="no items to score"):
        judge.score_to([], tmp_path / "o.jsonl")
    assert list(tmp_path.iterdir()) == [tmp_path / "judge.json"]


def test_score_says_its_reference_is_one_text(judge):
    with pytest.raises(DataValidationError, match=r"^score\(\): reference: expected one text \(several, or graded "
                                                  r"ones, go in references=\), found 3$"):
        judge.score(answer="x", reference=3)
    with pytest.raises(DataValidationError, match=r"2 problem.*\n.*reference: expected one text.*\n.*answer: expected"):
        judge.score(answer=None, reference=["a"])  # every problem at once, as before
    assert judge.score(answer="x", reference="a text") == judge.score(answer="x")  # the length judge reads no reference


@pytest.mark.parametrize("kwargs,expected", [
    ({"judge": 5}, r"^judge: expected a judge.json path or a FrozenJudge, found int$"),
    ({"confidence": "0.9"}, r"^confidence: expected a level between 0 and 1 such as 0.95, found '0.9'$"),
    ({"confidence": 95}, r"^confidence: .*found 95$"),
    ({"scale": "1-5"}, r"^scale: expected \(low, high\), two numbers, found '1-5'$"),
    ({"scale": (1, 2, 3)}, r"^scale: .*found \[1, 2, 3\]$"),
    ({"fit": "score", "seed": -1}, r"^seed: expected a whole number from 0 to 4294967295, found -1$"),
    ({"seed": "a"}, r"^seed: .*found 'a'$"),
    ({"fields": ["answer"]}, r"^fields: expected a dict of Example field to column name .*found \[\"answer\"\]$"),
    ({"label": 3}, r"^label: expected text, found 3$"),
    ({"api_base": 5}, r"^api_base: expected text, found 5$"),
    ({"scores": "nope.csv"}, r"^scores: expected an existing file, found no file at nope.csv$"),
    ({"scores": 5}, r"^scores: expected the path of the file judgetune score wrote, found int$"),
    ({"labeled": "nope.csv"}, r"^labeled: expected an existing file, found no file at nope.csv$"),
    ({"labeled": "stsb"}, r"^labeled: expected an existing file, found no file at stsb$"),
    ({"labeled": 3}, r"^labeled: expected a catalog name, a file path, a list of dicts or a pandas DataFrame, "
                     r"found int$"),
    ({"data": "nope.csv"}, r"^data: expected an existing file or a catalog name, found no file at nope.csv$"),
    ({"data": {"answer": "x"}}, r"^data: expected .*, found dict \(one row\? give a list of rows\)$"),
])
def test_estimate_refuses_each_wrong_argument_in_one_line(tmp_path, monkeypatch, kwargs, expected):
    monkeypatch.chdir(tmp_path)
    call = {"judge": str(length_config(tmp_path / "judge.json")), "data": str(jsonl(tmp_path / "d.jsonl", _rows())),
            "by": "system", **kwargs}
    with pytest.raises(JudgetuneError, match=expected) as caught:
        judgetune.estimate(**call)
    assert "\n" not in str(caught.value)
    if "judge" not in kwargs and "data" not in kwargs:
        assert isinstance(caught.value, SettingsError) or "labeled" in kwargs


def test_estimate_with_good_arguments_still_runs(tmp_path):
    frame = judgetune.estimate(str(length_config(tmp_path / "judge.json")), _rows(), by="system", confidence=0.9,
                               scale=(1, 5), fields={}, seed=3)
    assert set(frame["what"]) == {"system", "difference"}
