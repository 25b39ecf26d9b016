"""The LM layer against real models: a real llama.cpp OpenAI-compatible server driven through DSPy,
label distributions from the server vs in-process, the transformers backend vs llama.cpp, and the
cache and key hygiene of remote calls."""

from __future__ import annotations

import json
import logging
import math
import os

import dspy
import httpx
import pytest
from dspy import lm15
from dspy.utils.exceptions import AdapterParseError

os.environ["OMP_WAIT_POLICY"] = "PASSIVE"  # llama.cpp's OpenMP threads must not spin between calls

from judgetune.lm import LabelDistribution, LogprobsUnavailableError, ResponseCache, load_lm, resolve_scoring_mode  # noqa: E402
from judgetune.lm._spec import model_file, parse_lm_spec  # noqa: E402
from judgetune.testing.fault_server import FaultServer  # noqa: E402

YES_NO = ["yes", "no", "Yes", "No"]
RATING = ["1", "2", "3", "4", "5"]


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


# Prompts whose labels are among the server's top 20 first tokens on this CPU (at least one must be anywhere).
PROMPTS = [
    (user("Is the sky blue? Answer yes or no."), YES_NO),
    (user("Answer yes or no: is fire cold?"), YES_NO),
    (user("Is 7 a prime number? yes or no"), YES_NO),
    (user("Rate this answer from 1 to 5. Question: What is 3*3? Answer: 9. Reply with a single digit."), RATING),
    (user("Rate this answer from 1 to 5. Question: What is 2+2? Answer: 4. Reply with a single digit."), RATING),
    (user("Rate this answer from 1 to 5. Question: What is the capital of Italy? Answer: Rome. "
          "Reply with a single digit."), RATING),
]
# Labels "2".."5" fall outside the server's top 20 here.
MISSING_PROMPT = (user("Grade the answer 1, 2, 3, 4 or 5. Q: Who wrote Hamlet? A: Shakespeare. Grade:"), RATING)
# A system message of our own: the template's default system prompt is then left out.
SYSTEM_PROMPT = ([{"role": "system", "content": "You are a strict judge. Reply with Yes or No only."},
                  {"role": "user", "content": "Is Paris the capital of France?"}], YES_NO)
CHAIN_PROMPT = user("Did the answer pass, fail, or partially pass? Reply with one of: pass, fail, partially pass.")
CHAIN_LABELS = ["pass", "fail", "partially pass"]

def tv_distance(p, q) -> float:
    """Total variation over the labels plus the mass outside them, on raw (not renormalized) probabilities."""
    pp, qp = p.probabilities, q.probabilities
    return 0.5 * (sum(abs(pp[label] - qp[label]) for label in p.labels) + abs(p.outside_mass - q.outside_mass))


def from_scratch(lm, messages, labels):
    """The label distribution with the prompt evaluated from scratch, whatever ran before.

    Evaluating an unrelated prompt first empties the in-process KV cache, so nothing of the
    previous call is reused."""
    lm.model.next_logprobs(lm.model.tokenize("flush"))
    return lm.label_distribution(messages, labels)


def served_distribution(lm, messages, labels) -> LabelDistribution:
    """The labels' log-probabilities at the first answer token, from the server's top_logprobs of a
    one-token answer (the path judges take over a server: ``generate(..., top_logprobs=20)``); a
    label outside the top 20 gets -inf and is listed as missing."""
    answer = lm.generate(messages, max_tokens=1, top_logprobs=20)
    top = dict(answer.logprobs[0][2])
    missing = tuple(label for label in labels if label not in top)
    return LabelDistribution(tuple(labels), tuple(top.get(label, -math.inf) for label in labels), missing,
                             usage=answer.usage)


@pytest.fixture(scope="module")
def served_model(llama_server) -> str:
    """The name /v1/models lists: the GGUF path (the single-model server also accepts any other name)."""
    models = httpx.get(f"{llama_server.base_url}/models").json()["data"]
    assert [m["id"] for m in models] == [str(model_file(parse_lm_spec("local:smollm2")))]
    return models[0]["id"]


@pytest.fixture(scope="module")
def remote(llama_server, served_model):
    return load_lm(f"openai/{served_model}", api_base=llama_server.base_url, use_cache=False)


@pytest.fixture(scope="module")
def transformers_lm():
    # ~60 s on 2 cores: transformers parses the GGUF in pure Python three times (tokenizer, config, weights).
    lm = load_lm("local:smollm2", backend="transformers", use_cache=False)
    yield lm
    lm.close()


# --- DSPy on the real server -------------------------------------------------------------------

def test_server_accepts_any_model_name(llama_server):
    reply = httpx.post(f"{llama_server.base_url}/chat/completions", timeout=30,
                       json={"model": "any-name", "messages": user("Hi"), "max_tokens": 1}).json()
    assert reply["model"] == "any-name" and reply["choices"][0]["message"]["content"]


def test_dspy_lm_generates_through_the_server(remote):
    before = remote.engine.calls
    out = remote.dspy_lm("Say hello", max_tokens=8)
    assert remote.engine.calls == before + 1
    assert len(out) == 1 and out[0].strip()
    assert remote.dspy_lm.history[-1]["usage"]["completion_tokens"] >= 1
    # No comparison of the words with the in-process model's: greedy text flips on any tiny numeric
    # difference between CPUs; the numbers themselves are compared in the label-distribution tests.


def test_predict_reaches_the_server(remote):
    before, history = remote.engine.calls, len(remote.dspy_lm.history)
    with dspy.context(lm=remote.dspy_lm, adapter=dspy.ChatAdapter(use_json_adapter_fallback=False)):
        try:
            dspy.Predict("question -> answer")(question="What is 2+2?", config={"max_tokens": 16})
        except AdapterParseError:
            pass  # a 135M model may not follow the format; the call itself is what is checked here
    assert remote.engine.calls == before + 1
    assert len(remote.dspy_lm.history) == history + 1
    assert remote.dspy_lm.history[-1]["outputs"][0].strip()


def test_remote_engine_refuses_a_prefill_it_cannot_continue(remote, uncached_lm):
    # A chat endpoint closes a trailing assistant message and opens a new turn; in-process it is continued.
    messages = (lm15.Message.user("Name a fruit."), lm15.Message.assistant("My favourite fruit is the"))
    config = lm15.Config(max_tokens=10, temperature=0.0)
    local = uncached_lm.dspy_lm(lm15.Request(model=uncached_lm.dspy_lm.model, messages=messages, config=config))
    assert local.text.strip()
    before = remote.engine.calls
    with pytest.raises(Exception, match="prefill"):
        remote.dspy_lm(lm15.Request(model=remote.dspy_lm.model, messages=messages, config=config))
    assert remote.engine.calls == before


# --- label distributions: server vs in-process ---------------------------------------------------

LOGPROB_TOLERANCE = 0.05  # nats; measured here < 1e-7 (same weights, same batched prompt pass), kept loose for other CPUs


@pytest.mark.parametrize("messages,labels", PROMPTS, ids=[f"p{i}" for i in range(len(PROMPTS))])
def test_server_and_in_process_label_distributions_agree(remote, uncached_lm, messages, labels):
    """Each label the server lists among its top 20 first tokens has the in-process log-probability
    within LOGPROB_TOLERANCE; each label it leaves out is no likelier in-process than the least likely
    token it listed (which labels make the top 20 may differ between CPUs; their numbers may not)."""
    answer = remote.generate(messages, max_tokens=1, top_logprobs=20)
    top = dict(answer.logprobs[0][2])
    local = from_scratch(uncached_lm, messages, labels)
    # same chat template: the server's prompt has exactly as many tokens as our rendering
    assert answer.usage["prompt_tokens"] == local.usage["prompt_tokens"]
    listed = [(label, lp) for label, lp in zip(labels, local.logprobs) if label in top]
    assert listed, f"none of {labels} among the server's top 20: {sorted(top)}"
    for label, local_lp in listed:
        assert abs(top[label] - local_lp) < LOGPROB_TOLERANCE, label
    floor = min(top.values())
    for label, local_lp in zip(labels, local.logprobs):
        if label not in top:
            assert local_lp < floor + LOGPROB_TOLERANCE, label


def test_server_and_in_process_agree_with_a_system_message(remote, uncached_lm):
    messages, labels = SYSTEM_PROMPT
    served, local = served_distribution(remote, messages, labels), from_scratch(uncached_lm, messages, labels)
    assert served.usage["prompt_tokens"] == local.usage["prompt_tokens"]
    assert tv_distance(served, local) < 0.02  # measured 0.0017: "yes" and "no" (p ~ 0.001) are outside the top 20


def test_server_omits_exactly_the_labels_outside_its_top_20(remote, uncached_lm):
    messages, labels = MISSING_PROMPT
    served = served_distribution(remote, messages, labels)
    remote.client.complete(user("Something unrelated."), max_tokens=1)  # so the next prompt is re-run whole
    top = remote.client.complete(messages, max_tokens=1, top_logprobs=20).logprobs[0]["top_logprobs"]
    local = from_scratch(uncached_lm, messages, labels)
    listed = {item["token"]: item["logprob"] for item in top}
    assert len(top) == 20 and served.missing and len(served.missing) < len(labels)
    assert set(served.missing) == set(labels) - set(listed)
    floor = min(listed.values())
    for label, served_lp, local_lp in zip(labels, served.logprobs, local.logprobs):
        if label in served.missing:
            assert served_lp == -math.inf and local_lp < floor + 1e-6
        else:
            assert served_lp == pytest.approx(listed[label], abs=1e-6)
            assert served_lp == pytest.approx(local_lp, abs=1e-5)
    assert tv_distance(served, local) < 0.02  # measured 0.0099: the missing labels' in-process mass


def test_repeating_a_label_distribution_gives_the_same_answer(uncached_lm):
    # llama.cpp's single-token kernel differs from the batched pass by up to 0.4 nats; the engine
    # always evaluates at least two tokens, so what the cache held before changes nothing.
    first = from_scratch(uncached_lm, CHAIN_PROMPT, CHAIN_LABELS)
    again = uncached_lm.label_distribution(CHAIN_PROMPT, CHAIN_LABELS)  # prompt already in the KV cache
    assert again.logprobs == first.logprobs


# --- backends: transformers (GGUF dequantized to float32) vs llama.cpp (Q4_1) ----------------------

@pytest.mark.model
@pytest.mark.slow
def test_transformers_and_llamacpp_label_distributions_agree(transformers_lm, uncached_lm):
    # Measured on these 7 prompts (raw TV incl. outside mass): 0.010-0.048, max on p0 ("sky blue",
    # p(No) 0.347 vs 0.305); renormalized over the labels 0.002-0.052; the argmax label agreed on all 7.
    prompts = [*PROMPTS, SYSTEM_PROMPT]
    distances, agree = [], 0
    for messages, labels in prompts:
        a, b = from_scratch(uncached_lm, messages, labels), from_scratch(transformers_lm, messages, labels)
        assert a.usage["prompt_tokens"] == b.usage["prompt_tokens"]  # same template and tokenizer
        distances.append(tv_distance(a, b))
        agree += max(labels, key=a.probabilities.get) == max(labels, key=b.probabilities.get)
    assert max(distances) < 0.08, distances
    assert agree >= len(prompts) - 1


@pytest.mark.parametrize("backend", ["llamacpp", pytest.param("transformers", marks=pytest.mark.slow)])
def test_multi_token_label_is_chained(backend, request):
    lm = request.getfixturevalue("uncached_lm" if backend == "llamacpp" else "transformers_lm")
    chained = from_scratch(lm, CHAIN_PROMPT, CHAIN_LABELS)
    model = lm.model
    model.next_logprobs(model.tokenize("flush"))
    prompt = model.tokenize(model.render(CHAIN_PROMPT))
    pieces = model.tokenize("partially pass", special=False)
    assert len(pieces) == 3
    first = model.next_logprobs(prompt)
    manual = first[pieces[0]] + sum(model.next_logprobs(prompt + pieces[:i])[pieces[i]] for i in (1, 2))
    by_label = dict(zip(CHAIN_LABELS, chained.logprobs))
    assert by_label["partially pass"] == pytest.approx(manual, abs=1e-6)
    assert by_label["partially pass"] < first[pieces[0]] - 0.01  # the later pieces do count
    assert by_label["pass"] == pytest.approx(first[model.tokenize("pass", special=False)[0]], abs=1e-9)


# --- remote errors, cache and keys -----------------------------------------------------------------

def test_no_logprobs_raises_an_error_naming_model_endpoint_and_setting():
    from judgetune.judges import RubricJudge

    with FaultServer(logprobs=False) as server:
        lm = load_lm("openai/m", api_base=server.base_url, use_cache=False, max_retries=0)
        with pytest.raises(LogprobsUnavailableError) as info:
            resolve_scoring_mode(lm, "logprobs")
        with pytest.raises(LogprobsUnavailableError):  # a judge asking for it: the same one message, before any item
            RubricJudge(lm, scoring_mode="logprobs")
        assert len(server.log) == 1  # one probe
        with pytest.raises(ValueError, match="in-process"):  # exact label distributions are in-process only
            lm.label_distribution(user("Is it good?"), ["1", "2", "3"])
    message = str(info.value)
    assert "openai/m" in message and server.base_url in message and "scoring_mode='sampled'" in message


def test_cache_keeps_two_endpoints_apart(tmp_path):
    cache = ResponseCache(tmp_path / "cache")
    with FaultServer() as a, FaultServer() as b:
        lm_a = load_lm("openai/m", api_base=a.base_url, cache=cache)
        lm_b = load_lm("openai/m", api_base=b.base_url, cache=cache)
        messages = user("Is it good?")
        first = lm_a.generate(messages, max_tokens=1, top_logprobs=3)
        assert lm_a.generate(messages, max_tokens=1, top_logprobs=3) == first and len(a.log) == 1  # a cache hit
        lm_b.generate(messages, max_tokens=1, top_logprobs=3)
        assert len(b.log) == 1 and len(a.log) == 1
        lm_a.dspy_lm("Hello", max_tokens=4)
        lm_b.dspy_lm("Hello", max_tokens=4)
        assert len(a.log) == 2 and len(b.log) == 2
        lm_b.dspy_lm("Hello", max_tokens=4)
        assert len(b.log) == 2  # a cache hit
    cache.close()


def test_api_key_is_written_nowhere(tmp_path, monkeypatch, caplog):
    secret = "sk-judgetune-test-5f3a9c1e7b2d4068"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    caplog.set_level(logging.DEBUG)
    cache_dir = tmp_path / "cache"
    cache = ResponseCache(cache_dir)
    with FaultServer() as server:
        lm = load_lm("openai/m", api_base=server.base_url, cache=cache)
        assert lm.client._client.headers["Authorization"] == f"Bearer {secret}"  # the key is really in play
        for i in range(3):
            lm.dspy_lm(f"Question {i}?", max_tokens=4)
            lm.generate(user(f"Rate item {i}."), max_tokens=1, top_logprobs=3)
        lm.dspy_lm("Question 0?", max_tokens=4)  # a cache hit
        assert len(server.log) == 6
    cache.close()
    files = [p for p in cache_dir.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert secret.encode() not in path.read_bytes(), path
    assert caplog.text and secret not in caplog.text
    assert secret not in json.dumps(lm.spec.to_dict())
    assert secret not in repr(lm.dspy_lm.history)


@pytest.mark.slow
def test_rubric_judge_reads_the_same_score_through_the_server(remote, uncached_lm, data_root):
    """Through a server the prompt ends at the score marker as in-process (the /completions way, with the
    chat template of the served GGUF), so even zero-shot, where the small model would not write
    the marker itself, the score is read, and both agree."""
    from judgetune import datasets
    from judgetune.judges import make_judge

    examples = datasets.load("sts2012-msrpar", root=data_root)
    train = [e for e in examples if e.meta["split"] == "train"]
    test = [e for e in examples if e.meta["split"] == "test"][:3]
    for k in (2, 0):
        served, local = (make_judge("rubric", lm, train=train, label_range=(0, 5), params={"k": k})
                         for lm in (remote, uncached_lm))
        for ex in test:
            a, b = served(ex), local(ex)
            assert b.parsed
            assert a.parsed and a.score == pytest.approx(b.score, abs=0.1)
