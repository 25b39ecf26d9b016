"""The embedded engine on the real SmolLM2 model: exact label arithmetic, prefix reuse, cache, generation."""

from __future__ import annotations

import json
import math
import threading

import numpy as np
import pytest

from judgetune.lm import LabelDistribution, LMSpecError, ResponseCache, load_lm, parse_lm_spec
from judgetune.lm._labels import local_label_distribution
from judgetune.lm._llamacpp import LlamaCppModel
from judgetune.lm._spec import model_file

RATE = [{"role": "system", "content": "You rate how similar two sentences are, from 1 to 5."},
        {"role": "user", "content": "Sentence A: The cat sat on the mat.\nSentence B: A cat was sitting on a mat."}]
LABELS = ["1", "2", "3", "4", "5"]


@pytest.fixture(scope="module")
def gguf():
    return model_file(parse_lm_spec("local:smollm2"))


@pytest.fixture(scope="module")
def model(gguf):
    return LlamaCppModel(gguf)


@pytest.fixture()
def lm(tmp_path):
    judge_lm = load_lm("local:smollm2", cache=ResponseCache(tmp_path / "cache"))
    yield judge_lm
    judge_lm.close()


def test_expected_score_arithmetic():
    d = LabelDistribution(("1", "2", "3"), (math.log(0.2), math.log(0.3), math.log(0.1)))
    assert d.outside_mass == pytest.approx(0.4)
    assert d.normalized() == pytest.approx({"1": 1 / 3, "2": 0.5, "3": 1 / 6})
    assert d.expected([1, 2, 3]) == pytest.approx(1 / 3 + 1.0 + 0.5)  # (0.2*1 + 0.3*2 + 0.1*3) / 0.6
    assert d.expected([2, 1, 0]) == pytest.approx((0.2 * 2 + 0.3 * 1) / 0.6)
    with pytest.raises(ValueError, match="3 labels"):
        d.expected([1, 2])
    with pytest.raises(ValueError, match="no probability"):
        LabelDistribution(("a",), (-math.inf,)).normalized()
    assert LabelDistribution.from_dict(json.loads(json.dumps(d.to_dict()))) == d


@pytest.mark.model
def test_single_token_labels_are_one_forward_pass(model):
    prompt = model.tokenize(model.render(RATE, "Score: "))
    before = model.evaluated_tokens
    d = local_label_distribution(model, RATE, LABELS, prefix="Score: ")
    assert model.evaluated_tokens - before <= len(prompt)  # one pass, at most the whole prompt
    reference = LlamaCppModel(model.path).next_logprobs(prompt)  # a fresh context: no cache involved
    for label, lp in zip(LABELS, d.logprobs):
        (token,) = model.tokenize(label, special=False)
        assert lp == reference[token]
    assert sum(d.probabilities.values()) + d.outside_mass == pytest.approx(1.0)


@pytest.mark.model
def test_multi_token_labels_chain_log_probabilities(model):
    labels = ["pass", "partially pass", "fail"]
    d = local_label_distribution(model, RATE, labels, prefix="Verdict: ")
    prompt = model.tokenize(model.render(RATE, "Verdict: "))
    fresh = LlamaCppModel(model.path)
    pieces = model.tokenize("partially pass", special=False)
    assert len(pieces) > 1
    manual = sum(fresh.next_logprobs(prompt + pieces[:i])[pieces[i]] for i in range(len(pieces)))
    assert d.logprobs[1] == pytest.approx(manual, abs=1e-4)


@pytest.mark.model
def test_prefix_reuse_evaluates_only_the_new_tokens(model):
    shared = [{"role": "system", "content": "Rate the answer from 1 to 5. " * 20}]
    items = [shared + [{"role": "user", "content": f"Answer number {i}: the sky is blue."}] for i in range(3)]
    local_label_distribution(model, items[0], LABELS)
    before = model.evaluated_tokens
    second = local_label_distribution(model, items[1], LABELS)
    spent = model.evaluated_tokens - before
    full = len(model.tokenize(model.render(items[1])))
    assert spent < 20 < full  # only the differing tail, not the ~200-token instruction
    fresh = local_label_distribution(LlamaCppModel(model.path), items[1], LABELS)
    assert second.logprobs == fresh.logprobs  # exactly: a reused prefix changes no digit


@pytest.mark.model
def test_cache_hits_cost_no_model_time(lm):
    first = lm.label_distribution(RATE, LABELS, prefix="Score: ")
    spent = lm.model.evaluated_tokens
    again = lm.label_distribution(RATE, LABELS, prefix="Score: ")
    assert again == first and lm.label_calls == 1 and lm.model.evaluated_tokens == spent
    assert lm.cache.hits == 1
    text = lm.dspy_lm("Name a colour.", max_tokens=5)[0]
    calls, spent = lm.engine.calls, lm.model.evaluated_tokens
    assert lm.dspy_lm("Name a colour.", max_tokens=5)[0] == text
    assert lm.engine.calls == calls and lm.model.evaluated_tokens == spent
    other = lm.label_distribution(RATE, LABELS, prefix="Rating: ")  # another request is a miss
    assert lm.label_calls == 2 and other != first


@pytest.mark.model
def test_cache_persists_across_loads(tmp_path):
    cache_dir = tmp_path / "persist"
    first = load_lm("local:smollm2", cache=ResponseCache(cache_dir))
    d = first.label_distribution(RATE, LABELS)
    first.close()
    second = load_lm("local:smollm2", cache=ResponseCache(cache_dir))
    assert second.label_distribution(RATE, LABELS) == d and second.label_calls == 0
    assert second.model.evaluated_tokens == 0
    assert second.model_id == first.model_id and second.model_id.startswith("llamacpp:")


@pytest.mark.model
def test_generation_stops_and_reports_logprobs(lm):
    out = lm.dspy_lm("Count from 1 to 20, separated by commas.", max_tokens=60, stop=["7"], logprobs=True, top_logprobs=3)
    text = out[0]["text"]
    assert "7" not in text and len(text) > 0
    content = out[0]["logprobs"]["content"]
    assert "".join(t["token"] for t in content) == text  # only tokens wholly inside the kept text
    for token in content:
        assert len(token["top_logprobs"]) == 3
        assert token["top_logprobs"][0]["logprob"] >= token["logprob"] - 1e-9


@pytest.mark.model
def test_json_schema_constrained_generation(model):
    """Bounded strings and lists make the grammar finish within the tokens given (at most 3 strings of
    40 characters, a token each at worst, and bounded whitespace), so the output is whole JSON on any
    CPU: an unbounded string can repeat one word until the tokens run out."""
    schema = {"type": "object", "required": ["facts"],
              "properties": {"facts": {"type": "array", "minItems": 1, "maxItems": 3,
                                       "items": {"type": "string", "maxLength": 40}}}}
    prompt = model.tokenize(model.render([{"role": "user", "content": "List three facts about Paris as JSON."}]))
    out, finish, text = model.generate(prompt, max_tokens=400, json_schema=schema)
    assert finish == "stop" and len(out) < 400
    data = json.loads(text)
    assert set(data) == {"facts"} and 1 <= len(data["facts"]) <= 3
    assert all(isinstance(f, str) and len(f) <= 40 for f in data["facts"])


@pytest.mark.model
def test_label_distributions_are_thread_safe(model):
    prompts = [[{"role": "user", "content": f"Is {n} an even number? Answer yes or no."}] for n in range(6)]
    sequential = [local_label_distribution(model, p, ["yes", "no"]).logprobs for p in prompts]
    results = [None] * len(prompts)

    def work(i):
        results[i] = local_label_distribution(model, prompts[i], ["yes", "no"]).logprobs

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, sequential):
        assert np.allclose(got, want, atol=1e-4)


def test_bad_labels_and_specs():
    for labels in ([], ["a", "a"], ["a", ""]):
        with pytest.raises(ValueError):
            local_label_distribution(None, [], labels)
    assert str(parse_lm_spec("local:smollm2")) == "local:smollm2"
    spec = parse_lm_spec("openai/gpt-4o-mini", api_base="http://127.0.0.1:9/v1")
    assert spec.to_dict() == {"spec": "openai/gpt-4o-mini", "kind": "openai", "model": "gpt-4o-mini",
                              "api_base": "http://127.0.0.1:9/v1"}
    for bad, message in [("smollm2", "expected local:NAME"), ("local:gpt5", "unknown embedded model"),
                         ("llamacpp:model.bin", "path to a .gguf"), ("hf:/nowhere", None)]:
        if message is None:
            with pytest.raises(LMSpecError, match="no such folder"):
                model_file(parse_lm_spec(bad))
        else:
            with pytest.raises(LMSpecError, match=message):
                parse_lm_spec(bad)
    with pytest.raises(LMSpecError, match="credentials"):
        parse_lm_spec("openai/m", api_base="http://user:sk-secret@127.0.0.1/v1")
    with pytest.raises(LMSpecError, match="openai/MODEL specs only"):
        parse_lm_spec("local:smollm2", api_base="http://127.0.0.1/v1")
