"""Judges on the embedded model: the score is exactly the expected value of the label distribution
the prompt produces; fact lists are valid JSON; LINKAGE's generated references; `judgetune evaluate`."""

from __future__ import annotations

import json

import pytest

from judgetune import datasets
from judgetune.cli import main
from judgetune.judges import FactCheckJudge, LinkageJudge, make_judge, parse_fact_list
from judgetune.judges._factcheck import fact_list_schema


@pytest.fixture(scope="module")
def msrpar(data_root):
    examples = datasets.load("sts2012-msrpar", root=data_root)
    return ([e for e in examples if e.meta["split"] == "train"], [e for e in examples if e.meta["split"] == "test"])


@pytest.mark.parametrize("reasoning", [False, True])
def test_rubric_score_is_the_expected_value_of_the_distribution_at_the_score(embedded_lm, uncached_lm, msrpar,
                                                                              reasoning):
    """The judge's verdict against the label distribution recomputed by a second, uncached model from
    the prompt the judge sent (a cached model would hand back the judge's own answer). With a reasoning,
    the label read must not reuse the KV entries generation wrote one token at a time."""
    train, test = msrpar
    judge = make_judge("rubric", embedded_lm, train=train, label_range=(0, 5),
                       params={"k": 2, "reasoning": reasoning})
    embedded_lm.transcript = []
    verdict = judge(test[0])
    sent, embedded_lm.transcript = embedded_lm.transcript, None
    labels = sent[-1]
    assert labels["op"] == "labels" and labels["labels"][:6] == ["0", "1", "2", "3", "4", "5"]
    assert labels["prefix"].endswith("[[ ## score ## ]]\n")
    assert labels["prefix"].startswith("[[ ## reasoning ## ]]\n") == reasoning
    assert test[0].answer in labels["messages"][-1]["content"]
    computed = uncached_lm.label_calls
    again = uncached_lm.label_distribution(labels["messages"], ["0", "1", "2", "3", "4", "5"], prefix=labels["prefix"])
    assert uncached_lm.label_calls == computed + 1  # computed afresh, not read from a cache
    probs = again.normalized()
    assert verdict.distribution == pytest.approx(probs, abs=1e-5)  # batched decode vs one prompt alone
    assert verdict.score == pytest.approx(sum(p * int(label) for label, p in probs.items()))
    demo_text = "\n".join(m["content"] for m in labels["messages"])
    assert all(d.answer in demo_text for d in judge.demos) and len(judge.demos) == 2


@pytest.mark.slow
def test_fact_lists_are_valid_json(embedded_lm, data_root):
    judge = FactCheckJudge(embedded_lm, max_facts=4)
    schema = fact_list_schema(4)
    for ex in datasets.load("summac-summeval", root=data_root)[:3]:
        facts, usage = judge.extract_facts(ex.answer)
        assert 1 <= len(facts) <= 4 and all(isinstance(f, str) and 0 < len(f) <= schema["items"]["maxLength"]
                                            for f in facts)
        assert usage["completion_tokens"] > 0


@pytest.mark.slow
def test_iterative_fact_check_averages_one_check_per_fact(embedded_lm, data_root):
    ex = datasets.load("summac-summeval", root=data_root)[0]
    judge = FactCheckJudge(embedded_lm, direction="support", max_facts=3)
    embedded_lm.transcript = []
    verdict = judge(ex)
    sent, embedded_lm.transcript = embedded_lm.transcript, None
    facts = verdict.detail["facts"]
    assert facts == parse_fact_list(json.dumps(facts), max_facts=3)
    assert [e["op"] for e in sent] == ["generate"] + ["labels"] * len(facts)
    assert all(0 <= s <= 1 for s in verdict.detail["fact_scores"])
    assert verdict.score == pytest.approx(sum(verdict.detail["fact_scores"]) / len(facts))


def test_linkage_generates_references_once_per_question(embedded_lm, msrpar):
    _, test = msrpar
    judge = LinkageJudge(embedded_lm, generated_references=3)
    refs = judge.references_for(test[0], 0)
    assert [r.grade for r in refs] == [2.0, 1.0, 0.0]
    assert refs[0].text == test[0].references[0].text  # the gold answer is the best reference
    calls = embedded_lm.engine.calls
    assert judge.references_for(test[0], 0) == refs and embedded_lm.engine.calls == calls
    verdict = judge(test[0])
    assert verdict.parsed and 0 <= verdict.score <= 1
    assert verdict.detail["draws"][0]["grades"] == [2.0, 1.0, 0.0]


@pytest.mark.model
@pytest.mark.slow
def test_evaluate_prints_the_judge_beside_its_baselines(data_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(data_root))
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["evaluate", "--judge", "rubric", "--data", "sts2012-msrpar", "--limit", "6", "--resamples", "50",
                 "--json", "--show-prompt"]) == 0
    out = capsys.readouterr()
    rows = json.loads(out.out)["rows"]
    assert [r["name"] for r in rows] == ["rubric", "constant", "random", "embedding"]
    for r in rows:
        assert r["items"] == 6 and r["n"] + r["parse_failures"] == 6
        assert {"mae", "bracket_accuracy", "spearman", "kendall", "pearson", "parse_failure_rate", "tokens_per_item",
                "seconds_per_item", "mae_ci"} <= set(r)
    assert rows[0]["tokens_per_item"] > 100 and 0 < rows[0]["label_mass"] <= 1
    assert "[[ ## score ## ]]" in out.err and "[assistant, prefilled]" in out.err


@pytest.mark.model
def test_evaluate_rejects_unknown_settings_and_data(data_root, monkeypatch, capsys):
    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(data_root))
    assert main(["evaluate", "--judge", "embedding", "--data", "no-such-thing.jsonl"]) == 2
    assert "neither a catalog source" in capsys.readouterr().err
    assert main(["evaluate", "--judge", "rubric", "--data", "sts2012-msrpar", "--param", "temperature=1"]) == 2
    assert "unknown setting(s) ['temperature']" in capsys.readouterr().err
