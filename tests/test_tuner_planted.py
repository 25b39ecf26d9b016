"""The tuner finds what is there: on a planted testbed (judgetune.testing.planted, a scripted LM
whose label distributions agree with the labels only for one instruction, one demo subset and one
k), it finds that configuration within its trial budget, beats random search at equal LM calls,
and gets within 0.02 Spearman of an exhaustive search with at most 30% of its LM calls.

The gate neither blocks real gains nor passes noise: on the null testbed (every instruction equal up
to noise) the default ships; on the planted one (a truly better instruction) the gate passes and
the test gain's interval excludes 0. The full sweeps (40 and 20 seeded runs) are in
benchmarks/tuning_gain.py; these are small versions."""

from __future__ import annotations

import dataclasses
import itertools
import tempfile
from pathlib import Path

import numpy as np
import optuna
import pytest

from judgetune.datasets import write_examples
from judgetune.judges import pick_demos
from judgetune.stats import REPEATS
from judgetune.testing.planted import (
    DECOYS,
    GATE_INSTRUCTION,
    GATE_SPEC,
    PLANTED_INSTRUCTION,
    PlantedLM,
    gate_testbed,
    planted_examples,
)
from judgetune.tuning import (
    InstructionPool,
    RunSpec,
    default_params,
    gain_line,
    open_study,
    prepare_splits,
    run_trials,
    select,
    select_on_dev,
    total_calls,
    tune,
)

K, DEMO_SEED = 3, 5
FIXED = {"reasoning": False, "scoring": "expected", "scale": "0-5"}

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture
def tmp_path():
    """Study databases in memory-backed storage where there is one (SQLite commits dominate these tests otherwise)."""
    shm = Path("/dev/shm")
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as folder:
        yield Path(folder)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = tmp_path_factory.mktemp("planted") / "planted.jsonl"
    write_examples(path, planted_examples(160))
    return str(path)


def planted_run(data: str, tmp_path, *, name: str, seed: int, sampler: str = "tpe", n_trials: int = 40,
                max_calls: int | None = None, proposals: int = 3, fixed: dict | None = None, demo_draws: int = 8,
                demo_seed: int = DEMO_SEED, instructions: tuple[str, ...] = (), chunk: int = 6, enqueue=(),
                storage: str | None = None):
    """A planted tune, in memory unless ``storage`` (a URL) is given."""
    spec = RunSpec(name=name, judge="rubric", data=data, seed=seed, n_trials=n_trials, sampler=sampler, search_items=30,
                   also=[],
                   chunk=chunk, dev_items=30, test_items=20, max_calls=max_calls, fixed={**FIXED, **(fixed or {})},
                   proposals=proposals, rounds=2, demo_draws=demo_draws, instructions=list(instructions))
    splits = prepare_splits(spec)
    planted = pick_demos(splits.demo_pool, K, seed=demo_seed)
    lm = PlantedLM.for_examples([*splits.train, *splits.dev, *splits.test], planted, K)
    study = open_study(spec, storage or optuna.storages.InMemoryStorage())
    for params in enqueue:
        study.enqueue_trial(params)
    run_trials(study, spec, lm, splits, proposer=lm)
    return spec, splits, lm, study


def best_search_spearman(study) -> float:
    return max(t.values[1] for t in study.best_trials)


@pytest.mark.slow  # a long planted sweep
def test_the_tuner_finds_the_planted_instruction_demos_and_k(data, tmp_path):
    spec, splits, lm, study = planted_run(data, tmp_path, name="find", seed=0)
    pool = InstructionPool(study).candidates()
    planted_id = next(c.id for c in pool if c.text == PLANTED_INSTRUCTION)
    assert next(c for c in pool if c.id == planted_id).source == "reflection"  # written in round 1, from misses
    params, selection = select(study, spec, splits, lm)
    assert params["instruction"] == planted_id and params["k"] == K and params["demo_seed"] == DEMO_SEED
    chosen = next(r for r in selection["rows"] if r["chosen"])
    assert study.trials[chosen["number"]].values[1] == pytest.approx(1.0)
    # perfect with the planted demos (search and dev); a pool item is judged by the candidate built on the pool's other
    # folds, whose demos are other items, which the planted LM does not make perfect
    assert chosen["spearman"] > 0.95 and chosen["spearman"] > selection["rows"][0]["spearman"] + 0.3
    gate_result = selection["gate_result"]
    assert not selection["default_shipped"] and gate_result["passed"] and gate_result["lower_bound"] > 0
    # the old rule (--gate off) re-scores on dev alone and finds it too
    old_params, old = select_on_dev(study, spec, splits, lm)
    assert old_params == params and old["gate"] == "off"


def test_the_default_is_queued_first_and_always_a_candidate(data, tmp_path):
    spec, splits, lm, study = planted_run(data, tmp_path, name="incumbent", seed=0, n_trials=6, proposals=0)
    default = default_params(spec, splits.data_fixed, lm=lm, instructions=InstructionPool(study).texts())
    assert study.trials[0].params == default and study.trials[0].user_attrs["incumbent"] is True
    assert default["instruction"] == 0 and default["k"] == 0  # the rubric's default: generic instruction, no demos
    _, selection = select(study, spec, splits, lm)
    rows = selection["rows"]
    assert rows[0]["default"] and rows[0]["params"] == default and rows[0]["number"] == 0
    assert len({str(r["params"]) for r in rows}) == len(rows)  # no candidate scored twice
    assert selection["items"] == len(splits.search) + len(splits.confirming_pool) + len(splits.dev)
    assert selection["confirming_items"] == selection["items"] - len(splits.search) > len(splits.dev)


def test_proposals_are_cleaned_and_refusals_counted_with_reasons(data, tmp_path):
    _, _, _, study = planted_run(data, tmp_path, name="refusals", seed=0, n_trials=6)
    pool = InstructionPool(study)
    first, second = pool.rounds()
    assert [c.text for c in pool.candidates() if c.round == 0] == ["Rate the answer by how fluent and polite it sounds."]
    assert first["refused_counts"] == {"empty": 1, "too long": 1}
    assert [c.text for c in pool.candidates() if c.round == 1] == [PLANTED_INSTRUCTION]  # quotes and bold stripped
    assert second["refused_counts"] == {"duplicate": 2}
    assert all(r["reason"] for r in first["refused"] + second["refused"])
    assert second["based_on_trial"] is not None and second["lm_calls"] == 3
    # the accepted reflection was queued with the best trial's other settings
    queued = next(t for t in study.trials if t.system_attrs.get("fixed_params", {}).get("instruction") ==
                  pool.candidates()[-1].id)
    best = study.trials[second["based_on_trial"]]
    assert {k: v for k, v in queued.params.items() if k != "instruction"} == \
           {k: v for k, v in best.params.items() if k != "instruction"}


def test_a_resumed_study_keeps_its_pool_and_rounds(data, tmp_path):
    spec, splits, lm, study = planted_run(data, tmp_path, name="resume", seed=1, n_trials=6,
                                          storage=f"sqlite:///{tmp_path / 'resume.db'}")
    before = [c.to_dict() for c in InstructionPool(study).candidates()]
    again = open_study(spec, f"sqlite:///{tmp_path / 'resume.db'}")
    calls = lm.engine.calls
    run_trials(again, spec, lm, splits, proposer=lm)
    assert [c.to_dict() for c in InstructionPool(again).candidates()] == before
    assert lm.engine.calls == calls and len(InstructionPool(again).rounds()) == 2


@pytest.mark.slow  # a long planted sweep
def test_the_tuner_beats_random_search_at_equal_lm_calls(data, tmp_path):
    """Two seeds (seeds 0-5 measured: TPE's best search Spearman 0.98-1.0, random search's 0.70-0.93)."""
    tuned, random_ = [], []
    for seed in range(2):
        _, _, _, study = planted_run(data, tmp_path, name=f"tpe{seed}", seed=seed)
        calls = total_calls(study)
        _, _, _, baseline = planted_run(data, tmp_path, name=f"rnd{seed}", seed=seed, sampler="random",
                                        n_trials=1000, max_calls=calls)
        assert total_calls(baseline) <= calls + 30  # the last trial may overrun the budget by one trial
        tuned.append(best_search_spearman(study))
        random_.append(best_search_spearman(baseline))
    assert np.mean(tuned) > np.mean(random_) + 0.05, (tuned, random_)
    assert all(t >= r for t, r in zip(tuned, random_)), (tuned, random_)


GRID_INSTRUCTIONS = (*DECOYS, PLANTED_INSTRUCTION)  # with the 4 generic ones: 8 instructions


@pytest.mark.slow  # a long planted sweep
def test_sample_efficiency_against_exhaustive_search(data, tmp_path):
    """Grid: 8 instructions x 4 demo draws at k=3 (32 settings), every one scored on all 30 search items."""
    fixed, draws, planted_seed = {"k": K}, 4, 2
    grid = [{"instruction": i, "demo_seed": d} for i, d in itertools.product(range(8), range(draws))]
    for seed in range(3):
        common = dict(seed=seed, fixed=fixed, demo_draws=draws, demo_seed=planted_seed, proposals=0,
                      instructions=GRID_INSTRUCTIONS)
        _, _, lm, full = planted_run(data, tmp_path, name=f"grid{seed}", n_trials=len(grid), chunk=30, enqueue=grid,
                                     sampler="random", **common)
        assert sorted((t.params["instruction"], t.params["demo_seed"]) for t in full.trials) == \
               sorted((g["instruction"], g["demo_seed"]) for g in grid)
        best, calls = best_search_spearman(full), lm.label_calls
        _, _, _, study = planted_run(data, tmp_path, name=f"eff{seed}", n_trials=200, max_calls=int(0.3 * calls),
                                     **common)
        assert total_calls(study) <= 0.3 * calls + 30
        assert best_search_spearman(study) >= best - 0.02, (seed, best_search_spearman(study), best, total_calls(study))


def run_testbed(name: str, seed: int, folder, *, reject=None, **override) -> dict:
    """One seeded run of the gate testbed ``name`` (``TESTBEDS``), its study in memory: judge.json's metrics."""
    spec, lm = gate_testbed(name, seed, folder)
    config, _, _ = tune(RunSpec(**{**spec, **override}), runs_dir=folder, storage=optuna.storages.InMemoryStorage(), lm=lm,
                        progress=False, reject=reject, n_resamples=200)
    return config.metrics


@pytest.mark.parametrize("seed", [0, 1])
def test_on_the_null_testbed_the_default_ships(tmp_path, seed):
    metrics = run_testbed("null", seed, tmp_path, gate="on")
    gain, selection = metrics["gain"], metrics["selection"]
    assert selection["default_shipped"] and gain["default_shipped"] and selection["chosen_trial"] == 0
    assert len(selection["rows"]) >= 2  # a challenger was compared and turned away
    assert gain["spearman"] == {"value": 0.0, "low": 0.0, "high": 0.0} and gain["n"] == metrics["test"]["n"]


def test_on_the_grouped_null_testbed_the_default_ships_after_a_test_over_the_confirming_questions(tmp_path):
    metrics = run_testbed("null-grouped", 1, tmp_path, gate="on")
    selection = metrics["selection"]
    test = selection["gate_result"]
    # the pool's and dev's questions (of 20, 12 answers each): more than dev's 3-5 alone, none of the search's
    assert selection["default_shipped"] and 6 <= test["groups"] <= 16 and test["method"] == "t over questions"
    assert test["items"] == selection["confirming_items"]
    assert test["refused"] is None and (test["winner"] is None or test["lower_bound"] <= 0)


@pytest.mark.parametrize("seed", [0, 1])
def test_on_the_planted_testbed_the_gate_passes_and_the_gain_shows_on_test(tmp_path, seed):
    metrics = run_testbed("planted", seed, tmp_path, gate="on")
    gain, selection = metrics["gain"], metrics["selection"]
    chosen = next(r for r in selection["rows"] if r["chosen"])
    texts = GATE_SPEC["instructions"]
    assert not gain["default_shipped"] and selection["gate_result"]["passed"] and texts[0] == GATE_INSTRUCTION
    assert chosen["params"]["instruction"] == 2  # the criterion, the criterion with the task, then GATE_INSTRUCTION
    assert gain["spearman"]["low"] > 0 and gain["mae"]["high"] < 0  # better ranks, smaller errors, on test
    assert metrics["default_test"]["spearman"] < metrics["test"]["spearman"]
    assert set(gain) >= {"spearman", "mae", "default_shipped", "n", "spearman_raw"} and gain["spearman_raw"]["low"] > 0


@pytest.mark.parametrize("name", ["null", "null-grouped"])
def test_the_nested_gate_ships_the_default_on_the_null_testbeds(tmp_path, name):
    metrics = run_testbed(name, 0, tmp_path, gate="nested")
    selection = metrics["selection"]
    test = selection["gate_result"]
    assert selection["gate"] == "nested" and selection["default_shipped"] and test["refused"] is None
    assert test["items"] == selection["items"]  # every selection item (search, pool, dev) took part
    assert "gate (nested)" in gain_line(metrics)
    if test.get("stopped"):  # the losers stopped being judged early: the judgments saved are counted
        assert selection["racing"]["saved"] > 0 and selection["racing"]["stopped"] == test["stopped"]
        return
    assert test["method"].startswith("nested 5-fold") and test["units"] == len(test["fold_choices"]) == 5 * REPEATS


def test_the_nested_gate_ships_the_planted_instruction(tmp_path):
    metrics = run_testbed("planted", 0, tmp_path, gate="nested")
    selection, gain = metrics["selection"], metrics["gain"]
    chosen = next(r for r in selection["rows"] if r["chosen"])
    assert selection["gate_result"]["passed"] and selection["gate_result"]["lower_bound"] > 0
    assert chosen["params"]["instruction"] == 2 and not gain["default_shipped"] and gain["spearman"]["low"] > 0
    assert "; it shipped" in gain_line(metrics)


def test_pooled_figures_rank_groups_of_one_label_value(tmp_path):
    """The planted testbed with its items grouped into clusters of one label value each (as a document's claims
    share a label): within a question nothing ranks, so the per-question run has nothing to choose by and ships
    the default; with ``pooled`` the search and the gate rank all items together and the planted instruction ships,
    its gain shown on test. The groups still keep each cluster in one split."""
    from judgetune.datasets import read_examples

    kwargs, lm = gate_testbed("planted", 0, tmp_path)
    examples = read_examples(kwargs["data"])
    write_examples(kwargs["data"], [dataclasses.replace(e, group=f"c{int(e.label)}-{i % 4}")
                                    for i, e in enumerate(examples)])
    runs = {}
    for pooled in (False, True):
        config, run_dir, _ = tune(RunSpec(**{**kwargs, "name": f"pooled{pooled}", "pooled": pooled}), runs_dir=tmp_path,
                                  storage=optuna.storages.InMemoryStorage(), lm=lm, progress=False, n_resamples=200)
        runs[pooled] = config.metrics
    per_question, pooled = runs[False], runs[True]
    assert per_question["selection"]["default_shipped"] and "pooled" not in per_question["study"]
    chosen = next(r for r in pooled["selection"]["rows"] if r["chosen"])
    assert pooled["study"]["pooled"] and pooled["selection"]["gate_result"]["passed"]
    assert chosen["params"]["instruction"] == 2 and pooled["gain"]["spearman"]["low"] > 0
    test_groups = {e.group for e in read_examples(tmp_path / "pooledTrue" / "test.jsonl")}
    selection_groups = {e.group for e in prepare_splits(RunSpec(**{**kwargs, "pooled": True})).selection}
    assert test_groups and selection_groups and not test_groups & selection_groups


def _selection_harness(tmp_path, pick: str):
    """A planted testbed's search, in memory: the spec, splits, LM and study that ``select`` reads."""
    kwargs, lm = gate_testbed("planted", 0, tmp_path)
    spec = RunSpec(**{**kwargs, "pick": pick})
    splits = prepare_splits(spec)
    study = open_study(spec, optuna.storages.InMemoryStorage())
    run_trials(study, spec, lm, splits)
    return spec, splits, lm, study


def test_the_dev_labels_take_no_part_in_the_gates_mae_predictions(tmp_path, monkeypatch):
    """With --gate on and --pick mae the confirming items' calibrated predictions come from a calibrator fitted (form
    and all) on the search items: relabelling dev changes the labels the gate tests against, never the predictions."""
    from dataclasses import replace

    import judgetune.tuning._selection as selection

    spec, splits, lm, study = _selection_harness(tmp_path, "mae")
    spec = replace(spec, gate="on")
    seen = []
    real_gate = selection.gate
    monkeypatch.setattr(selection, "gate", lambda rule, on_dev, *a, **k: (
        seen.append([c.pred.copy() for c in on_dev]), real_gate(rule, on_dev, *a, **k))[1])
    select(study, spec, splits, lm)
    flipped = [replace(e, label=5 - e.label) for e in splits.dev]
    select(study, spec, replace(splits, dev=flipped), lm)
    assert len(seen) == 2 and all(np.array_equal(a, b) for a, b in zip(*seen))


def test_rejection_reads_the_search_items_alone(tmp_path):
    """A user's ``reject=`` (and the failure-rate rule) sees a candidate's search figures, never its dev ones."""
    spec, splits, lm, study = _selection_harness(tmp_path, "spearman")
    rows = []
    select(study, spec, splits, lm, reject=lambda row: rows.append(row))
    assert rows and all(set(r) == {"number", "default", "params", "search", "search_figure", "failure_rate"}
                        for r in rows)


def test_a_rejected_candidate_never_ships(tmp_path):
    reasons = []

    def no_gate_instruction(row):
        reason = "planted instruction refused" if row["params"].get("instruction") == 2 else None
        reasons.append(reason)
        return reason

    metrics = run_testbed("planted", 0, tmp_path, reject=no_gate_instruction)
    selection = metrics["selection"]
    assert "planted instruction refused" in reasons
    assert all(r["params"].get("instruction") != 2 or r["rejected"] for r in selection["rows"])
    assert selection["default_shipped"] or next(r for r in selection["rows"] if r["chosen"])["params"]["instruction"] != 2


@pytest.mark.parametrize("fixed", [{}, {"k": 2}, {"demo_seed": 1}])
def test_the_incumbent_is_every_searched_knob_at_its_declared_default(fixed):
    from judgetune.judges import judge_class, registered_kinds

    for kind in registered_kinds():
        spec = RunSpec(name="d", judge=kind, data="d.jsonl", fixed=fixed)
        declared = judge_class(kind).space_for(fixed)
        space = {p.name: p for p in declared if p.searched and p.name not in fixed}
        for instructions in ((), ("mine", "theirs")):
            params = default_params(spec, instructions=instructions)
            expected = {name: p.default for name, p in space.items()}
            if instructions and "instruction" in expected:
                expected["instruction"] = 0  # neither text is the kind's default: the pool's first
            if any(p.name == "k" for p in declared) and {**expected, **fixed}.get("k") and "demo_seed" not in fixed:
                expected["demo_seed"] = 0
            assert params == expected, kind


def test_a_trial_line_says_its_failed_judgments_and_never_shows_stand_in_figures_as_measured():
    import io

    from judgetune.tuning._study import TrialProgress

    study = optuna.create_study(directions=["minimize", "maximize"])
    attrs = [{"parse_failure_rate": 1.0, "note": "too many parse failures"}, {"parse_failure_rate": 0.25}, {}]
    for values, user_attrs in zip([(4.0, -1.0), (0.8, 0.41), (0.7, 0.52)], attrs):
        study.add_trial(optuna.trial.create_trial(values=list(values), user_attrs=user_attrs))
    stream = io.StringIO()
    progress = TrialProgress(3, stream=stream)
    for trial in study.trials:
        progress(study, trial)
    assert stream.getvalue().splitlines() == [
        "trial 0: 100% of its judgments failed, scored as the worst (MAE 4.000, Spearman -1.000) (3/3 finished)",
        "trial 1: MAE 0.800, Spearman +0.410, 25% of its judgments failed (3/3 finished)",
        "trial 2: MAE 0.700, Spearman +0.520 (3/3 finished)"]
