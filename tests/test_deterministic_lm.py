"""``test:deterministic``, the stand-in model for plumbing tests: the whole JudgeLM path without
weights (cache, counts, label distributions, target log-probs, generation, JSON schemas)."""

from __future__ import annotations

import json
import math
import time

import jsonschema
import numpy as np
import pytest

from judgetune.datasets import Example, Reference
from judgetune.judges import make_judge
from judgetune.lm import LMSpecError, ResponseCache, load_lm, parse_lm_spec

RATE = [{"role": "system", "content": "Rate the answer from 1 to 5."}, {"role": "user", "content": "A: cats. B: dogs."}]
LABELS = ["1", "2", "3", "4", "5"]


@pytest.fixture()
def lm(tmp_path):
    lm = load_lm("test:deterministic", cache=ResponseCache(tmp_path / "cache"))
    yield lm
    lm.close()


def test_the_same_prompt_gives_the_same_numbers_across_loads_and_another_prompt_others(tmp_path):
    first = load_lm("test:deterministic", use_cache=False).label_distribution(RATE, LABELS)
    again = load_lm("test:deterministic", use_cache=False).label_distribution(RATE, LABELS)
    other = load_lm("test:deterministic", use_cache=False).label_distribution(RATE[:1] + [RATE[1] | {"content": "x"}],
                                                                            LABELS)
    assert first.logprobs == again.logprobs and first.logprobs != other.logprobs
    probs = first.probabilities
    assert 0 < sum(probs.values()) < 1 and all(p > 0 for p in probs.values())
    assert max(first.normalized().values()) < 0.999  # neither one-hot ...
    assert np.std(list(first.normalized().values())) > 0.01  # ... nor flat


def test_answers_are_cached_and_counted_like_the_embedded_model(lm):
    first = lm.label_distribution(RATE, LABELS, prefix="Score: ")
    assert lm.label_calls == 1
    assert lm.label_distribution(RATE, LABELS, prefix="Score: ") == first and lm.label_calls == 1
    assert lm.generate(RATE).text == lm.generate(RATE).text and lm.engine.calls == 1
    assert lm.model_id == "test:deterministic:1"


def test_target_logprobs_chain_the_next_token_logprobs(lm):
    model = lm.model
    prompt, target = "The capital of France is", " Paris."
    scored = lm.target_logprobs([(prompt, target)])[0].value
    tokens = model.tokenize(prompt)
    chained = []
    for token in model.tokenize(target, special=False):
        chained.append(model.next_logprobs(tokens)[token])
        tokens = tokens + [token]
    assert scored.logprobs == pytest.approx(chained, abs=1e-12) and len(scored.logprobs) == len(target)


def test_multi_token_labels_chain_their_tokens(lm):
    d = lm.label_distribution(RATE, ["yes", "no"])
    model = lm.model
    prompt = model.tokenize(model.render(RATE))
    no = model.next_logprobs(prompt)[ord("n")] + model.next_logprobs(prompt + [ord("n")])[ord("o")]
    assert d.logprobs[1] == pytest.approx(no, abs=1e-12)


def test_generation_stops_cuts_and_reports_logprobs(lm):
    free = lm.generate(RATE, max_tokens=200, top_logprobs=3)
    assert free.text.strip() and free.usage["completion_tokens"] == len(free.text.encode())
    for token, logprob, top in free.logprobs:  # the token taken is the likeliest one
        assert top[0] == (token, logprob) and len(top) == 3
    short = lm.generate(RATE, max_tokens=5)
    assert short.text == free.text[:5]
    word = free.text.split()[1]
    stopped = lm.generate(RATE, max_tokens=200, stop=[word])
    assert stopped.text == free.text[:free.text.index(word)]
    sampled = {lm.generate(RATE, temperature=1.0, seed=s).text for s in range(6)}
    assert len(sampled) > 1  # the seed matters when sampling


@pytest.mark.parametrize("schema", [
    {"type": "object", "required": ["facts"],
     "properties": {"facts": {"type": "array", "minItems": 1, "maxItems": 4, "items": {"type": "string"}}}},
    {"type": "object", "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5},
                                      "verdict": {"enum": ["pass", "fail"]}, "ok": {"type": "boolean"}}},
    {"type": "array", "items": {"type": "number", "minimum": 0, "maximum": 1}, "minItems": 2},
])
def test_json_schema_generation_is_valid_json_of_that_schema(lm, schema):
    text = lm.generate(RATE, max_tokens=400, json_schema=schema).text
    jsonschema.validate(json.loads(text), schema)


def test_a_prompt_beyond_the_context_fails_alone(lm):
    long = [{"role": "user", "content": "word " * 5000}]
    outcomes = lm.label_distributions([(RATE, LABELS, ""), (long, LABELS, ""), (RATE, ["yes", "no"], "")])
    assert [o.ok for o in outcomes] == [True, False, True]
    assert "does not fit the context" in outcomes[1].error


def test_a_judge_runs_on_it():
    lm = load_lm("test:deterministic", use_cache=False)
    example = Example(id="a", question="What is 2+2?", answer="4", references=(Reference("4"),), label=5.0)
    judge = make_judge("rubric", lm, train=[], label_range=(1, 5), params={"k": 0, "reasoning": False})
    verdict = judge(example)
    mean = sum(float(label) * p for label, p in verdict.distribution.items())
    assert verdict.parsed and verdict.score == pytest.approx(mean) and not math.isnan(verdict.score)


def test_the_slow_variant_takes_its_time_and_gives_the_same_numbers():
    slow, fast = load_lm("test:slow", use_cache=False), load_lm("test:deterministic", use_cache=False)
    start = time.monotonic()
    d = slow.label_distribution(RATE, LABELS)
    assert time.monotonic() - start >= 0.1
    assert d.logprobs == fast.label_distribution(RATE, LABELS).logprobs


def test_unknown_test_models_are_refused():
    assert str(parse_lm_spec("test:deterministic")) == "test:deterministic"
    with pytest.raises(LMSpecError, match="unknown test model 'nope'"):
        parse_lm_spec("test:nope")


def test_a_generation_prompt_that_fills_the_context_fails_its_item_alone():
    """A rubric with reasoning generates before it reads its label: an item too long for that fails
    with its reason, and the other items are judged (not a crash of the whole run)."""
    lm = load_lm("test:deterministic", use_cache=False)
    short = Example(id="short", question="What is 2+2?", answer="4", references=(Reference("4"),), label=5.0)
    long = Example(id="long", question="What is 2+2?", answer="four " * 5000, references=(Reference("4"),), label=5.0)
    judge = make_judge("rubric", lm, train=[], label_range=(1, 5), params={"k": 0, "reasoning": True})
    verdicts = judge.judge_all([short, long, short])
    assert [v.score is not None for v in verdicts] == [True, False, True]
    assert "context" in verdicts[1].raw


def test_the_embedded_models_threads_come_from_the_environment(monkeypatch):
    from judgetune.lm import embedded_threads

    monkeypatch.delenv("JUDGETUNE_THREADS", raising=False)
    assert embedded_threads() == 2
    monkeypatch.setenv("JUDGETUNE_THREADS", "3")
    assert embedded_threads() == 3
    for bad in ("0", "two", "-1", "1.5"):
        monkeypatch.setenv("JUDGETUNE_THREADS", bad)
        with pytest.raises(LMSpecError, match=r"\$JUDGETUNE_THREADS: expected a whole number >= 1, got"):
            embedded_threads()
