"""The gate and the frozen-judge paths hold no trust holes: a frozen judge is scored on its
own split; the gate makes a valid test with few dev questions or none; grouped Spearman is paired; the
early stop measures like the front; one failure rule; the other objective is guarded and a harmful
gain is said; --audit-max audits the default and calibrated candidates; the label range is read
without the test rows; pyproject's minimums have what the code calls.

Each is read off small arrays or the ``overlap`` judge (no model), so it holds on any CPU."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import tomllib
from _kits import overlap_rows as rows

import judgetune
from judgetune import datasets
from judgetune.errors import JudgetuneError
from judgetune.stats import filled, gain, harmful_gain
from judgetune.tuning import RunSpec, gain_line, gate, gate_line, prepare_splits
from judgetune.tuning._objective import clearly_dominated
from judgetune.tuning._selection import CandidateFigures

REF = {"target": "reference"}


def scored(raw, pred=None) -> CandidateFigures:
    raw = np.asarray(raw, dtype=float)
    return CandidateFigures({}, raw, raw if pred is None else np.asarray(pred, dtype=float), None, 0.0)


# 1. evaluate() and compare() of a frozen judge use the split it was tuned on


@pytest.fixture(scope="module")
def tuned_on_seed_3(tmp_path_factory) -> tuple[Path, Path]:
    """(judge.json, data) of an overlap judge tuned with seed 3."""
    folder = tmp_path_factory.mktemp("s3")
    data = folder / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    spec = RunSpec(name="s3", judge="overlap", data=str(data), seed=3, n_trials=1, search_items=8, fixed=REF)
    judgetune.tuning.tune(spec, runs_dir=folder, progress=False, n_resamples=20)
    return folder / "s3" / "judge.json", data


def test_a_frozen_judge_is_scored_on_its_own_split_and_another_seed_is_refused(tuned_on_seed_3):
    path, data = tuned_on_seed_3
    judge = judgetune.load(path)
    own = judge.config.metrics["test"]["mae"]  # its test split: all of seed 3's (no --test-items limit)
    assert judgetune.compare([judge], str(data), n_resamples=20)["rows"][0]["mae"] == pytest.approx(own)
    assert judgetune.evaluate(judge, str(data), n_resamples=20)[0]["mae"] == pytest.approx(own)
    for call in (lambda: judgetune.compare([judge], str(data), seed=0),
                 lambda: judgetune.evaluate(judge, str(data), seed=0)):
        with pytest.raises(JudgetuneError, match="tuned on the split of seed 3"):
            call()
    with pytest.warns(UserWarning, match="not the data the judge was tuned on"):
        judgetune.compare([judge], rows(seed=1), n_resamples=20)


def test_the_cli_compare_refuses_another_seed_than_the_judges(tuned_on_seed_3, run_cli):
    config, data = tuned_on_seed_3
    code, _, err = run_cli(["compare", "--configs", str(config), "--data", str(data), "--seed", "0"])
    assert code == 2 and "tuned on the split of seed 3" in err and "Traceback" not in err
    code, out, _ = run_cli(["compare", "--configs", str(config), "--data", str(data), "--json", "--resamples", "20"])
    mae = json.loads(out)["rows"][0]["mae"]
    assert code == 0 and mae == pytest.approx(json.loads(config.read_text())["metrics"]["test"]["mae"])


# 2. the gate with few dev questions: a valid interval or no test; the warning counts the dev questions


def grouped(n_groups: int, per_group: int = 10, seed: int = 0):
    """Gold labels in ``n_groups`` questions; a default that ranks them with noise, a challenger that ranks them right."""
    rng = np.random.default_rng(seed)
    gold = np.tile(np.arange(per_group, dtype=float), n_groups)
    groups = [f"q{g}" for g in range(n_groups) for _ in range(per_group)]
    default = scored(gold + rng.normal(0, 3, gold.size))
    return gold, groups, default, scored(gold + rng.normal(0, 0.1, gold.size))


def test_with_two_dev_questions_the_gate_makes_no_test():
    gold, groups, default, challenger = grouped(2)
    test = gate("spearman", [default, challenger], gold, groups, [1], 1)
    from judgetune.stats import correlation

    edges = [correlation(challenger.raw[i:i + 10], gold[i:i + 10]) - correlation(default.raw[i:i + 10], gold[i:i + 10])
             for i in (0, 10)]
    assert min(edges) > 0  # an edge on both questions: a percentile bootstrap's lower bound would be above 0
    assert not test["passed"] and "2 questions" in test["refused"] and test["lower_bound"] is None


def test_with_enough_dev_questions_a_clear_edge_passes_and_noise_does_not():
    gold, groups, default, challenger = grouped(8)
    test = gate("spearman", [default, challenger], gold, groups, [1], 1)
    assert test["passed"] and test["refused"] is None and test["method"] == "t over questions"
    assert test["lower_bound"] == pytest.approx(test["interval"][1][0]) and test["lower_bound"] > 0
    # another draw of the same noisy judge: no edge, it passes at most now and then
    passed = [gate("spearman", [default, grouped(8, seed=s)[2]], gold, groups, [1], 1)["passed"] for s in range(20)]
    assert sum(passed) <= 3


def test_the_few_questions_warning_counts_the_questions_the_gate_tests_on(tmp_path, caplog):
    """Both gates test on the confirming items (the demo pool's and dev): the warning counts their questions, not the
    search and dev questions, nor dev's alone."""
    data = tmp_path / "g.jsonl"
    lines = [{"id": f"{g}-{j}", "answer": "word " * (1 + (g + j) % 5), "reference": "word word word", "group": f"g{g}",
              "label": 1 + (g + j) % 5} for g in range(40) for j in range(3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in lines))

    def warned(**options) -> list[str]:
        caplog.clear()
        with caplog.at_level("WARNING", logger="judgetune.tuning"):
            prepare_splits(RunSpec(name="x", judge="rubric", data=str(data), search_items=30, dev_items=6, **options))
        return [r.getMessage() for r in caplog.records if "selection items" in r.getMessage()]

    # every pool item confirms: 2 dev questions, but 16 confirming ones, under either gate; the run says why it
    # scores more than the 6 dev items asked for
    assert not warned(gate="on") and not warned()
    assert any("--dev-items 6: the gate also confirms on 42" in r.getMessage() for r in caplog.records)
    # with the pool bounded out (--gate-items: search and dev alone), the gate tests on 2 questions
    for rule in ("on", "nested"):
        few = warned(gate=rule, gate_items=36)
        assert len(few) == 1 and "the 6 confirming items (pool and dev) from 2" in few[0], few


def test_the_gate_items_say_how_many_labeled_rows_they_leave_out(tmp_path, caplog):
    data = tmp_path / "rows.csv"
    data.write_text("id,answer,reference,label\n" + "".join(f"r{i},a {i},b {i},{i % 6}\n" for i in range(300)))
    with caplog.at_level("WARNING", logger="judgetune.tuning"):
        splits = prepare_splits(RunSpec(name="x", judge="embedding", data=str(data), gate_items=150))
    said = [r.getMessage() for r in caplog.records if "--gate-items" in r.getMessage()]
    assert len(splits.selection) == 150
    assert len(said) == 1 and "scores 150 of the 240 labeled non-test items" in said[0] and "other 90" in said[0]


# 3. grouped Spearman is paired


def test_the_refusal_counts_the_questions_defined_for_both_judges():
    """Three dev questions, one of them constant for the challenger: two differences (one degree of freedom)
    are no test; the gate refuses and says so."""
    gold, groups, default, _ = grouped(3, seed=4)
    raw = default.raw.copy() + np.tile(np.linspace(0, 2, 10), 3)
    raw[:10] = 1.0
    test = gate("spearman", [default, scored(raw)], gold, groups, [1], 1)
    assert not test["passed"] and test["lower_bound"] is None
    assert "3 questions, 2 of them defined for both judges" in test["refused"]


def test_a_question_undefined_for_one_candidate_is_dropped_for_both():
    gold, groups, default, _ = grouped(6, seed=2)
    raw = default.raw.copy() + np.tile(np.linspace(0, 1, 10), 6)  # a different ranking on every question ...
    raw[:10] = 1.0  # ... and constant on the first: its Spearman there is undefined
    challenger = scored(raw)
    test = gate("spearman", [default, challenger], gold, groups, [1], 1)
    from judgetune.stats import correlation

    per = [(correlation(challenger.raw[i:i + 10], gold[i:i + 10]), correlation(default.raw[i:i + 10], gold[i:i + 10]))
           for i in range(10, 60, 10)]
    assert test["advantage"][1] == pytest.approx(np.mean([a - b for a, b in per]))


# 4. the early stop draws questions and measures as the front does


def test_the_early_stop_measures_per_question_raw_spearman_on_grouped_data():
    gold = np.tile(np.arange(6, dtype=float), 6)
    groups = [f"q{g}" for g in range(6) for _ in range(6)]
    raw = gold + np.repeat(np.arange(6) * -10.0, 6)  # right within every question, wrong across them
    pred = np.full(gold.size, 2.5)  # calibrated out of fold: no better than the median
    front = [(1.0, 0.9)]  # per-question Spearman 0.9, MAE 1.0
    assert not clearly_dominated(pred, raw, gold, groups, front, seed=0)  # per question it ranks perfectly
    assert clearly_dominated(pred, raw, gold, None, front, seed=0)  # pooled, the same scores rank badly


# 5. one failure rule for metrics.gain and selection


def test_a_failure_is_charged_the_median_in_gain_as_in_selection():
    examples = [datasets.Example(id=f"e{i}", answer="a", label=float(i % 6)) for i in range(30)]
    gold = np.asarray([e.judgment for e in examples])
    shipped = [float(g) for g in gold]
    shipped[3] = None
    default = [float(g) + (1 if i % 2 else -1) for i, g in enumerate(gold)]
    g = gain(shipped, default, examples, default_shipped=False, fallback=2.5, n_resamples=50)
    assert g["n"] == 30 and g["failed"] == {"shipped": 1, "default": 0}
    a = filled(np.asarray([np.nan if x is None else x for x in shipped]), 2.5)
    assert a[3] == 2.5 and g["mae"]["value"] == pytest.approx(np.abs(a - gold).mean() - 1.0)


# 6. the other objective is guarded; a harmful gain is said; the audit sees the default, calibrated


def test_a_challenger_that_ranks_better_but_errs_more_does_not_ship():
    rng = np.random.default_rng(0)
    gold = rng.integers(0, 6, 80).astype(float)
    default = scored(gold + rng.normal(0, 1.5, 80), np.clip(gold + rng.normal(0, 0.5, 80), 0, 5))
    challenger = scored(gold + rng.normal(0, 0.1, 80), np.clip(gold + 2.5, 0, 5))
    test = gate("spearman", [default, challenger], gold, None, [1], 1)
    assert test["lower_bound"] > 0 and test["guard"]["worse"] and not test["passed"]
    fair = scored(challenger.raw, default.pred)
    assert gate("spearman", [default, fair], gold, None, [1], 1)["passed"]


def test_a_gain_interval_wholly_below_zero_is_a_warning_line():
    g = {"n": 50, "default_shipped": False, "spearman": {"value": -0.2, "low": -0.3, "high": -0.1},
         "mae": {"value": 0.01, "low": -0.05, "high": 0.07}}
    warning = harmful_gain(g)
    assert warning and "Spearman -0.200 [-0.300, -0.100]" in warning and "MAE" not in warning
    assert "\nwarning: the shipped judge is worse than the default" in gain_line({"gain": {**g, "warning": warning}})
    assert harmful_gain({**g, "spearman": {"value": 0.1, "low": -0.1, "high": 0.3}}) is None


def test_audit_max_audits_the_default_and_calibrated_candidates(tmp_path, monkeypatch):
    import optuna

    from judgetune import audit
    from judgetune.testing.planted import GATE_ITEMS, GATE_SPEC, GateLM, planted_examples
    from judgetune.tuning import _run

    audited = []

    def check_bounds(config, examples, lm, bounds, *, seed=0):
        audited.append(config)
        return (["verbosity: too big"] if len(audited) == 1 else []), {}

    monkeypatch.setattr(audit, "check_bounds", check_bounds)
    monkeypatch.setattr(_run, "audit_shipped", lambda *a, **k: {})
    examples = planted_examples(GATE_ITEMS, seed=0)
    data = tmp_path / "p.jsonl"
    datasets.write_examples(data, examples)
    spec = RunSpec(name="a", data=str(data), seed=0, audit_max={"verbosity": 0.5}, **GATE_SPEC)
    config, _, _ = judgetune.tuning.tune(spec, runs_dir=tmp_path, storage=optuna.storages.InMemoryStorage(),
                                         lm=GateLM.for_testbed(examples, "planted", 0), progress=False, n_resamples=50)
    rows = config.metrics["selection"]["rows"]
    assert rows[0]["default"] and rows[0]["flagged"] == "audit: verbosity: too big" and rows[0]["rejected"] is None
    assert len(audited) == len(rows) and all(c.calibrator is not None for c in audited)


def test_the_gain_line_says_what_the_gate_saw():
    rows = [{"number": 0, "search_figure": 0.619, "rejected": None},
            {"number": 1, "search_figure": 0.661, "rejected": None, "advantage_confirming_ci": [-0.102, 0.187]}]
    selection = {"gate": "on", "rule": "spearman", "rows": rows,
                 "gate_result": {"winner": 1, "winner_advantage": 0.041, "items": 40,
                                 "method": "jackknife t over items", "passed": False, "refused": None,
                                 "guard": {"objective": "mae", "worse": False}}}
    line = gate_line(selection)
    assert "trial 1, best on the search items (0.661 vs the default's 0.619)" in line
    assert "+0.041 [-0.102, +0.187]" in line and line.endswith("not above zero; the default shipped")
    g = {"n": 80, "default_shipped": True, **{k: {"value": 0.0, "low": 0.0, "high": 0.0} for k in ("spearman", "mae")}}
    assert gain_line({"gain": g, "selection": selection}).split("\n")[1] == line
    refused = {**selection, "gate_result": {**selection["gate_result"], "refused": "the dev split holds 2 questions"}}
    assert gate_line(refused) == "gate: no test (the dev split holds 2 questions)"
    assert gate_line({**selection, "gate": "off"}) is None


# 7. the label range without the test rows


def test_without_a_scale_the_label_range_is_read_without_the_test_rows(tmp_path):
    lines = [{"id": f"r{i}", "answer": "word " * (1 + i % 4), "reference": "word word", "label": 1 + i % 4}
             for i in range(60)]
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    examples, _ = datasets.load_data(str(path))
    test = {e.id for e in datasets.split_examples(examples, seed=0)["test"]}
    for r in lines:
        r["label"] = 5 if r["id"] in test else r["label"]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    splits = prepare_splits(RunSpec(name="x", judge="rubric", data=str(path), search_items=10))
    assert splits.label_range == (1.0, 4.0) and {e.judgment for e in splits.test} == {5.0}


# 8. pyproject's minimums have what the code calls


def test_pyproject_minimums_have_the_apis_the_code_calls():
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    deps = tomllib.loads(text)["project"]["dependencies"]
    minimum = {m.group(1): tuple(int(x) for x in m.group(2).split(".")) for d in deps
               if (m := re.match(r"([A-Za-z0-9_-]+)>=([0-9.]+)", d))}
    source = "\n".join(p.read_text() for p in (Path(__file__).resolve().parents[1] / "judgetune").rglob("*.py"))
    if "permutation_test(" in source and "rng=" in source:
        assert minimum["scipy"] >= (1, 15)  # permutation_test(rng=) is scipy 1.15's
    if "GroupKFold(" in source and "shuffle=" in source:
        assert minimum["scikit-learn"] >= (1, 6)  # GroupKFold(shuffle=) is scikit-learn 1.6's


# the gate's level: one-sided 5% (the lower end of a 90% t interval), and no more than that on null challengers


def test_the_gate_is_a_one_sided_test_at_five_percent():
    """A paired MAE edge whose t statistic lies between the one-sided 95% and 97.5% quantiles passes: the old
    gate (the lower end of a two-sided 95% interval) kept the default here."""
    from scipy.stats import t as student_t

    rng = np.random.default_rng(0)
    n = 40
    gold = (np.arange(n) % 6).astype(float)
    z = rng.normal(size=n)
    z = (z - z.mean()) / z.std(ddof=1)  # mean 0, sd 1 exactly
    stat = (student_t.ppf(0.95, n - 1) + student_t.ppf(0.975, n - 1)) / 2
    edge = 0.5 + z * 0.5 * np.sqrt(n) / stat  # the default's extra error on each item: mean 0.5, t statistic `stat`
    challenger = scored(gold + 10.0)  # error 10 on every item
    default = scored(gold + 10.0 + edge)  # edge > -10: its error is 10 + edge
    test = gate("mae", [default, challenger], gold, None, [1], 1)
    se = edge.std(ddof=1) / np.sqrt(n)
    assert 0.5 - student_t.ppf(0.975, n - 1) * se < 0  # the lower end of a two-sided 95% interval: below 0
    assert test["passed"] and not test["guard"]["worse"]
    assert test["winner_advantage"] == pytest.approx(0.5)
    assert test["lower_bound"] == pytest.approx(0.5 - student_t.ppf(0.95, n - 1) * se) and test["lower_bound"] > 0
    assert test["alpha"] == 0.05 and test["confidence"] == pytest.approx(0.90)
    rows = [{"number": 0, "search_figure": 0.5},
            {"number": 3, "search_figure": 0.6, "advantage_confirming_ci": [0.01, 0.99]}]
    line = gate_line({"gate": "on", "rule": "mae", "rows": rows, "gate_result": {**test, "winner": 1}})
    assert "(jackknife t over items, 90% interval, one-sided 95% lower bound); it shipped" in line


def test_a_null_challenger_passes_at_most_about_five_percent_of_the_time():
    """Two judges with the same noise, 400 draws of 60 items: the jackknife t gate passes the challenger in at
    most 7.5% of them (5% nominal; 2,000 draws gave 3.6% without shared noise and 4.3% with it)."""
    passed = 0
    for seed in range(400):
        rng = np.random.default_rng(seed)
        gold = rng.integers(0, 6, 60).astype(float)
        base = gold + rng.normal(0, seed % 2, 60)  # half the draws: noise the two judges share
        a, b = (scored(base + rng.normal(0, 1.5, 60)) for _ in range(2))
        passed += gate("spearman", [a, b], gold, None, [1], 1)["passed"]
    assert passed / 400 <= 0.075


def test_pooled_items_of_one_question_are_resampled_together():
    """Pooled data (``--pooled``): each judge reads a question's items with its own slope, so two judges of the same
    quality differ by question. Taking the items as independent, the paired test passes the null challenger in 34
    of 400 draws (8.5%); leaving out one question at a time (the gate's ``clusters``), in 15 (3.75%)."""
    passed = {"questions": 0, "items": 0}
    for seed in range(400):
        rng = np.random.default_rng(seed)
        questions, per = 30, 4
        clusters = [f"q{q}" for q in range(questions) for _ in range(per)]
        gold = rng.integers(0, 6, questions * per).astype(float)
        a, b = (scored(gold * np.repeat(rng.normal(0.5, 0.5, questions), per) + rng.normal(0, 1, questions * per))
                for _ in range(2))
        passed["questions"] += gate("spearman", [a, b], gold, None, [1], 1, clusters)["passed"]
        passed["items"] += gate("spearman", [a, b], gold, None, [1], 1)["passed"]
    assert passed["questions"] / 400 <= 0.075 < passed["items"] / 400
    test = gate("spearman", [a, b], gold, None, [1], 1, clusters)
    assert test["method"] == "delete-one-question jackknife t over questions"
    two = gate("spearman", [a, b], gold, None, [1], 1, ["x"] * 60 + ["y"] * 60)
    assert not two["passed"] and "come from 2 questions" in two["refused"]


def test_a_blocked_advantage_says_how_many_dev_items_would_pass_it_in_80_percent_of_runs():
    """``units_to_pass``: fresh dev samples of that size, with the same advantage and spread per item, pass the
    gate in about 80% of runs (not half of them, as the size where the measured interval just clears 0 would)."""
    rng = np.random.default_rng(5)
    n = 40
    gold = (np.arange(n) % 6).astype(float)
    z = rng.normal(size=n)
    edge = 0.05 + 0.5 * (z - z.mean()) / z.std(ddof=1)  # the default's extra error per item: mean 0.05, sd 0.5
    challenger, default = gold + 10.0, gold + 10.0 + edge
    first = gate("mae", [scored(default), scored(challenger)], gold, None, [1], 1)
    needed = first["units_to_pass"]
    assert not first["passed"] and first["winner_advantage"] > 0 and needed > n
    passes = []
    for seed in range(300):
        draw = np.random.default_rng(100 + seed)
        g = (np.arange(needed) % 6).astype(float)
        extra = 0.05 + 0.5 * draw.normal(size=needed)
        passes.append(gate("mae", [scored(g + 10.0 + extra), scored(g + 10.0)], g, None, [1], 1)["passed"])
    assert 0.72 <= np.mean(passes) <= 0.88, np.mean(passes)
    rows = [{"number": 0, "search_figure": 0.5},
            {"number": 3, "search_figure": 0.6, "advantage_confirming_ci": [-0.1, 0.2]}]
    line = gate_line({"gate": "on", "rule": "mae", "rows": rows, "gate_result": {**first, "winner": 1}})
    assert line.endswith(f"the default shipped (were the advantage and its spread to hold, about "
                         f"{first['units_to_pass']} confirming items would pass it in 80% of runs)")
