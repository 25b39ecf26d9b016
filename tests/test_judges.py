"""Judge mechanics: expected scores, order swapping, LINKAGE positions, reference sampling, demos,
fact lists and parse failures. Scripted LMs appear only where a test needs a known distribution or
a known bias; everything else runs the embedded model."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from judgetune.datasets import Example, Reference
from judgetune.evaluation import draw_references, judge_row
from judgetune.judges import (
    LinkageJudge,
    PairwiseJudge,
    ReferencePool,
    RubricJudge,
    Verdict,
    check_params,
    distribution_after_marker,
    forced_choice,
    parse_fact_list,
    pick_demos,
    position_labels,
    position_to_score,
)
from judgetune.judges._linkage import demo_position
from judgetune.testing.scripted_lm import ScriptedLM


def fixed(probs: dict[str, float]):
    return lambda messages, labels, prefix: probs


def test_verdict_has_a_score_exactly_when_parsed():
    assert Verdict(0.5).parsed
    assert Verdict.failed("no label").score is None
    with pytest.raises(ValueError):
        Verdict(None)
    with pytest.raises(ValueError):
        Verdict(1.0, parsed=False)


def test_expected_score_from_a_known_distribution():
    lm = ScriptedLM(fixed({"1": 0.1, "2": 0.2, "3": 0.3, "4": 0.4}))
    verdict = forced_choice(lm, [{"role": "user", "content": "x"}], "score", ["1", "2", "3", "4", "5"],
                            [1, 2, 3, 4, 5])
    assert verdict.score == pytest.approx(0.1 * 1 + 0.2 * 2 + 0.3 * 3 + 0.4 * 4)
    assert verdict.distribution["5"] == 0
    assert lm.calls[-1]["prefix"] == "[[ ## score ## ]]\n"


def test_argmax_scoring_takes_the_most_probable_label():
    lm = ScriptedLM(fixed({"1": 0.1, "2": 0.5, "3": 0.4}))
    verdict = forced_choice(lm, [{"role": "user", "content": "x"}], "score", ["1", "2", "3"], [1, 2, 3],
                            scoring="argmax")
    assert verdict.score == 2.0


def test_expected_score_renormalizes_over_the_labels():
    lm = ScriptedLM(fixed({"0": 0.1, "1": 0.3}))  # 0.6 of the mass went elsewhere
    verdict = forced_choice(lm, [{"role": "user", "content": "x"}], "v", ["0", "1"], [0, 1])
    assert verdict.score == pytest.approx(0.75)
    assert verdict.detail["label_mass"] == pytest.approx(0.4)


def test_reasoning_first_reads_the_score_after_the_generated_reasoning():
    lm = ScriptedLM(fixed({"1": 1.0}), text="Both say the same.")
    verdict = forced_choice(lm, [{"role": "user", "content": "x"}], "score", ["0", "1"], [0, 1], reasoning=True)
    generate, labels = lm.calls
    assert generate["prefix"] == "[[ ## reasoning ## ]]\n"
    assert labels["prefix"] == "[[ ## reasoning ## ]]\nBoth say the same.\n\n[[ ## score ## ]]\n"
    assert verdict.score == 1.0 and verdict.raw == "Both say the same."


def test_no_mass_on_any_label_is_a_parse_failure_not_a_zero():
    lm = ScriptedLM(fixed({}))
    verdict = forced_choice(lm, [{"role": "user", "content": "x"}], "score", ["1", "2"], [1, 2])
    assert not verdict.parsed and verdict.score is None
    assert "got p=0" in verdict.raw


def test_server_answer_is_read_at_the_first_token_after_the_marker():
    tokens = [("[[", -0.1, []), (" ##", -0.1, []), (" score", -0.1, []), (" ##", -0.1, []), (" ]]", -0.1, []),
              ("\n", -0.1, []),
              ("3", math.log(0.5), [("3", math.log(0.5)), (" 4", math.log(0.3)), ("2", math.log(0.1)), ("x", -3.0)])]
    dist = distribution_after_marker(tokens, "[[ ## score ## ]]", ["1", "2", "3", "4", "5"])
    assert dist.missing == ("1", "5")
    assert dist.expected([1, 2, 3, 4, 5]) == pytest.approx((0.1 * 2 + 0.5 * 3 + 0.3 * 4) / 0.9)
    assert distribution_after_marker(tokens[:6], "[[ ## score ## ]]", ["3"]) is None  # nothing after the marker
    assert distribution_after_marker(tokens[2:], "[[ ## score ## ]]", ["3"]) is None  # no marker


def test_parse_failures_are_counted_and_left_out_of_the_metrics():
    examples = [Example(id=str(i), answer="a", label=float(i % 3)) for i in range(6)]
    verdicts = [Verdict(float(i % 3)) for i in range(4)] + [Verdict.failed("x"), Verdict.failed("y")]
    row = judge_row("j", verdicts, examples, seconds=1.2, label_range=(0, 2), pred_range=(0, 2), n_resamples=50)
    assert row["items"] == 6 and row["parse_failures"] == 2 and row["n"] == 4
    assert row["parse_failure_rate"] == pytest.approx(2 / 6)
    assert row["mae"] == 0.0  # the failures would have added error had they been scored as 0
    assert row["seconds_per_item"] == pytest.approx(0.2)


def first_position_lover(messages, labels, prefix):
    return {"A": 0.9, "B": 0.05, "tie": 0.05}


PAIR = Example(id="p", question="What is 2+2?", answer="It is 4.", answer_b="It is 5.", preference=-1.0)


def test_order_swap_turns_a_first_position_bias_into_a_tie():
    swapped = PairwiseJudge(ScriptedLM(first_position_lover))(PAIR)
    assert swapped.score == pytest.approx(0.0)
    assert swapped.distribution["first"] == pytest.approx(swapped.distribution["second"])
    unswapped = PairwiseJudge(ScriptedLM(first_position_lover), swap=False)(PAIR)
    assert unswapped.score == pytest.approx(-0.85)


def test_order_swap_keeps_a_real_preference():
    def prefers_four(messages, labels, prefix):
        user = messages[-1]["content"]
        first_is_four = user.index("It is 4.") < user.index("It is 5.")
        return {"A": 1.0} if first_is_four else {"B": 1.0}

    assert PairwiseJudge(ScriptedLM(prefers_four))(PAIR).score == pytest.approx(-1.0)  # answer (not b) is better


def graded_group(n_per_grade: int = 2) -> list[Example]:
    return [Example(id=f"q/{g}-{i}", question="q?", answer=f"answer {g}-{i}", label=float(g), group="q")
            for g in range(4) for i in range(n_per_grade)]


def test_linkage_positions_and_rank_to_score():
    assert position_labels(4) == ["1", "2", "3", "4", "5"]
    assert position_to_score(1, 4) == 1.0 and position_to_score(5, 4) == 0.0 and position_to_score(3, 4) == 0.5
    with pytest.raises(ValueError):
        position_to_score(6, 4)
    refs = [Reference("a", 3.0), Reference("b", 2.0), Reference("c", 1.0), Reference("d", 0.0)]
    assert [demo_position(g, refs) for g in (3, 2, 1, 0)] == [1, 2, 3, 4]


def candidates(group: list[Example], seed: int = 1) -> list[Example]:
    """LINKAGE's protocol: one answer per grade drawn as references, the rest candidates carrying them."""
    return draw_references(group, per_grade=1, seed=seed).candidates


def test_linkage_scores_the_expected_position_among_sorted_references():
    group = candidates(graded_group())
    lm = ScriptedLM(fixed({"2": 0.5, "4": 0.5}))  # expected position 3 of 1..5
    judge = LinkageJudge(lm, seed=1)
    verdict = judge(group[0])
    assert verdict.score == pytest.approx(0.5)
    prompt = lm.calls[-1]["messages"][-1]["content"]
    listed = prompt.split("[[ ## references ## ]]")[1].split("[[")[0].strip().splitlines()
    shown = [line.split(". ", 1)[1] for line in listed]
    assert [s.split()[1][0] for s in shown] == ["3", "2", "1", "0"]  # one per grade, best first
    assert group[0].answer not in shown
    assert lm.calls[-1]["labels"] == ["1", "2", "3", "4", "5"]


def test_reference_sampling_is_reproducible_by_seed_and_never_includes_the_candidate():
    group = graded_group(3)
    pool, shuffled = ReferencePool(group), ReferencePool(list(reversed(group)))
    candidate = group[4]
    draws = {seed: pool.sample(candidate, per_grade=2, seed=seed) for seed in range(5)}
    assert all(pool.sample(candidate, per_grade=2, seed=s) == d for s, d in draws.items())
    assert all(shuffled.sample(candidate, per_grade=2, seed=s) == d for s, d in draws.items())
    assert len({d for d in draws.values()}) > 1
    for refs in draws.values():
        assert [r.grade for r in refs] == [3, 3, 2, 2, 1, 1, 0, 0]
        assert candidate.answer not in {r.text for r in refs}


def test_demos_are_stratified_by_label_and_seeded():
    pool = [Example(id=str(i), answer="a", label=float(i % 2 == 0)) for i in range(20)]
    demos = pick_demos(pool, 4, seed=3)
    assert sorted(d.label for d in demos) == [0, 0, 1, 1]
    assert [d.id for d in pick_demos(pool, 4, seed=3)] == [d.id for d in demos]
    assert pick_demos(pool, 30, seed=0).__len__() == 20
    assert not {d.id for d in pick_demos(pool, 20, seed=0, exclude=["0", "1"])} & {"0", "1"}


def test_demos_span_a_continuous_scale():
    pool = [Example(id=str(i), answer="a", label=round(0.2 * (i % 26), 1)) for i in range(78)]  # 0.0, 0.2, ..., 5.0
    for seed in range(10):
        labels = sorted(d.label for d in pick_demos(pool, 3, seed=seed))
        assert labels[0] < 5 / 3 < labels[1] < 10 / 3 < labels[2], (seed, labels)  # one in each third of 0-5


def test_settings_are_checked_against_the_search_space():
    space = RubricJudge.space()
    assert check_params(space, {"k": 2}, judge="rubric")["k"] == 2
    with pytest.raises(ValueError, match="unknown setting"):
        check_params(space, {"temperature": 1}, judge="rubric")
    with pytest.raises(ValueError, match="scale must be one of"):
        check_params(space, {"scale": "2-7"}, judge="rubric")


def test_fact_list_parsing():
    assert parse_fact_list('["A is B.", " ", "C is D."]', max_facts=5) == ["A is B.", "C is D."]
    assert parse_fact_list('Facts: ["x"] done', max_facts=5) == ["x"]
    assert parse_fact_list(json.dumps([f"f{i}" for i in range(9)]), max_facts=3) == ["f0", "f1", "f2"]
    assert parse_fact_list('[ "Raw\nnewline." ," \n" ]', max_facts=5) == ["Raw\nnewline."]  # llama.cpp's grammar
    for bad in ("no list", "[1, 2]", "[]", '["a", ', "{}"):
        with pytest.raises(ValueError):
            parse_fact_list(bad, max_facts=5)


def test_linkage_demos_carry_their_references_into_the_frozen_settings():
    group = graded_group()
    demo_pool = [Example(id=f"d/{g}-{i}", question="d?", answer=f"demo {g}-{i}", label=float(g), group="d")
                 for g in range(4) for i in range(2)]
    lm = ScriptedLM(fixed({"1": 1.0}))
    judge = LinkageJudge(lm, pool=ReferencePool(demo_pool), demo_pool=demo_pool, k=2, seed=3)
    frozen = judge.settings()["demos"]
    assert len(frozen) == 2 and all(len(d["references"]) == 4 for d in frozen)
    elsewhere = LinkageJudge(lm, demos=judge.demos, k=2, seed=3)  # scored on other data
    elsewhere(candidates(group)[0])
    prompt = lm.calls[-1]["messages"]
    assert sum("demo " in m["content"] for m in prompt) >= 2  # both demos shown, with their references


def test_an_oracle_placing_every_answer_correctly_gets_perfect_rank_correlation():
    """Guards the sign of the whole LINKAGE chain: prompt order, position labels, rank-to-score."""
    from scipy.stats import spearmanr

    group = graded_group(3)

    def oracle(messages, labels, prefix):
        user = messages[-1]["content"]
        listed = user.split("[[ ## references ## ]]")[1].split("[[")[0].strip().splitlines()
        grades = [int(line.split("answer ")[1][0]) for line in listed]
        mine = int(user.split("[[ ## answer ## ]]")[1].split("answer ")[1][0])
        return {str(1 + sum(g > mine for g in grades)): 1.0}

    group = candidates(group, seed=5)
    verdicts = LinkageJudge(ScriptedLM(oracle), seed=5).judge_all(group)
    assert spearmanr([v.score for v in verdicts], [e.label for e in group]).statistic == pytest.approx(1.0)


def test_linkage_reads_only_the_references_an_item_carries():
    """No pool of other items at scoring time: without references of its own (and generation off) an item
    fails with the reason, whatever it is scored with."""
    lm = ScriptedLM(fixed({"1": 1.0}))
    bare = graded_group()
    verdicts = LinkageJudge(lm, generate=False).judge_all(bare)
    assert not any(v.parsed for v in verdicts) and "carries fewer than two graded references" in verdicts[0].raw


def test_linkage_prompts_of_different_list_lengths_share_instruction_and_demos():
    """The embedded model evaluates a shared prompt prefix once: items with 2 and 4 references must differ
    only in their own turn, not in the system message (which once named the last position)."""
    full = candidates(graded_group())
    sparse = [replace(e, group="s", id=e.id.replace("q/", "s/"),
                      references=tuple(r for r in e.references if r.grade in (0.0, 3.0))) for e in full]
    demo_pool = [Example(id=f"d/{g}-{i}", question="d?", answer=f"demo {g}-{i}", label=float(g), group="d")
                 for g in range(4) for i in range(2)]
    lm = ScriptedLM(fixed({"1": 1.0}))
    judge = LinkageJudge(lm, pool=ReferencePool(demo_pool), demo_pool=demo_pool, k=2, seed=3)
    judge(full[0]), judge(sparse[0])
    long_list, short_list = lm.calls[-2], lm.calls[-1]
    assert len(long_list["labels"]) == 5 and len(short_list["labels"]) == 3  # 4 and 2 references
    assert long_list["messages"][:-1] == short_list["messages"][:-1]


@pytest.mark.parametrize("change, field", [
    ({"n_documents": -1}, "n_documents"), ({"n_documents": True}, "n_documents"),
    ({"average_length": float("nan")}, "average_length"), ({"document_frequency": {"cat": 0}}, "document_frequency.cat"),
    ({"url": "http://example.invalid"}, "url"),
])
def test_a_broken_bm25_state_is_refused_by_field(change, field):
    from judgetune.judges import make_judge
    from judgetune.judges._signals import BM25Judge

    judge = make_judge("bm25", train=[Example(id="a", question="cats", answer="cats purr", label=1.0),
                                      Example(id="b", question="dogs", answer="dogs bark", label=0.0)],
                       label_range=(0.0, 1.0))
    BM25Judge.check_fitted(judge.fitted_)  # the state a fit writes passes
    with pytest.raises(ValueError, match=rf"fitted: expected BM25 corpus statistics .*\({field}: "):
        BM25Judge.check_fitted({**judge.fitted_, **change})
