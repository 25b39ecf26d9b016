"""The Python API on data held in memory: lists of dicts and pandas DataFrames through evaluate, tune,
score_many and compare; results as DataFrames; LM, sampler and storage passed as objects; the GEPA metric.

The plumbing runs on the ``overlap`` judge (no model): its agreement on the synthetic rows below is set by
how many words of the reference each answer keeps, so it holds on any CPU."""

from __future__ import annotations

import optuna
import pytest
from _kits import overlap_rows as rows

import judgetune
from judgetune.errors import DataValidationError, JudgetuneError

pd = pytest.importorskip("pandas")

REF = {"target": "reference"}  # the rows have no question: fix the overlap judge's target


def test_evaluate_takes_a_dataframe_and_returns_rows_that_convert(tmp_path):
    result = judgetune.evaluate("overlap", pd.DataFrame(rows()), target="reference", n_resamples=200)
    frame = result.to_pandas()
    assert list(frame["name"][:3]) == ["overlap", "constant", "random"]
    judged = result[0]
    assert judged["n"] >= 8
    assert judged["spearman"] > 0.8 and judged["mae"] < result[1]["mae"]  # beats the constant predictor


def test_tune_on_a_list_of_dicts_gives_the_frozen_judge_and_its_study(tmp_path):
    data = rows()
    judge = judgetune.tune(data, judge="overlap", name="mem", runs_dir=tmp_path, n_trials=2, search_items=8,
                           report=False, fixed=REF, storage=optuna.storages.InMemoryStorage(),
                           sampler=optuna.samplers.RandomSampler(seed=0))
    assert isinstance(judge, judgetune.TunedJudge) and isinstance(judge, judgetune.FrozenJudge)
    assert len(judge.study.trials) == 2 and judge.trials_to_pandas().shape[0] == 2
    saved = list((tmp_path / "mem").glob("rows-*.jsonl"))
    assert len(saved) == 1 and len(saved[0].read_text().splitlines()) == len(data)
    assert (tmp_path / "mem" / "judge.json").is_file()
    assert judge.config.metrics["test"]["spearman"] > 0.8
    worth = judge.config.metrics["test"]["labels_worth"]  # a judge this close to the labels is worth many of them
    assert worth["n"] == judge.config.metrics["test"]["n"] and worth["labels_worth"] > 1.5
    steps = judge.config.metrics["seconds"]  # every step's wall time, for the summary's time line
    assert {"search", "choosing", "freezing", "scoring", "audit"} <= set(steps) and min(steps.values()) >= 0
    assert judgetune.tuning.seconds_line(judge.config.metrics).startswith("time: search ")

    scored = judge.score_many(pd.DataFrame(data[:6]))  # a DataFrame straight into score_many, in order
    frame = scored.to_pandas()
    assert list(frame["id"]) == [r["id"] for r in data[:6]] and frame["score"].notna().all()
    assert frame["score"].iloc[0] > frame["score"].iloc[5]  # the whole answer above the one with 10 words replaced


def test_same_rows_resume_the_run_and_other_rows_are_refused(tmp_path):
    kwargs = dict(judge="overlap", name="again", runs_dir=tmp_path, search_items=8, report=False, fixed=REF)
    first = judgetune.tune(rows(), n_trials=2, **kwargs)
    again = judgetune.tune(pd.DataFrame(rows()), n_trials=2, **kwargs)  # the same rows: the same file, same study
    assert len(again.study.trials) == len(first.study.trials) == 2
    assert len(list((tmp_path / "again").glob("rows-*.jsonl"))) == 1
    with pytest.raises((JudgetuneError, ValueError), match="data"):
        judgetune.tune(rows(seed=1), n_trials=2, **kwargs)


def test_an_unknown_judge_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ValueError, match="unknown judge 'nope'; known: .*rubric"):
        judgetune.tune(rows(), judge="nope", name="x", runs_dir=tmp_path)
    assert not (tmp_path / "x").exists()


def test_bad_rows_are_refused_with_the_row_and_field():
    data = rows(12)
    del data[3]["answer"]
    with pytest.raises(DataValidationError, match=r":4: .*answer"):
        judgetune.evaluate("overlap", data)
    with pytest.raises(JudgetuneError, match="row 2"):
        judgetune.evaluate("overlap", [*rows(2), "not a row"])


def test_missing_dataframe_cells_are_left_out_not_read_as_text():
    from judgetune._api import _rows_in_memory

    frame = pd.DataFrame([{"answer": "a", "reference": None, "label": 1}, {"answer": "b", "reference": "r",
                                                                          "label": 2}])
    first, second = _rows_in_memory(frame)
    assert first == {"answer": "a", "label": 1} and type(first["label"]) is int
    assert second["reference"] == "r"


def test_compare_takes_judges_and_rows(tmp_path):
    judge = judgetune.tune(rows(), judge="overlap", name="cmp", runs_dir=tmp_path, n_trials=1, search_items=8,
                           report=False, fixed=REF)
    result = judgetune.compare({"object": judge, "file": tmp_path / "cmp" / "judge.json"}, rows(), split=None)
    assert [r["name"] for r in result["rows"]] == ["object", "file"]
    pair = result["pairs"].to_pandas().iloc[0]
    assert pair["items"] == 60 and pair["mae_difference"] == 0.0  # the same judge, loaded twice, scores alike


def test_dspy_metric_with_feedback_for_gepa(tmp_path):
    import dspy

    judge = judgetune.tune(rows(), judge="overlap", name="gepa", runs_dir=tmp_path, n_trials=1, search_items=8,
                           report=False, fixed=REF)
    example = dspy.Example(reference=rows()[0]["reference"]).with_inputs()
    plain = judge.as_dspy_metric(question=None)
    rich = judge.as_dspy_metric(question=None, feedback=True)
    good, bad = dspy.Prediction(answer=rows()[0]["reference"]), dspy.Prediction(answer="zebra piano galaxy")
    assert plain(example, good) > plain(example, bad)
    out = rich(example, good, None, "pred", None)  # GEPA's five-argument call
    assert isinstance(out, dspy.Prediction) and out.score == plain(example, good)
    assert "human scale" in out.feedback


def test_lm_objects_are_accepted():
    import dspy

    from judgetune._api import _lm_object

    model, owned = _lm_object(dspy.LM("openai/some-model", api_base="http://127.0.0.1:9/v1"))
    try:
        assert owned and model.spec.kind == "openai" and model.spec.api_base == "http://127.0.0.1:9/v1"
    finally:
        model.close()
    with pytest.raises(JudgetuneError, match="OpenAI-compatible"):
        _lm_object(dspy.LM("anthropic/claude"))


@pytest.mark.model
@pytest.mark.slow
def test_tune_with_an_lm_object_keeps_it_open_and_records_its_spec(tmp_path, embedded_lm):
    judge = judgetune.tune(rows(40), judge="likelihood", name="lm", runs_dir=tmp_path, lm=embedded_lm, n_trials=1,
                           search_items=8, dev_items=8, test_items=8, report=False, fixed={"k": 0}, also=[])
    assert judge.config.lm["spec"] == "local:smollm2"
    assert embedded_lm.generate is not None and judge.config.metrics["test"]["n"] > 0
    rich = judge.as_dspy_metric(question=None, feedback=True)
    import dspy

    out = rich(dspy.Example(reference=rows()[0]["reference"]), dspy.Prediction(answer=rows()[0]["answer"]))
    assert 0.0 <= out.score <= 1.0 and "human scale" in out.feedback


def test_progress_is_plain_lines_off_a_terminal():
    import io

    from judgetune._progress import progress

    out = io.StringIO()
    assert list(progress(range(20), desc="items", stream=out)) == list(range(20))
    lines = out.getvalue().splitlines()
    assert lines[0] == "items: 0/20" and lines[-1].startswith("items: 20/20 done")
    assert "\r" not in out.getvalue() and 3 <= len(lines) <= 12  # a line per tenth, no carriage returns
    silent = io.StringIO()
    assert list(progress([1, 2], stream=silent, enabled=False)) == [1, 2] and silent.getvalue() == ""
