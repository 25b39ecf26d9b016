"""Judge audits: the statistics, the planted-bias testbed (each planted effect recovered, none in the
unbiased twin), bounds, and one small audit on the embedded model."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats as sps

from judgetune import audit
from judgetune.errors import JudgetuneError
from judgetune.testing.biased import PLANTED, audit_testbeds, unbiased_twin

WORDS = {"verbosity": len(audit.PADDING.split()), "distraction": len(audit.DISTRACTION.split())}


@pytest.fixture(scope="module")
def planted():
    return [(bed, audit.audit(bed.config, bed.examples, bed.lm)) for bed in audit_testbeds(PLANTED, n=60)]


@pytest.fixture(scope="module")
def twin():
    return [(bed, audit.audit(bed.config, bed.examples, bed.lm)) for bed in audit_testbeds(unbiased_twin(), n=60)]


def test_every_planted_effect_is_recovered_within_its_interval(planted):
    checked = set()
    for bed, result in planted:
        for row in result["probes"]:
            expected = PLANTED.planted(row["probe"], pairwise=bed.pairwise, words=WORDS.get(row["probe"], 0))
            assert row["low"] <= expected <= row["high"], (bed.name, row)
            if expected != 0:
                assert row["q"] < 0.05 and row["reading"] == "effect found", (bed.name, row)
                checked.add((bed.name, row["probe"]))
    assert checked == {("rubric", "verbosity"), ("rubric", "distraction"), ("pairwise", "position"),
                       ("pairwise", "verbosity"), ("pairwise", "distraction")}


def test_the_unbiased_twin_shows_no_effect(twin):
    for bed, result in twin:
        assert result["probes"], bed.name
        for row in result["probes"]:
            assert row["q"] > 0.05 and row["low"] <= 0 <= row["high"], (bed.name, row)
            assert row["reading"] in ("no effect found", "too few items to tell")


def test_position_extras_show_the_planted_first_position_preference(planted, twin):
    biased = next(r for bed, res in planted if bed.pairwise for r in res["probes"] if r["probe"] == "position")
    fair = next(r for bed, res in twin if bed.pairwise for r in res["probes"] if r["probe"] == "position")
    assert biased["first_preferred"] > 0.9 and biased["flip_rate"] > 0.5
    assert 0.3 < fair["first_preferred"] < 0.7 and fair["flip_rate"] < biased["flip_rate"]


def test_probes_that_do_not_apply_say_why(planted):
    rubric = dict((r["probe"], r["why"]) for r in planted[0][1]["not_applicable"])
    assert set(rubric) == {"position", "rewrite"} and "pairwise" in rubric["position"]
    every = {r["probe"] for r in planted[0][1]["probes"]} | set(rubric)
    assert every == set(audit.PROBES)


def test_rows_carry_the_issue_fields(planted):
    for _, result in planted:
        for row in result["probes"]:
            assert {"probe", "effect", "low", "high", "p", "q", "mde", "n"} <= set(row)
            assert row["low"] <= row["effect"] <= row["high"] and 0 <= row["p"] <= 1 and row["p"] <= row["q"] <= 1


def test_paired_effect_statistics():
    rng = np.random.default_rng(0)
    shifted = rng.normal(0.5, 1.0, 80)
    effect = audit.paired_effect(shifted, [i // 4 for i in range(80)])
    assert effect.n == 80 and effect.clusters == 20 and effect.effect == pytest.approx(shifted.mean())
    assert effect.low < effect.effect < effect.high and effect.p < 0.05
    values = shifted.reshape(20, 4).mean(axis=1)  # equal clusters: cluster values are the cluster means
    expected_mde = (sps.norm.ppf(0.975) + sps.norm.ppf(0.8)) * values.std(ddof=1) / math.sqrt(20)
    assert effect.mde == pytest.approx(expected_mde)
    still = audit.paired_effect(np.zeros(10))
    assert (still.effect, still.low, still.high, still.p, still.mde) == (0.0, 0.0, 0.0, 1.0, 0.0)
    noise = audit.paired_effect(rng.normal(0, 1, 60), seed=1)
    assert noise.p > 0.05 and noise.low < 0 < noise.high
    with pytest.raises(ValueError, match="no paired differences"):
        audit.paired_effect([])


def test_benjamini_hochberg_by_hand():
    # sorted p: 0.01, 0.02, 0.03, 0.5 -> p*m/rank: 0.04, 0.04, 0.04, 0.5 (monotone from the top)
    assert audit.benjamini_hochberg([0.03, 0.5, 0.01, 0.02]) == pytest.approx([0.04, 0.5, 0.04, 0.04])
    assert audit.benjamini_hochberg([]) == []


def test_minimum_detectable_effect_shrinks_with_n():
    assert audit.minimum_detectable_effect(1.0, 100) == pytest.approx(0.28016, abs=1e-4)
    assert audit.minimum_detectable_effect(1.0, 400) < audit.minimum_detectable_effect(1.0, 100)
    assert audit.minimum_detectable_effect(1.0, 1) is None
    # the sign-flip test's smallest p is 2 / 2^k: at 5 clusters 0.0625, so nothing is ever detected there
    assert audit.minimum_detectable_effect(1.0, 5) is None and audit.minimum_detectable_effect(0.0, 6) == 0.0


def test_a_large_effect_on_too_few_items_reads_too_few_not_no_effect():
    """Every item moved by +4 on 3 or 5 items: p cannot pass 0.05, so the reading is 'too few items to tell'."""
    for n in (3, 5):
        effect = audit.paired_effect(np.full(n, 4.0))
        assert effect.p > 0.05 and effect.mde is None
        row = {"q": effect.p, "mde": effect.mde}
        assert audit.reading(row, 0.4) == "too few items to tell"
    assert audit.paired_effect(np.zeros(3)).mde is None  # no move on 3 items: not proof of no effect either


def test_bounds_reject_only_significant_excess(planted):
    assert audit.parse_bounds(["verbosity=0.3", "position=0.1"]) == {"verbosity": 0.3, "position": 0.1}
    for bad, message in (("verbosity", "PROBE=VALUE"), ("length=1", "PROBE=VALUE"), ("verbosity=x", "a number"),
                         ("verbosity=-1", ">= 0")):
        with pytest.raises(JudgetuneError, match=message):
            audit.parse_bounds([bad])
    with pytest.raises(JudgetuneError, match="twice"):
        audit.parse_bounds(["verbosity=1", "verbosity=2"])
    rubric = planted[0][1]  # verbosity about +1.0 on the 0-5 scale
    assert [line.split(":")[0] for line in audit.beyond_bounds(rubric, {"verbosity": 0.5})] == ["verbosity"]
    assert audit.beyond_bounds(rubric, {"verbosity": 1.5, "stability": 0.5}) == []
    verbosity = next(r for r in rubric["probes"] if r["probe"] == "verbosity")
    inside = (verbosity["low"] + verbosity["high"]) / 2  # the estimate is over this bound, the interval is not
    assert audit.beyond_bounds(rubric, {"verbosity": inside}) == []


def test_unknown_probe_and_empty_data_are_refused(planted):
    bed = planted[0][0]
    with pytest.raises(JudgetuneError, match="unknown audit probe"):
        audit.audit(bed.config, bed.examples, bed.lm, probes=["length"])
    with pytest.raises(JudgetuneError, match="no items"):
        audit.audit(bed.config, [], bed.lm)


def test_format_audit_lists_every_probe(planted):
    text = audit.format_audit(planted[1][1])
    for name in audit.PROBES:
        assert name in text


def _length_judge(tmp_path):
    """A frozen judge without an LM (the answer's log word count): padding must raise its score."""
    from judgetune.config import JudgeConfig
    from judgetune.testing.biased import biased_examples

    config = JudgeConfig(judge="length", params={}, lm=None, instruction=None, demos=[], calibrator=None,
                         label_range=[0.0, 5.0])
    path = config.save(tmp_path / "judge.json")
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(e.to_dict()) + "\n" for e in biased_examples(30)), encoding="utf-8")
    return path, data


def test_cli_audit_of_a_frozen_judge(tmp_path, capsys):
    from judgetune import cli

    config, data = _length_judge(tmp_path)
    assert cli.main(["audit", "--config", str(config), "--data", str(data), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    rows = {r["probe"]: r for r in result["probes"]}
    words = [len(e["answer"].split()) for e in map(json.loads, data.read_text().splitlines())]
    expected = np.mean([0.5 * (math.log1p(w + WORDS["verbosity"]) - math.log1p(w)) for w in words])
    assert rows["verbosity"]["effect"] == pytest.approx(expected) and rows["verbosity"]["q"] < 0.05
    assert rows["stability"]["effect"] == 0.0  # the length judge never reads the references
    assert cli.main(["audit", "--config", str(config), "--data", str(data), "--probe", "verbosity"]) == 0
    text = capsys.readouterr().out
    assert "verbosity" in text and "effect found" in text and "distraction" not in text


def test_cli_audit_errors(tmp_path, capsys):
    from judgetune import cli

    config, data = _length_judge(tmp_path)
    assert cli.main(["audit", "--config", str(tmp_path / "none.json"), "--data", str(data)]) == 2
    assert "no such judge config" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        cli.main(["audit", "--config", str(config), "--data", str(data), "--probe", "length"])
    assert stop.value.code == 2
    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"id": "a", "answer": "   x"}\n', encoding="utf-8")
    assert cli.main(["audit", "--config", str(config), "--data", str(empty), "--split", "test"]) == 2
    assert "no items to audit" in capsys.readouterr().err
    assert cli.main(["tune", "--judge", "rubric", "--data", str(data), "--audit-max", "length=1",
                     "--runs-dir", str(tmp_path / "runs")]) == 2
    assert "--audit-max length=1: expected PROBE=VALUE" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # nothing was run


def test_cli_audit_refuses_other_scales_and_runs_each_probe_once(tmp_path, capsys):
    """Labels off the judge's scale (another task's data) are refused as compare refuses them; a probe named twice
    runs once; probes that all do not apply to the judge are an error, not an empty table with exit 0."""
    from judgetune import cli

    config, data = _length_judge(tmp_path)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    other = tmp_path / "other.jsonl"
    other.write_text("".join(json.dumps({**row, "label": 50.0}) + "\n" for row in rows), encoding="utf-8")
    assert cli.main(["audit", "--config", str(config), "--data", str(other), "--split", "all"]) == 2
    assert f"labels lie outside the scale 0-5 of {config}" in capsys.readouterr().err
    assert cli.main(["audit", "--config", str(config), "--data", str(data), "--probe", "verbosity", "--probe",
                     "verbosity", "--json"]) == 0
    assert [r["probe"] for r in json.loads(capsys.readouterr().out)["probes"]] == ["verbosity"]
    assert cli.main(["audit", "--config", str(config), "--data", str(data), "--probe", "position"]) == 2
    assert "no probe ran on the length judge" in capsys.readouterr().err


def test_cli_audit_whose_every_changed_judgment_failed_exits_3(tmp_path, capsys, monkeypatch):
    """Fault injection: every judgment of the changed items failed. The judge failed, not the request: exit 3."""
    from judgetune import cli
    from judgetune.audit import _probes

    config, data = _length_judge(tmp_path)
    monkeypatch.setitem(_probes.PROBES, "verbosity", lambda scorer: _probes.Paired([], [], failed=7))
    assert cli.main(["audit", "--config", str(config), "--data", str(data), "--probe", "verbosity"]) == 3
    assert "verbosity: every one of 7 judgments failed on a side" in capsys.readouterr().err


def test_report_shows_the_audit_table(planted):
    from judgetune.report import audit_section

    result = planted[0][1]
    page = audit_section(result)
    assert "<h2>Audit</h2>" in page and "minimum detectable effect" in page
    for row in result["probes"]:
        assert f"[{row['low']:+.3f}, {row['high']:+.3f}]" in page and f"{row['mde']:.3f}" in page
    assert "position" in page and audit_section(None) == ""
    assert "could not run: every item failed" in audit_section({"error": "every item failed"})


def test_check_bounds_rejects_the_biased_judge_and_keeps_its_twin():
    biased, fair = audit_testbeds(PLANTED, n=30)[0], audit_testbeds(unbiased_twin(), n=30)[0]
    reasons, result = audit.check_bounds(biased.config, biased.examples, biased.lm, {"verbosity": 0.5})
    assert [r["probe"] for r in result["probes"]] == ["verbosity"] and reasons[0].startswith("verbosity:")
    assert audit.check_bounds(fair.config, fair.examples, fair.lm, {"verbosity": 0.5})[0] == []


@pytest.mark.model
@pytest.mark.slow
def test_audit_on_the_embedded_model_pairwise_swap_cancels_position(embedded_lm, data_root):
    """A real judge: the pairwise judge with its swap on is order-blind by construction (each order's
    two questions are the other's, swapped), so its position effect is exactly 0; one order alone is not."""
    from judgetune import datasets
    from judgetune.config import JudgeConfig
    from judgetune.judges import make_judge

    scale = datasets.CATALOG["llmbar-natural"].scale
    items, label_range = datasets.load("llmbar-natural", root=data_root)[:3], (scale.low, scale.high)
    judge = make_judge("pairwise", embedded_lm, train=[], label_range=label_range,
                       params={"mode": "answers", "swap": True})
    config = JudgeConfig.from_judge(judge, lm={"spec": "local:smollm2"}, calibrator=None, label_range=label_range)
    result = audit.audit(config, items, embedded_lm, probes=["position", "verbosity"], n_resamples=200)
    rows = {r["probe"]: r for r in result["probes"]}
    position = rows["position"]
    assert position["n"] + position["failed"] == 3 and position["effect"] == pytest.approx(0.0, abs=1e-9)
    assert position["flip_rate"] == 0.0 and position["first_preferred"] <= 0.5  # 0.5 unless a pair ties exactly
    assert {"effect", "low", "high", "flip_rate", "first_preferred"} <= set(position["one_order"])
    assert rows["verbosity"]["n"] + rows["verbosity"]["failed"] == 3
    assert all(math.isfinite(rows["verbosity"][k]) for k in ("effect", "low", "high", "p", "q"))


def test_tune_audits_the_shipped_judge_and_audit_max_turns_biased_candidates_away(tmp_path):
    import optuna

    from judgetune.datasets import write_examples
    from judgetune.testing.biased import BiasedLM, biased_examples
    from judgetune.tuning import RunSpec, tune

    data = tmp_path / "biased.jsonl"
    write_examples(data, biased_examples(150))
    spec = RunSpec(name="biased", judge="rubric", data=str(data), n_trials=4, search_items=40, sampler="random",
                   audit_max={"verbosity": 0.2}, also=[])  # the trials of the rubric judge only
    config, run_dir, _ = tune(spec, runs_dir=tmp_path, storage=optuna.storages.InMemoryStorage(), lm=BiasedLM(PLANTED),
                              progress=False, n_resamples=200)
    rows = config.metrics["selection"]["rows"]
    challengers = [r for r in rows if not r["default"]]
    assert challengers and all(r["rejected"].startswith("audit: verbosity") for r in challengers)
    assert config.metrics["selection"]["chosen_trial"] == rows[0]["number"]  # only the default was left
    shipped = {r["probe"]: r for r in config.metrics["audit"]["probes"]}
    assert shipped["verbosity"]["q"] < 0.05 and shipped["verbosity"]["relevant"] == 0.2
    assert json.loads((run_dir / "judge.json").read_text())["metrics"]["audit"]["probes"]


def test_an_audit_of_the_shipped_judge_that_cannot_run_is_recorded_and_the_run_still_ships(tmp_path, monkeypatch,
                                                                                              caplog):
    """Fault injection: the audit raises a user-facing error (every test item failed, say); judge.json is
    written anyway, ``metrics.audit`` says why, and one warning names the run."""
    import optuna

    from judgetune.datasets import write_examples
    from judgetune.testing.biased import BiasedLM, biased_examples
    from judgetune.tuning import RunSpec, tune

    def cannot_run(*args, **kwargs):
        raise JudgetuneError("every item failed")

    monkeypatch.setattr(audit, "audit", cannot_run)
    data = tmp_path / "biased.jsonl"
    write_examples(data, biased_examples(150))
    spec = RunSpec(name="unaudited", judge="rubric", data=str(data), n_trials=2, search_items=40, sampler="random",
                   also=[])
    with caplog.at_level("WARNING", logger="judgetune"):
        config, run_dir, _ = tune(spec, runs_dir=tmp_path, storage=optuna.storages.InMemoryStorage(),
                                  lm=BiasedLM(PLANTED), progress=False, n_resamples=50)
    assert config.metrics["audit"] == {"error": "every item failed"}
    assert json.loads((run_dir / "judge.json").read_text())["metrics"]["audit"] == {"error": "every item failed"}
    assert any("unaudited: the audit of the shipped judge could not run: every item failed" in r.getMessage()
               for r in caplog.records)
