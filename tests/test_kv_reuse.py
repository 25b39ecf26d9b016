"""Grouped data scored at the cost of its unique text: the prefix tree's plan, and on the embedded model
the same target log-probabilities and label distributions with a shared source's KV state reused as from
scratch, whatever items share a decode (micro-batch composition) and whatever the cache held before."""

from __future__ import annotations

import os
import random
from collections import defaultdict
from dataclasses import replace
from itertools import groupby

import numpy as np
import pytest

os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

from judgetune import datasets  # noqa: E402
from judgetune.evaluation import cost_per_item  # noqa: E402
from judgetune.judges import make_judge  # noqa: E402
from judgetune.lm import load_lm, run_items  # noqa: E402
from judgetune.lm._batch import source_order  # noqa: E402
from judgetune.lm._prefix import plan_phases, reported_usage  # noqa: E402

TOLERANCE = 1e-4  # nats, target log-probs; measured 0.0 with llama.cpp built for AVX-512, within it for AVX2
# Label probabilities of a prompt evaluated in two passes (source reused, then the rest) against one pass:
# 0.0 with the AVX-512 build, up to 0.0024 with an AVX2-only build (GGML_NATIVE=OFF, GGML_AVX512=OFF): its
# kernels sum in another order for another batch shape. A wrong reuse moves them by 0.01 or more (the
# generation-KV bug fixed earlier: 0.014).
LABEL_TOLERANCE = 0.005
INSTRUCTION = [1, 2, 3, 4, 5, 6]


def test_plan_evaluates_each_shared_source_once_and_scores_each_item_once():
    rng = random.Random(0)
    sources = [[100 + s] * 40 for s in range(3)]
    items = [INSTRUCTION + sources[s] + [rng.randrange(500, 900) for _ in range(rng.randrange(3, 9))]
             for s in (0, 1, 0, 2, 1, 0, 2, 1)]
    items.append(INSTRUCTION + [7, 8, 9])  # a loner: shares the instruction only
    caps = [len(t) - 2 for t in items]
    phases = plan_phases(items, caps)
    assert sorted(i for p in phases for i in p.members) == list(range(len(items)))
    for phase in phases:
        assert all(items[i][:len(phase.prefix)] == phase.prefix and caps[i] >= len(phase.prefix)
                   for i in phase.members)
    # one phase per source (its items continue from instruction + source), the loner over the instruction
    assert sorted(len(p.prefix) for p in phases) == [len(INSTRUCTION)] + [len(INSTRUCTION) + 40] * 3
    evaluated = sum(len(p.prefix) for p in phases) + sum(len(items[i]) - len(p.prefix) for p in phases for i in p.members)
    assert evaluated < sum(map(len, items)) - 4 * 40
    # without the tree: one phase over the instruction; a cap below a source keeps its item at the cap
    (flat,) = plan_phases(items, caps, tree=False)
    assert flat.prefix == INSTRUCTION and len(flat.members) == len(items)
    capped = plan_phases(items, [len(INSTRUCTION) + 10 if i == 0 else c for i, c in enumerate(caps)])
    assert [len(p.prefix) for p in capped if 0 in p.members] == [len(INSTRUCTION) + 10]
    # the source the shared sequence already holds is entered first, even for a single item
    cached = items[3][:len(INSTRUCTION) + 40]
    first = plan_phases([items[3], items[0], items[2]], [caps[3], caps[0], caps[2]], cached, min_saved=1)
    assert first[0].members == [0] and first[0].prefix == cached
    # one-token prefixes never make a phase
    assert all(len(p.prefix) != 1 for p in plan_phases([[5, 1, 2], [5, 1, 3], [6, 1]], [1, 1, 0]))


def test_source_order_groups_items_and_keeps_first_appearance():
    keys = ["a", "b", "a", None, "c", "b", "a"]
    order = source_order(keys, lambda k: k)
    assert [keys[i] for i in order] == ["a", "a", "a", "b", "b", None, "c"]
    assert order == [0, 2, 6, 1, 5, 3, 4]


def test_items_of_one_group_start_together_and_come_back_in_order():
    examples = [datasets.Example(id=str(i), answer=f"a{i}", group=g) for i, g in enumerate("ABAC" "BA")]
    examples.append(datasets.Example(id="x", answer="ungrouped"))
    started = []
    outcomes = run_items(lambda e: started.append(e.id) or e.answer, examples, concurrency=1)
    assert started == ["0", "2", "5", "1", "4", "3", "x"]
    assert [o.value for o in outcomes] == [e.answer for e in examples] and [o.index for o in outcomes] == list(range(7))


def test_cached_tokens_are_read_where_a_server_reports_them_and_never_invented():
    openai = {"usage": {"prompt_tokens": 900, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 768}}}
    llamacpp = {"usage": {"prompt_tokens": 900, "completion_tokens": 3}, "timings": {"cache_n": 850, "prompt_n": 50}}
    assert reported_usage(openai) == {"prompt_tokens": 900, "completion_tokens": 3, "cached_tokens": 768}
    assert reported_usage(llamacpp)["cached_tokens"] == 850
    silent = {"usage": {"prompt_tokens": 900, "completion_tokens": 3}}  # llama-cpp-python's server
    assert "cached_tokens" not in reported_usage(silent)
    assert "cached_tokens" not in reported_usage({"usage": {"prompt_tokens_details": {"cached_tokens": True}}})


@pytest.fixture(scope="module")
def polytope(data_root):
    """The two shortest SummaC-Polytope articles, three summaries each (the catalog's grouped set)."""
    by_document = defaultdict(list)
    for example in datasets.load("summac-polytope", root=data_root):
        by_document[example.context[0]].append(example)
    shortest = sorted((d for d, group in by_document.items() if len(group) >= 8), key=len)[:2]
    return [e for d in shortest for e in by_document[d][:3]]


def likelihood_items(model, examples, instruction: str) -> list[tuple[list[int], list[int]]]:
    system = {"role": "system", "content": instruction}
    return [(model.tokenize(model.render([system, {"role": "user", "content": e.context[0]}])),
             model.tokenize(e.answer, special=False)) for e in examples]


@pytest.mark.model
@pytest.mark.slow
def test_target_logprobs_with_a_shared_source_equal_from_scratch_in_any_decode(uncached_lm, polytope):
    model = uncached_lm.model
    items = likelihood_items(model, polytope, "Sum up the main points of the text below in a few sentences.")
    scratch = model.target_logprobs(items, reuse=False)
    before = model.evaluated_tokens
    reused = model.target_logprobs(items)
    spent = model.evaluated_tokens - before
    instruction = len(os.path.commonprefix([p for p, _ in items]))
    article = [len(p) - instruction for p, _ in items]
    unique = instruction + article[0] + article[3] + sum(len(t) for _, t in items)  # items 0-2 share one article, 3-5 one
    assert spent <= unique + 3 * max(len(t) for _, t in items)  # each article once (items padded to equal lengths)
    for got, want in zip(reused, scratch):
        assert got.shape == want.shape and np.abs(got - want).max() <= TOLERANCE
    # the same items in other decodes: alone, two or three to a decode beside other lengths, after another
    # article filled the cache, the loner's article taken from the cache, with fewer or more companions
    for picked in ([4], [2, 3], [5, 0, 1], [1]):
        for i, got in zip(picked, model.target_logprobs([items[i] for i in picked])):
            assert np.abs(got - scratch[i]).max() <= TOLERANCE, (picked, i)


@pytest.mark.model
@pytest.mark.slow
def test_label_distributions_and_judges_score_the_same_with_sources_reused(uncached_lm, polytope):
    """The rubric (the article as its reference) and the likelihood judge in both directions, through
    ``judge_all``: the same verdicts with source reuse on as with every prompt from scratch."""
    model = uncached_lm.model
    examples = polytope[:2]  # two summaries of one article (switching articles: the target_logprobs test above)
    graded = [replace(e, references=(datasets.Reference(e.context[0]),)) for e in examples]
    rubric = make_judge("rubric", uncached_lm, train=[], label_range=(0.0, 1.0))
    likelihood = make_judge("likelihood", uncached_lm, train=[], label_range=(0.0, 1.0),
                            params={"direction": "both", "instruction": "summary"})
    before = model.evaluated_tokens
    shared = rubric.judge_all(graded)
    spent = model.evaluated_tokens - before
    both = likelihood.judge_all(examples)
    model.reuse_prefix = False
    try:
        before = model.evaluated_tokens
        alone = rubric.judge_all(graded)
        spent_alone = model.evaluated_tokens - before
        both_alone = likelihood.judge_all(examples)
    finally:
        model.reuse_prefix = True
    article = min(len(model.tokenize(e.context[0], special=False)) for e in examples)
    assert spent_alone - spent >= article  # the second item reused the article's evaluation
    for a, b in zip(shared, alone):
        assert a.parsed and b.parsed
        assert a.distribution == pytest.approx(b.distribution, abs=LABEL_TOLERANCE)
    for a, b in zip(both, both_alone):
        for key in ("a_answer", "a_source"):
            assert abs(a.detail[key]["mean"] - b.detail[key]["mean"]) <= TOLERANCE


@pytest.mark.server
@pytest.mark.slow
def test_over_a_server_items_of_one_article_are_sent_one_after_another(llama_server, polytope):
    """Interleaved articles reach the server article by article (its prompt cache keeps the last prompt);
    llama-cpp-python's server reports no cached tokens, so the cost record says none rather than 0."""
    remote = load_lm(f"openai/{llama_server.model}", api_base=llama_server.base_url, use_cache=False, concurrency=1)
    examples = [replace(e, references=(datasets.Reference(e.context[0]),)) for e in polytope]
    interleaved = [examples[i] for i in (0, 3, 1, 4)]
    judge = make_judge("rubric", remote, train=[], label_range=(0.0, 1.0))
    remote.transcript = []
    verdicts = judge.judge_all(interleaved)
    articles = [e.context[0] for e in interleaved]
    sent = [a for entry in remote.transcript if "messages" in entry for a in articles[:2]
            if any(a in m["content"] for m in entry["messages"])]
    assert [article for article, _ in groupby(sent)] == articles[:2]  # all of A's calls, then all of B's
    assert all("cached_tokens" not in v.usage for v in verdicts)
    assert cost_per_item(verdicts, 1.0)["cached_tokens_per_item"] is None


@pytest.mark.model
@pytest.mark.slow
def test_a_prefix_met_again_is_copied_back_from_its_saved_state_with_the_same_log_probabilities(uncached_lm, polytope):
    """The gate judges candidates in turn, each with its own instruction and demos: a prefix scored before is
    restored from its saved KV state, not evaluated again, and scores as it did."""
    model = uncached_lm.model
    # instructions no other test scores: the first call evaluates both articles' prefixes
    first = likelihood_items(model, polytope, "Restate what the article below reports, briefly and faithfully.")
    other = likelihood_items(model, polytope, "Write a short, faithful summary of the following news article.")
    before = model.evaluated_tokens
    scored = model.target_logprobs(first)
    spent_first = model.evaluated_tokens - before
    model.target_logprobs(other)
    restored, before = model._scoring.restored, model.evaluated_tokens
    again = model.target_logprobs(first)
    assert model._scoring.restored >= restored + 2  # both articles' prefixes (instruction + article) copied back
    assert model.evaluated_tokens - before < 0.6 * spent_first  # the summaries again, not the articles
    for got, want in zip(again, scored):
        assert got.shape == want.shape and np.abs(got - want).max() <= TOLERANCE
