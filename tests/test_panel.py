"""The panel judge: members standardized by their own centre and spread and averaged, frozen as
plain JSON with its members, checked as untrusted input; and ``tune --panel``, where the panel of the
scored candidates enters the selection as one more candidate and freezes to the judge it was figured as."""

from __future__ import annotations

import json

import numpy as np
import pytest

from judgetune import datasets, stats
from judgetune.config import ConfigError, JudgeConfig
from judgetune.datasets import Example
from judgetune.judges import BuildContext, JudgeSpec, build, build_judge, member_record


@pytest.fixture(scope="module")
def pairs(data_root) -> list[Example]:
    return [e for e in datasets.load("sts2012-msrpar", root=data_root) if e.judgment is not None][:24]


def _lexical_panel(pairs: list[Example]):
    members = [build_judge("rouge1"), build_judge("bleu")]
    raw = [np.asarray([v.score for v in m.judge_all(pairs)]) for m in members]
    fitted = {"members": [member_record(m, r.mean(), r.std()) for m, r in zip(members, raw)], "label_range": [0.0, 5.0]}
    return build(JudgeSpec("panel", {}, fitted=fitted)), raw


def test_a_panel_scores_the_mean_of_its_members_standardized_scores_and_each_item_alone(pairs):
    panel, raw = _lexical_panel(pairs)
    z = np.mean([(r - r.mean()) / r.std() for r in raw], axis=0)
    batch = panel.judge_all(pairs)
    assert np.allclose([v.score for v in batch], z)
    assert [panel.judge_all([e])[0].score for e in pairs[:6]] == [v.score for v in batch[:6]]
    low, high = panel.score_range
    assert all(low <= v.score <= high for v in batch)
    config = JudgeConfig.from_judge(panel, lm=None, calibrator=None, label_range=(0, 5))
    reloaded = JudgeConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert reloaded.judge == "panel" and not reloaded.needs_lm() and reloaded.lm is None
    assert [v.score for v in reloaded.build_judge().judge_all(pairs)] == [v.score for v in batch]


def test_standardizers_keep_judges_with_spread_and_the_panel_mean_skips_failures():
    raw = np.array([[1.0, 2.0, 3.0, 4.0, np.nan, 10.0],
                    [5.0, 5.0, 5.0, 5.0, 5.0, 5.0],         # no spread: left out
                    [0.0, np.nan, np.nan, np.nan, 1.0, 2.0],  # two scored reference items: left out
                    [4.0, 3.0, 2.0, 1.0, 0.0, np.nan]])
    kept, centers, scales = stats.standardizers(raw, slice(0, 4))
    assert kept == [0, 3] and centers == [2.5, 2.5] and np.allclose(scales, np.std([1, 2, 3, 4]))
    mean, z = stats.panel_mean(raw[kept], centers, scales)
    assert np.allclose(mean[:4], 0.0)  # the two judges disagree exactly
    assert mean[4] == pytest.approx(z[1, 4]) and mean[5] == pytest.approx(z[0, 5])  # each from the one that scored
    assert np.isnan(stats.panel_mean(np.array([[np.nan], [np.nan]]), [0.0, 0.0], [1.0, 1.0])[0][0])


def test_a_member_that_fails_on_an_item_is_named_and_the_others_score_it(pairs):
    """An item without a reference: ROUGE cannot score it, the length signal can; the panel scores it from the
    length member alone and names the member it lacks. With no member left, the item fails (never a zero)."""
    lexical, length = build_judge("rouge1"), build_judge("length")
    fitted = {"members": [member_record(lexical, 0.4, 0.2), member_record(length, 2.0, 0.5)], "label_range": [0, 5]}
    panel = build(JudgeSpec("panel", {}, fitted=fitted))
    alone = Example(id="no-reference", answer="a sentence with no reference to compare against", label=3.0)
    verdict = panel.judge_all([alone])[0]
    expected = (length.judge_all([alone])[0].score - 2.0) / 0.5
    assert verdict.score == pytest.approx(expected)
    assert verdict.degraded and verdict.degraded[0].startswith("member 0 (rouge1)")
    both_lexical = build(JudgeSpec("panel", {}, fitted={**fitted, "members": [fitted["members"][0]] * 2}))
    failed = both_lexical.judge_all([alone])[0]
    assert not failed.parsed and failed.raw.startswith("every member failed")


def test_a_malformed_panel_in_judge_json_is_refused_field_by_field(pairs):
    panel, _ = _lexical_panel(pairs)
    data = JudgeConfig.from_judge(panel, lm=None, calibrator=None, label_range=(0, 5)).to_dict()
    data["fitted"]["members"][0]["judge"] = "panel"
    data["fitted"]["members"][1]["scale"] = 0.0
    data["fitted"]["members"][1]["extra"] = 1
    with pytest.raises(ConfigError) as err:
        JudgeConfig.from_dict(data, where="judge.json")
    lines = str(err.value).splitlines()
    assert all(line.startswith("judge.json: fitted: members[") for line in lines), lines
    assert any("members[0].judge: a panel's member may not be a panel" in line for line in lines)
    assert any("members[1].extra: unknown field" in line for line in lines)
    data["fitted"]["members"] = data["fitted"]["members"][:1]
    with pytest.raises(ConfigError, match="members: expected a list of 2 to"):
        JudgeConfig.from_dict(data)


def test_an_lm_member_makes_the_panel_need_the_lm(pairs):
    fitted = {"members": [member_record(build_judge("rouge1"), 0.5, 0.2), {
        "judge": "likelihood", "params": {"instruction": "respond", "k": 0}, "instruction": None, "demos": [],
        "fitted": None, "seed": 0, "center": -2.0, "scale": 1.0}], "label_range": [0.0, 5.0]}
    config = JudgeConfig(judge="panel", params={}, lm=None, instruction=None, demos=[], calibrator=None,
                         label_range=[0.0, 5.0], fitted=fitted)
    assert config.needs_lm()
    with pytest.raises(ConfigError, match="lm: expected an object with the LM spec"):
        JudgeConfig.from_dict(config.to_dict())
    with pytest.raises(ValueError, match="needs an LM"):
        build(JudgeSpec("panel", {}, fitted=fitted), BuildContext())


@pytest.mark.slow
def test_a_panel_candidate_enters_selection_and_freezes_to_the_judge_it_was_figured_as(tmp_path, embedded_lm):
    """``RunSpec(panel=True)``: the selection holds one more row, the panel of the scored candidates, figured from
    their saved scores; frozen, it is a ``panel`` judge.json naming the LM, and on the selection items it ranks
    exactly as its row says, each item scored alone as in a batch."""
    from judgetune.tuning import RunSpec, freeze, gate_line, prepare_splits, tune
    from judgetune.tuning._selection import spearman_figure

    # 20 confirming items: the fewest --gate on tests on (a gate that cannot test judges nothing past the search rows,
    # and no panel is figured)
    sizes = {"search_items": 12, "dev_items": 20, "test_items": 6, "gate_items": 32, "sampler": "random"}
    spec = RunSpec(name="panel", judge="likelihood", data="sts2012-msrpar", n_trials=3, fixed={"k": 0}, panel=True,
                   gate="on", **sizes)
    config, _, study = tune(spec, runs_dir=tmp_path / "runs", lm=embedded_lm, progress=False, n_resamples=50)
    rows = config.metrics["selection"]["rows"]
    panels = [r for r in rows if r.get("panel")]
    assert len(panels) == 1 and panels[0]["number"] is None and len(panels[0]["params"]["panel"]["members"]) >= 2
    assert gate_line(config.metrics["selection"])
    splits = prepare_splits(spec)
    from judgetune.tuning import InstructionPool

    frozen, _ = freeze(panels[0]["params"], spec, splits, embedded_lm, InstructionPool(study).texts(), progress=False)
    path = frozen.save(tmp_path / "panel.json")
    reloaded = JudgeConfig.load(path)
    assert reloaded.judge == "panel" and reloaded.lm["spec"] == "local:smollm2"
    judge = reloaded.build_judge(embedded_lm)
    verdicts = judge.judge_all(splits.selection)
    raw = np.asarray([v.score if v.parsed else np.nan for v in verdicts])
    gold = np.asarray([e.judgment for e in splits.selection])
    assert spearman_figure(raw, gold, None) == pytest.approx(panels[0]["spearman"], abs=1e-9)
    assert judge.judge_all([splits.selection[3]])[0].score == pytest.approx(verdicts[3].score, abs=1e-12)
    with pytest.raises(ValueError, match="panel: a panel's members score each item alone"):
        RunSpec(name="x", judge="linkage", data="linkage-antique", panel=True, protocol="linkage")


def _noisy_candidates(seed: int, n: int = 300, members: int = 4, noise: float = 2.0):
    """Candidates that each see the labels through their own noise: their panel ranks better than any one."""
    rng = np.random.default_rng(seed)
    gold = rng.normal(size=n)
    scores = np.stack([gold + rng.normal(scale=noise, size=n) for _ in range(members)])
    panel = np.mean([(r - r.mean()) / r.std() for r in scores], axis=0)
    return np.vstack([scores, panel]), gold


def test_the_panel_gate_ships_the_passing_test_with_the_larger_gain_each_at_half_the_level():
    from judgetune.stats import nested_gate, panel_gate

    scores, gold = _noisy_candidates(0)
    result = panel_gate(scores, gold, panel=4)
    assert result["shipped"] == 4 and result["panel"]["passed"] and result["panel"]["alpha"] == 0.025
    assert result["panel"]["lower"] > 0 and result["mean"] == result["panel"]["advantage"]
    weak = scores.copy()
    weak[4] = np.random.default_rng(1).normal(size=len(gold))  # a panel that knows nothing
    result = panel_gate(weak, gold, panel=4, allowed=[0, 1, 2], seed=3)
    alone = nested_gate(weak, gold, allowed=[0, 1, 2], alpha=0.025, seed=3)
    assert not result["panel"]["passed"] and result["shipped"] == alone["shipped"] and result["lower"] == alone["lower"]
    strong = scores.copy()
    strong[2] = gold + np.random.default_rng(2).normal(scale=0.2, size=len(gold))  # one prompt far better than all
    result = panel_gate(strong, gold, panel=4, seed=3)
    assert result["panel"]["passed"] and result["nested"]["passed"] and result["shipped"] == 2
    assert result["mean"] > result["panel"]["advantage"]


def test_a_selection_with_a_panel_tests_it_beside_the_nested_gate_and_says_so():
    from judgetune.tuning import gate_line
    from judgetune.tuning._selection import CandidateFigures, SelectionItems, nested_test

    scores, gold = _noisy_candidates(2)
    rows = [{"number": i, "default": i == 0, "params": {}} for i in range(4)]
    rows.append({"number": None, "default": False, "panel": True, "params": {"panel": {"members": [{}, {}, {}, {}]}}})
    scored = [CandidateFigures(r["params"], s, s, None, 0.0) for r, s in zip(rows, scores)]
    items = SelectionItems(gold, None, 60, (-4.0, 4.0))  # 60 search items chose the members; 240 confirm
    winner, record = nested_test(scored, items, [1, 2, 3, 4], seed=0, panel=4)
    assert winner == 4 and record["passed"] and record["panel"]["passed"] and record["panel"]["items"] == 240
    assert record["level"].startswith("one-sided 97.5% lower bound")  # each of the two tests at half the level
    selection = {"gate": "nested", "rule": "spearman", "gate_result": record, "rows": rows}
    assert gate_line(selection).startswith("gate (panel and nested): the panel of 4 candidates shipped: the panel +")
    from judgetune.report._html import selection_section

    for r in rows:
        r.update(chosen=r.get("panel", False), spearman=None, mae=None)
    page = selection_section({**selection, "default_shipped": False})
    assert "The panel passed" in page and "one-sided 97.5% lower bound" in page and "the panel of 4 candidates" in page
