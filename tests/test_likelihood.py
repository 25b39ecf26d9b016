"""The likelihood judge on the embedded model: batched, prefix-cached target log-probabilities equal a
from-scratch pass; the judge agrees with human paraphrase scores; a frozen judge scores the same after
reloading; the server path through a real llama.cpp server's echo, and the error where echo is missing."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

from judgetune import datasets  # noqa: E402
from judgetune.config import JudgeConfig  # noqa: E402
from judgetune.judges import LikelihoodJudge, build_judge, make_judge  # noqa: E402
from judgetune.lm import LogprobsUnavailableError, load_lm  # noqa: E402
from judgetune.lm._spec import model_file, parse_lm_spec  # noqa: E402
from judgetune.stats import correlation  # noqa: E402

TOLERANCE = 1e-4  # nats per token; measured: under 1e-7 (the float32 exponentials of _token_logprobs)


@pytest.fixture(scope="module")
def msrpar(data_root):
    examples = datasets.load("sts2012-msrpar", root=data_root)
    scale = datasets.CATALOG["sts2012-msrpar"].scale
    return ([e for e in examples if e.meta.get("split") == "train"],
            [e for e in examples if e.meta.get("split") == "test"], (scale.low, scale.high))


def reference_logprobs(path, prompt: list[int], target: list[int]) -> np.ndarray:
    """From scratch, through llama-cpp-python's own high-level API (every position's logits)."""
    from llama_cpp import Llama

    llm = Llama(str(path), n_ctx=4096, n_threads=2, logits_all=True, verbose=False)
    try:
        llm.eval(prompt + target[:-1])
        z = llm.scores[len(prompt) - 1:len(prompt) + len(target) - 1].astype(np.float64)
    finally:
        llm.close()
    top = z.max(axis=1, keepdims=True)
    return z[np.arange(len(target)), target] - (top[:, 0] + np.log(np.exp(z - top).sum(axis=1)))


def test_batched_prefix_scoring_equals_from_scratch(uncached_lm):
    model = uncached_lm.model
    system = {"role": "system", "content": "Say the same thing in other words."}
    sources = ["The cat sat on the mat.", "Stocks fell sharply on Monday after the report.",
               "He said the plan was dead.", "Officials confirmed 12 deaths in the storm near the coast.",
               "The court rejected the appeal on Friday."]
    targets = ["A cat was sitting on the mat.", "On Monday shares dropped steeply following the report.",
               "The plan is over, he said.", "Twelve people died.", "On Friday the appeal was turned down."]
    items = [(model.tokenize(model.render([system, {"role": "user", "content": s}])), model.tokenize(t, special=False))
             for s, t in zip(sources, targets)]
    before = model.evaluated_tokens
    shared = model.target_logprobs(items)  # 5 items: two groups of sequences beside the cached prefix
    reused = model.evaluated_tokens - before
    again = model.target_logprobs(items[3:] + items[:1])  # prefix from the KV cache, other groupings
    before = model.evaluated_tokens
    alone = model.target_logprobs(items, reuse=False)
    # from scratch runs the prefix every time; the shared path runs it once (its items padded to equal
    # lengths, a few tokens: see _ScoringContext._run)
    assert model.evaluated_tokens - before == sum(len(p) + len(t) - 1 for p, t in items)
    common = len(os.path.commonprefix([p for p, _ in items]))
    assert reused < model.evaluated_tokens - before - (len(items) - 1) * common / 2
    path = model_file(parse_lm_spec("local:smollm2"))
    for i, (prompt, target) in enumerate(items):
        expected = reference_logprobs(path, prompt, target) if i in (0, 3) else alone[i]
        assert len(shared[i]) == len(target)
        assert np.abs(shared[i] - expected).max() <= TOLERANCE
        assert np.abs(alone[i] - expected).max() <= TOLERANCE
    for got, i in zip(again, (3, 4, 0)):
        assert np.abs(got - shared[i]).max() <= TOLERANCE


@pytest.mark.slow
def test_many_items_in_one_call_never_hold_every_items_logits(uncached_lm):
    """Each item's vocabulary-wide logits rows are reduced to its target's log-probabilities as soon as they are
    computed: 60 items of ~20 target tokens would hold 60 x 20 x 49,152 floats (about 240 MB) at once; a call
    allocates at most a few groups' worth (measured with tracemalloc, which sees numpy's buffers)."""
    import tracemalloc

    model = uncached_lm.model
    system = {"role": "system", "content": "Say the same thing in other words."}
    items = [(model.tokenize(model.render([system, {"role": "user", "content": f"Sentence {i} about town {i}."}])),
              model.tokenize(f"In town {i} the weather was calm and sunny all day, the report number {i} said.",
                             special=False)) for i in range(60)]
    tokens = sum(len(t) for _, t in items)
    tracemalloc.start()
    try:
        out = model.target_logprobs(items)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [len(o) for o in out] == [len(t) for _, t in items]
    whole = tokens * model.n_vocab * 4  # bytes of every item's logits rows held together
    assert peak < whole / 5, f"peak {peak / 1e6:.0f} MB of {whole / 1e6:.0f} MB"


def test_judge_agrees_with_human_paraphrase_scores(uncached_lm, msrpar):
    train, test, _ = msrpar
    items = test[:40]
    judge = make_judge("likelihood", uncached_lm, train=train, label_range=(0.0, 5.0))  # the untuned defaults
    assert judge.params["source"] == "reference" and not judge.demos  # MSRpar has no question or context
    verdicts = judge.judge_all(items)
    assert all(v.parsed for v in verdicts)
    lo, hi = judge.score_range
    assert all(lo <= v.score <= hi for v in verdicts)
    rho = correlation([v.score for v in verdicts], [e.label for e in items])
    assert rho > 0.2  # measured 0.44 on 120 test pairs; the constant and random predictors sit at 0


@pytest.mark.slow
def test_frozen_judge_scores_identically(uncached_lm, msrpar, tmp_path):
    train, test, label_range = msrpar
    judge = make_judge("likelihood", uncached_lm, train=train, label_range=label_range, seed=3,
                       params={"k": 2, "direction": "both", "instruction": "respond", "normalization": "prob"})
    assert len(judge.demos) == 2 and all(d.label >= 4.0 for d in judge.demos)  # highly rated ones
    items = test[40:44]
    first = [v.score for v in judge.judge_all(items)]
    config = JudgeConfig.from_judge(judge, lm={"spec": "local:smollm2"}, calibrator=None, label_range=label_range)
    loaded = JudgeConfig.load(config.save(tmp_path / "judge.json"))
    rebuilt = loaded.build_judge(uncached_lm)
    assert isinstance(rebuilt, LikelihoodJudge) and rebuilt.demos == judge.demos
    assert [v.score for v in rebuilt.judge_all(items)] == first
    assert all(0.0 <= s <= 1.0 for s in first)
    # the prompt state is two dspy.Predict sub-modules, one per direction, each with its instruction and the demos
    predictors = dict(rebuilt.named_predictors())
    assert set(predictors) == {"predict", "reverse"}
    assert predictors["predict"].signature.instructions == LikelihoodJudge.PROMPTS["respond"][0] == loaded.instruction
    assert predictors["reverse"].signature.instructions == LikelihoodJudge.PROMPTS["respond"][1]
    assert rebuilt.dump_state() == judge.dump_state()


def test_source_comes_from_the_data_and_is_not_searched(msrpar, data_root):
    """A source the data lacks fails every item, so the tuner never searches it: the data decides."""
    import optuna

    from judgetune.tuning import RunSpec, suggest

    train, _, _ = msrpar
    trec = datasets.load("linkage-trec-dl-nf", root=data_root)[:20]
    assert LikelihoodJudge.data_defaults(train, (0.0, 5.0)) == {"source": "reference"}
    assert LikelihoodJudge.data_defaults(trec, (0.0, 3.0))["source"] == "question"
    searched = {p.name: p.default for p in LikelihoodJudge.space() if p.searched}
    assert "source" not in searched
    params = suggest(optuna.trial.FixedTrial(searched), RunSpec(name="t", judge="likelihood", data="sts2012-msrpar"))
    assert "source" not in params  # FixedTrial would have raised had it been suggested


def test_answers_to_one_question_are_scored_by_the_question_and_the_incumbent_says_so(msrpar, data_root):
    """Several answers to one question: the default direction is P(question | answer), for the untuned judge
    that ``build`` (and ``evaluate``) gives and for the tuner's incumbent alike; a question per item, or a
    reference per item, keeps P(answer | source). The tuner's incumbent reads every kind's data defaults, so a
    fact check on reference-free data starts from ``support``, as ``evaluate`` does (it was ``correctness``)."""
    from dataclasses import replace

    from judgetune.judges import BuildContext, JudgeSpec, build
    from judgetune.tuning import RunSpec, default_params

    train, _, _ = msrpar
    trec = datasets.load("linkage-trec-dl-nf", root=data_root)[:20]
    assert len({e.question for e in trec}) < len(trec) / 2  # answers sharing their questions
    own_questions = [replace(e, question=f"{e.question} ({i})") for i, e in enumerate(trec)]
    assert LikelihoodJudge.data_defaults(trec, (0.0, 3.0)) == {"source": "question", "direction": "source"}
    assert LikelihoodJudge.data_defaults(own_questions, (0.0, 3.0)) == {"source": "question"}
    assert "direction" not in LikelihoodJudge.data_defaults(train, (0.0, 5.0))

    untuned = build(JudgeSpec("likelihood", {}), BuildContext(lm=object(), demo_pool=trec, label_range=(0.0, 3.0)))
    assert untuned.params["direction"] == "source" and untuned.directions() == ("source",)
    spec = RunSpec(name="t", judge="likelihood", data="linkage-trec-dl-nf")
    assert default_params(spec, demo_pool=trec, label_range=(0.0, 3.0))["direction"] == "source"
    assert default_params(spec, demo_pool=train, label_range=(0.0, 5.0))["direction"] == "answer"
    assert default_params(spec)["direction"] == "answer"  # no data: the declared default
    check = RunSpec(name="t", judge="factcheck", data="linkage-trec-dl-nf")
    assert default_params(check, demo_pool=trec, label_range=(0.0, 3.0))["direction"] == "support"
    assert default_params(check, demo_pool=train, label_range=(0.0, 5.0))["direction"] == "correctness"


@pytest.mark.slow
def test_server_with_misaligned_echo_is_refused(uncached_lm, msrpar, llama_server):
    """llama-cpp-python's server echoes prompt log-probabilities shifted by one token
    (abetlen/llama-cpp-python#1983): the probe catches it, where the in-process model passes it."""
    from judgetune.lm._targets import PROBE, PROBE_FLOOR, PROBE_TOKENS

    remote = load_lm(f"openai/{llama_server.model}", api_base=llama_server.base_url, use_cache=False)
    _, test, _ = msrpar
    with pytest.raises(LogprobsUnavailableError, match=r"fail a sanity check.*shifted by one token"):
        build_judge("likelihood", remote, chat=False).judge_all(test[:2])
    with pytest.raises(ValueError, match="chat template is applied in-process only"):
        build_judge("likelihood", remote).judge_all(test[:2])
    head, tail = PROBE.rsplit(", ", 1)
    (local,) = uncached_lm.target_logprobs([(head + ",", " " + tail)])
    assert local.value.mean > PROBE_FLOOR  # the same text, scored correctly, passes
    words = PROBE.split(" ")
    pairs = [(" ".join(words[:-n]), " " + " ".join(words[-n:])) for n in (PROBE_TOKENS // 2,)]
    assert uncached_lm.target_logprobs(pairs)[0].value.mean > PROBE_FLOOR


def test_server_without_completions_endpoint_says_what_is_missing(msrpar):
    """A chat-only server (here a stub that answers 404 on /v1/completions, as chat-only APIs do)."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class ChatOnly(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body = b'{"error": {"message": "Not found: only /v1/chat/completions is served"}}'
            self.send_response(404 if self.path.endswith("/completions") and "chat" not in self.path else 200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    _, test, _ = msrpar
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ChatOnly)
    Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        remote = load_lm("openai/some-chat-model", api_base=f"http://127.0.0.1:{httpd.server_address[1]}/v1",
                         use_cache=False, max_retries=0)
        with pytest.raises(LogprobsUnavailableError, match=r"openai/some-chat-model at http://127.*/completions: "
                                                           r"HTTP 404.*echo=true with logprobs"):
            build_judge("likelihood", remote, chat=False).judge_all(test[:1])
    finally:
        httpd.shutdown()


def test_a_tuning_run_gives_the_likelihood_judge_no_scoring_mode():
    """Only label-reading judges have a scoring mode; settling one for the likelihood judge crashed every trial."""
    from judgetune.tuning import RunSpec, settled_params

    spec = RunSpec(name="lik", judge="likelihood", data="sts2012-msrpar", fixed={"k": 0})
    assert settled_params(spec, object()) == {"k": 0}  # the LM is never asked for a mode
