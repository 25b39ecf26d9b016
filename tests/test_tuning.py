"""The main job on the embedded model: tune -> calibrate -> freeze -> score, resume, budgets,
reports, comparisons; and a kill in the middle of a trial."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import jsonlines
import optuna
import pytest

from judgetune.cli import main
from judgetune.config import ConfigError, JudgeConfig

pytestmark = pytest.mark.model  # every test here runs the embedded model

TINY = ["--judge", "rubric", "--data", "sts2012-msrpar", "--trials", "2", "--search-items", "6", "--chunk", "3",
        "--dev-items", "6", "--test-items", "6", "--gate-items", "12", "--rescore", "1", "--fix", "reasoning=false",
        "--also", "none"]  # the rubric judge's own run: the other families' defaults are tests/test_also.py's


@pytest.fixture(scope="module")
def env(data_root, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUDGETUNE_DATA_DIR", str(data_root))
        mp.setenv("JUDGETUNE_CACHE_DIR", str(cache))
        yield {**os.environ}


@pytest.fixture(scope="module")
def run(env, tmp_path_factory):
    runs = tmp_path_factory.mktemp("runs")
    assert main(["tune", *TINY, "--run", "tiny", "--runs-dir", str(runs)]) == 0
    return runs / "tiny"


def study_of(run_dir: Path) -> optuna.Study:
    return optuna.load_study(study_name=run_dir.name, storage=f"sqlite:///{run_dir / 'study.db'}")


def test_tune_writes_a_frozen_judge_config(run):
    data = json.loads((run / "judge.json").read_text())
    assert {"schema_version", "judge", "lm", "instruction", "demos", "calibrator", "metrics"} <= set(data)
    assert data["judge"] == "rubric" and data["lm"]["spec"] == "local:smollm2"
    assert data["reproduce"]["engine"] == "llamacpp"
    assert data["reproduce"]["threads"] == int(os.environ["JUDGETUNE_THREADS"])  # conftest's setting reached the model
    assert {"search_items", "dev", "test"} <= set(data["metrics"]) and data["metrics"]["test"]["n"] >= 2
    assert data["metrics"]["test"]["mae_ci"][0] <= data["metrics"]["test"]["mae"] <= data["metrics"]["test"]["mae_ci"][1]
    assert len(data["demos"]) == data["params"]["k"] and all("label" in d for d in data["demos"])
    assert data["calibrator"]["kind"] in ("isotonic", "linear", "constant")
    assert set(data["data"]["files"]) and all(len(h) == 64 for h in data["data"]["files"].values())
    search = data["metrics"]["study"]
    assert search["trials"] == {"COMPLETE": 2}
    assert search["lm_calls"] > 0 and search["tokens"] > 0
    trials = study_of(run).get_trials()
    assert trials[0].user_attrs["incumbent"] is True  # the default judge is the first trial
    # a fresh cache: the first trial computes one answer per item; a trial repeating earlier settings, none
    assert trials[0].user_attrs["lm_calls"] == trials[0].user_attrs["items_scored"] == 6
    for i, trial in enumerate(trials):
        assert trial.user_attrs["tokens"] > 0
        if any(t.params == trial.params for t in trials[:i]):
            assert trial.user_attrs["lm_calls"] == 0
        else:
            assert 0 < trial.user_attrs["lm_calls"] <= trial.user_attrs["items_scored"]
    assert sum(t.user_attrs["lm_calls"] for t in trials) == search["lm_calls"]
    gain = data["metrics"]["gain"]
    assert {"spearman", "mae", "default_shipped", "n"} <= set(gain) and gain["n"] == data["metrics"]["test"]["n"]
    for key in ("spearman", "mae"):
        g = gain[key]
        assert g["value"] is None or g["low"] <= g["high"]
    assert gain["default_shipped"] == data["metrics"]["selection"]["default_shipped"]


def test_score_reproduces_the_test_predictions_exactly(run, tmp_path, monkeypatch):
    """The frozen judge scores the test items from an empty answer cache: every LM answer is computed
    again, in the score command's batches, and gives the tune's predictions bit for bit."""
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cold-cache"))
    out = tmp_path / "preds.jsonl"
    assert main(["score", "--config", str(run / "judge.json"), "--data", str(run / "test.jsonl"), "--out", str(out)]) == 0
    with jsonlines.open(out) as a, jsonlines.open(run / "test_predictions.jsonl") as b:
        mine, theirs = list(a), list(b)
    assert [p["id"] for p in mine] == [p["id"] for p in theirs]
    assert [p["score"] for p in mine] == [p["score"] for p in theirs]  # exactly, not approximately
    assert [p["raw_score"] for p in mine] == [p["raw_score"] for p in theirs]
    assert any((tmp_path / "cold-cache").rglob("*"))  # the answers were computed here, not read


def test_config_round_trip_gives_the_same_file(run, tmp_path):
    config = JudgeConfig.load(run / "judge.json")
    config.save(tmp_path / "again.json")
    assert (tmp_path / "again.json").read_bytes() == (run / "judge.json").read_bytes()


def test_rerunning_the_same_command_resumes_instead_of_starting_over(run, env):
    before = json.loads((run / "judge.json").read_text())
    trials = len(study_of(run).get_trials())
    assert main(["tune", *TINY, "--run", "tiny", "--runs-dir", str(run.parent)]) == 0
    after = json.loads((run / "judge.json").read_text())
    assert len(study_of(run).get_trials()) == trials
    assert after["metrics"]["test"] == before["metrics"]["test"] and after["params"] == before["params"]


def test_changed_settings_under_one_run_name_are_refused(run, env, capsys):
    changed = [*TINY[:-4], "--also", "none", "--fix", "reasoning=true"]  # TINY ends --fix reasoning=false --also none
    assert main(["tune", *changed, "--run", "tiny", "--runs-dir", str(run.parent)]) == 2
    assert "exists with other settings (fixed)" in capsys.readouterr().err


def test_a_refused_lm_spec_leaves_no_study_to_block_the_corrected_command(env, tmp_path, capsys):
    args = ["--data", "sts2012-msrpar", "--trials", "1", "--search-items", "6", "--dev-items", "6", "--test-items",
            "6", "--run", "fixed", "--runs-dir", str(tmp_path)]
    assert main(["tune", "--judge", "rubric", "--lm", "nosuch:model", *args]) == 2
    assert "LM spec 'nosuch:model'" in capsys.readouterr().err and not (tmp_path / "fixed").exists()
    assert main(["tune", "--judge", "bm25", *args]) == 0  # the same run name, the spec corrected (a judge without LM)
    assert (tmp_path / "fixed" / "judge.json").is_file()


@pytest.mark.parametrize("field, value, message", [
    ("schema_version", 99, "schema_version: expected 1"),
    ("judge", "oracle", "judge: expected one of"),
    ("label_range", [1], "label_range: list should have at least 2 items after validation, not 1, found [1]"),
    ("calibrator", {"kind": "isotonic", "label_range": [0, 5], "x": [0, 1], "y": [1]}, "calibrator:"),
    ("demos", [{"answer": "a", "label": "high"}], "demos[0]: label"),
])
def test_a_broken_config_names_the_field(run, tmp_path, field, value, message):
    data = json.loads((run / "judge.json").read_text())
    data[field] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        JudgeConfig.load(path)


def test_report_is_rebuilt_and_renders_in_headless_chromium(run, tmp_path):
    (run / "report.html").unlink()
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    assert page.count('src="data:image/png;base64,') >= 4 and "<script" not in page
    # the default gate (nested) is reported as what it is, not as the old rule
    assert "Gate off" not in page and ("The nested gate" in page or "No challenger beat the default on the" in page)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("JUDGETUNE_REQUIRE_CHROMIUM"):
            pytest.fail("chromium is required here (JUDGETUNE_REQUIRE_CHROMIUM) but not installed")
        pytest.skip("chromium not installed (Debian package chromium)")
    shot = tmp_path / "report.png"
    done = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                           f"--screenshot={shot}", "--window-size=1200,2400", (run / "report.html").as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 20_000, done.stderr[-2000:]
    assert "Uncaught" not in done.stderr and "ERR_FILE_NOT_FOUND" not in done.stderr
    dom = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                          (run / "report.html").as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert dom.count("<img") >= 4 and "Pareto front" in dom


def test_compare_prints_both_judges_and_a_paired_test(run, tmp_path, env, capsys):
    data = json.loads((run / "judge.json").read_text())
    data["calibrator"] = None  # the same judge without its calibrator
    other = tmp_path / "uncalibrated.json"
    other.write_text(json.dumps(data))
    assert main(["compare", "--data", str(run / "test.jsonl"), "--split", "all", "--configs", str(run / "judge.json"),
                 str(other), "--resamples", "50", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in result["rows"]] == [str(run / "judge.json"), str(other)]
    assert result["pairs"][0]["items"] == 6 and "p_value" in result["pairs"][0]


def test_splits_keep_questions_apart_and_demos_away_from_search_items(env):
    from collections import Counter

    from judgetune.tuning import RunSpec, prepare_splits

    s = prepare_splits(RunSpec(name="x", judge="linkage", data="linkage-trec-dl-nf", search_items=12, per_question=3))
    for items in (s.search, s.demo_pool, s.dev, s.test):
        assert max(Counter(e.group_key for e in items).values()) <= 3
    groups = [{e.group_key for e in items} for items in (s.train, s.dev, s.test)]
    assert not (groups[0] & groups[1] or groups[0] & groups[2] or groups[1] & groups[2])
    assert not {e.group_key for e in s.search} & {e.group_key for e in s.demo_pool}
    assert len(s.search) == 12 and len(groups[2]) >= 5


def test_fit_items_caps_the_training_pool_seeded_and_question_by_question(env):
    from judgetune.tuning import RunSpec, prepare_splits

    spec = {"name": "x", "judge": "hybrid", "data": "linkage-trec-dl-nf", "search_items": 12}
    full = prepare_splits(RunSpec(**spec))
    capped = prepare_splits(RunSpec(**spec, fit_items=50))
    again = prepare_splits(RunSpec(**spec, fit_items=50, seed=0))
    assert len(full.demo_pool) > 50 and len(capped.demo_pool) == 50
    assert [e.id for e in capped.demo_pool] == [e.id for e in again.demo_pool]  # seeded
    assert {e.id for e in capped.demo_pool} <= {e.id for e in full.demo_pool}
    # whole questions, except at most the last one taken
    partial = [g for g in {e.group_key for e in capped.demo_pool}
               if sum(e.group_key == g for e in capped.demo_pool) < sum(e.group_key == g for e in full.demo_pool)]
    assert len(partial) <= 1
    # the other splits are untouched
    for name in ("search", "dev", "test"):
        assert [e.id for e in getattr(capped, name)] == [e.id for e in getattr(full, name)], name
    with pytest.raises(ValueError, match="fit_items"):
        RunSpec(**spec, fit_items=2)


def test_a_score_matrix_resumes_column_by_column_from_its_partial_file(tmp_path):
    """benchmarks/score_matrix.py: a run killed mid-column leaves a usable partial file (``complete`` false, the
    finished columns listed); the next run, with one more candidate, finishes the column and adds the new one."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import score_matrix

    from judgetune.judges import Verdict

    class Fake:
        def __init__(self, offset: float, fail_after: int | None = None) -> None:
            self.offset, self.fail_after, self.calls = offset, fail_after, 0

        def judge_all(self, items):
            self.calls += 1
            if self.fail_after is not None and self.calls > self.fail_after:
                raise KeyboardInterrupt
            return [Verdict(score=self.offset + i) for i in items]

    items, out = list(range(10)), tmp_path / "matrix.json"
    table = {"ids": [str(i) for i in items], "labels": items, "groups": [str(i) for i in items]}
    state = {"meta": {"texts": [], "data_fixed": {}, "demo_pool": []}, "items": table, "scored": 0,
             "candidates": [{"name": "default", "params": {"a": 0}}, {"name": "c1", "params": {"a": 1}}],
             "scores": [[], []], "failures": [[], []], "seconds": [0.0, 0.0]}
    with pytest.raises(KeyboardInterrupt):
        score_matrix.score_columns(state, [Fake(0.0), Fake(1.0, fail_after=1)], items, out, chunk=4)
    saved = json.loads(out.read_text())
    assert saved["meta"]["columns_done"] == [0] and not saved["meta"]["complete"] and saved["scored"] == 4
    again = score_matrix.resumed(saved, [{"a": 0}, {"a": 1}, {"a": 2}], table, [], {}, [], False)
    assert [c["name"] for c in again["candidates"]] == ["default", "c1", "c2"]
    score_matrix.score_columns(again, [Fake(0.0), Fake(1.0), Fake(2.0)], items, out, chunk=4)
    done = json.loads(out.read_text())
    assert done["meta"]["complete"] and done["meta"]["columns_done"] == [0, 1, 2] and done["scored"] == 10
    assert done["scores"][1] == [1.0 + i for i in items] and done["scores"][2][-1] == 11.0


def test_a_score_matrix_reuses_another_files_columns_on_its_first_items(tmp_path):
    """benchmarks/score_matrix.py --reuse: each empty column whose candidate another file of the same LM, judge, set
    and demos holds starts from that candidate's scores, found by item id, up to the first of today's items it did not
    score; a column already started is left alone; a file made otherwise is refused."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import score_matrix

    base = {"lm": "local:x", "judge": "rubric", "dataset": "d", "seed": 0, "texts": [], "data_fixed": {},
            "demo_pool": ["p"]}
    other = {"meta": dict(base), "items": {"ids": ["a", "b", "c", "d"]},
             "candidates": [{"name": "default", "params": {"k": 0}}, {"name": "c1", "params": {"k": 2}},
                            {"name": "c2", "params": {"k": 4}}],
             "scores": [[1.0, 2.0, 3.0, 4.0], [5.0, None, 7.0], [1.0, 1.0, 1.0, 1.0]],
             "failures": [[None] * 4, [None, "x", None], [None] * 4], "seconds": [8.0, 6.0, 4.0]}
    state = {"meta": dict(base), "items": {"ids": ["a", "d", "c"]},
             "candidates": [{"name": "default", "params": {"k": 0}}, {"name": "c1", "params": {"k": 2}},
                            {"name": "c2", "params": {"k": 4}}, {"name": "c3", "params": {"k": 6}}],
             "scores": [[], [], [9.0], []], "failures": [[], [], [None], []], "seconds": [0.0, 0.0, 1.0, 0.0]}
    assert score_matrix.reuse(state, other, "other.json") == [0, 1]
    assert state["scores"] == [[1.0, 4.0, 3.0], [5.0], [9.0], []]  # c1 stops at d, which it never scored
    assert state["failures"][:2] == [[None] * 3, [None]] and state["seconds"] == [6.0, 2.0, 1.0, 0.0]
    assert state["meta"]["reused"] == {"default": {"file": "other.json", "items": 3},
                                       "c1": {"file": "other.json", "items": 1}}
    with pytest.raises(SystemExit, match="another lm"):
        score_matrix.reuse(state, {**other, "meta": {**base, "lm": "local:y"}}, "other.json")


def test_a_score_matrix_rechecks_its_stored_items_before_scoring_more(tmp_path):
    """benchmarks/score_matrix.py's drift check: the stored first items scored again must rank as stored, or be the
    same scores (a constant column, whose Spearman is undefined, passes when unchanged); else the column is named
    (the run stops for its own columns, and judges a reused column again from its first item)."""
    import sys
    from types import SimpleNamespace

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import score_matrix

    class Replays:  # a judge that gives these scores again: fault injection, no judging is proven here
        def __init__(self, scores):
            self.scores = scores

        def judge_all(self, items):
            return [SimpleNamespace(score=s, parsed=True) for s in self.scores[:len(items)]]

    state = {"candidates": [{"name": "default"}, {"name": "c1"}],
             "scores": [[1.0, 2.0, 3.0, 4.0], [3.0, 3.0, 3.0, 3.0]]}
    items = ["a", "b", "c", "d"]
    assert score_matrix.drift_check([Replays([1.1, 2.1, 3.1, 4.1]), Replays([3.0] * 4)], items, state, [0, 1],
                                    25) == []
    assert score_matrix.drift_check([Replays([4.0, 3.0, 2.0, 1.0]), Replays([3.0] * 4)], items, state, [0, 1],
                                    25) == [0]
    assert score_matrix.drift_check([Replays([1.0] * 4), Replays([3.0, 3.0, 3.0, 2.0])], items, state, [1],
                                    25) == [1]
    state = {**state, "failures": [[None] * 4, [None] * 4], "seconds": [1.0, 2.0],
             "meta": {"reused": {"default": {"file": "old.json", "items": 4}, "c1": {"file": "old.json", "items": 4}}}}
    score_matrix.drop_columns(state, [1], "old.json")
    assert state["scores"] == [[1.0, 2.0, 3.0, 4.0], []] and state["failures"][1] == [] and state["seconds"][1] == 0
    assert list(state["meta"]["reused"]) == ["default"]


def test_gate_power_resumes_a_partial_file_and_not_a_complete_one(tmp_path, monkeypatch):
    """benchmarks/gate_power.py writes each row as it finishes; a rerun of the same command keeps the rows of a
    partial file and runs the rest, and a complete file is run again from the start."""
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    import gate_power

    out = tmp_path / "power.json"
    argv = ["gate_power.py", "--rows", "60", "--rescore", "2", "--draws", "2", "--out", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    gate_power.main()
    stored = json.loads(out.read_text())
    assert stored["complete"] is True and [r["lift"] for r in stored["rows"]] == [0.10, 0.0]
    marked = {**stored, "complete": False, "rows": [{**stored["rows"][0], "ships_better": 0.123}]}
    out.write_text(json.dumps(marked))
    gate_power.main()
    resumed = json.loads(out.read_text())
    assert resumed["complete"] is True and [r["ships_better"] for r in resumed["rows"]][0] == 0.123
    assert resumed["rows"][1] == stored["rows"][1]  # the missing row, run again from its own seed
    out.write_text(json.dumps({**resumed, "complete": True}))
    gate_power.main()
    assert json.loads(out.read_text())["rows"][0]["ships_better"] == stored["rows"][0]["ships_better"]
