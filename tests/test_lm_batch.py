"""Batched local scoring on the embedded model: several prompts per llama.cpp decode over their shared,
cached prefix give the same label distributions as one prompt at a time, through the model, through
``JudgeLM.label_distributions`` and through a judge's ``judge_all``."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

from judgetune import datasets  # noqa: E402
from judgetune.errors import ItemError  # noqa: E402
from judgetune.judges import make_judge  # noqa: E402
from judgetune.lm import load_lm  # noqa: E402
from judgetune.lm._batch import Coalescer  # noqa: E402

# In log-probability (nats). Each item decodes in its own KV stream laid out as a from-scratch pass,
# and every decode carries two tokens or more, so the arithmetic is the same: measured 0.0 here.
TOLERANCE = 1e-4
SYSTEM = {"role": "system", "content": "Rate how well the answer fits the question, from 1 (badly) to 5 (perfectly)."}
QUESTIONS = [("What is the capital of France?", "Paris."), ("How many legs does a spider have?", "Six."),
             ("Who wrote Hamlet?", "William Shakespeare wrote it around 1600."), ("What is 2 + 2?", "4"),
             ("Name a primary colour.", "Green, or maybe purple."), ("Why is the sky blue?", "Because of the sea.")]
LABELS = ["1", "2", "3", "4", "5", "10"]  # "10" is two tokens: read in the same pass as the prompt


@pytest.fixture(scope="module")
def lm():
    lm = load_lm("local:smollm2", use_cache=False)
    yield lm
    lm.close()


def messages(question: str, answer: str) -> list[dict[str, str]]:
    return [SYSTEM, {"role": "user", "content": f"Question: {question}\nAnswer: {answer}"}]


@pytest.mark.slow
def test_next_logprobs_side_by_side_equal_one_at_a_time(lm):
    model = lm.model
    prompts = [model.tokenize(model.render(messages(q, a), "Score: ")) for q, a in QUESTIONS]
    prompts.append(model.tokenize("A prompt that shares nothing with the others."))
    alone = [model.next_logprobs(p) for p in prompts]  # the generation context, one at a time
    before = model.evaluated_tokens
    batched = model.next_logprobs_many(prompts)  # 7 prompts: three decodes of up to 3 sequences
    spent_batched = model.evaluated_tokens - before
    regrouped = model.next_logprobs_many(prompts[4:6] + prompts[:2])  # prefix from the cache, other groups
    scratch = model.next_logprobs_many(prompts[:3], reuse=False)
    for got, want in zip(batched, alone):
        assert got.shape == want.shape and np.abs(got - want).max() <= TOLERANCE
    for got, i in zip(regrouped, (4, 5, 0, 1)):
        assert np.abs(got - alone[i]).max() <= TOLERANCE
    for got, want in zip(scratch, alone):
        assert np.abs(got - want).max() <= TOLERANCE
    # the last prompt shares no prefix with the others; the other six still share theirs (a branch of the prefix
    # tree), run once (items of a decode are padded to equal lengths, so a few of its tokens run again)
    common = len(os.path.commonprefix(prompts[:6]))
    assert sum(len(p) for p in prompts) - 5 * common <= spent_batched < sum(len(p) for p in prompts) - 4 * common
    before = model.evaluated_tokens
    model.next_logprobs_many(prompts[:6])
    model.next_logprobs_many(prompts[:6])  # the shared prefix is now in sequence 0
    again = model.evaluated_tokens - before
    assert again < 2 * sum(len(p) for p in prompts[:6]) - len(os.path.commonprefix(prompts[:6]))


def test_a_single_prompt_reuses_the_prefix_batched_prompts_shared(lm):
    """After a batch, a lone prompt with the same long prefix (instruction, demos) runs only its own tokens,
    in the scoring context, with the numbers of a from-scratch pass; a reasoning just generated keeps the
    generation context."""
    model = lm.model
    shared = [SYSTEM, *[m for q, a in QUESTIONS[:4] for m in ({"role": "user", "content": f"Question: {q}\nAnswer: {a}"},
                                                               {"role": "assistant", "content": "Score: 3"})]]
    prompts = [model.tokenize(model.render([*shared, {"role": "user", "content": f"Question: {q}\nAnswer: {a}"}],
                                           "Score: ")) for q, a in QUESTIONS[4:]]
    common = len(os.path.commonprefix(prompts))
    model.generate(model.tokenize("Something else entirely, to fill the generation context."), max_tokens=2)
    model.next_logprobs_many(prompts[:1] * 2)  # the scoring context now holds the shared prefix
    before = model.evaluated_tokens
    got = model.next_logprobs(prompts[1])
    assert model.evaluated_tokens - before <= len(prompts[1]) - common + 2
    model.reuse_prefix = False
    try:
        want = model.next_logprobs(prompts[1])
    finally:
        model.reuse_prefix = True
    assert np.abs(got - want).max() <= TOLERANCE
    answer, _, _ = model.generate(prompts[0], max_tokens=4)  # the generation context holds prompt and answer
    longer = prompts[0] + [t.token_id for t in answer]
    before = model.evaluated_tokens
    model.next_logprobs(longer)
    assert model.evaluated_tokens - before <= 2


def test_label_distributions_equal_one_at_a_time_and_keep_failures(lm):
    requests = [(messages(q, a), LABELS, "Score: ") for q, a in QUESTIONS]
    requests.insert(2, (messages("x " * 5000, "y"), LABELS, "Score: "))  # longer than the 4096-token context
    calls = lm.label_calls
    outcomes = lm.label_distributions(requests)
    assert lm.label_calls - calls == len(QUESTIONS)
    assert not outcomes[2].ok and "does not fit the context" in outcomes[2].error
    for outcome, (msgs, labels, prefix) in zip(outcomes, requests):
        if outcome is outcomes[2]:
            continue
        one = lm.label_distribution(msgs, labels, prefix=prefix)  # a single request: the one-at-a-time path
        assert outcome.value.labels == tuple(LABELS)
        assert np.abs(np.array(outcome.value.logprobs) - np.array(one.logprobs)).max() <= TOLERANCE
        assert outcome.value.logprobs[-1] < outcome.value.logprobs[0]  # "10" costs two tokens
    with pytest.raises(ItemError):
        lm.label_distribution(*requests[2][:2], prefix="Score: ")


def test_a_label_of_two_tokens_costs_no_second_pass_and_others_still_match(lm):
    model = lm.model
    requests = [(messages(q, a), LABELS, "Score: ") for q, a in QUESTIONS]
    single = [(m, LABELS[:-1], p) for m, _, p in requests]
    lm.label_distributions(single)  # warm the shared prefix
    before = model.evaluated_tokens
    lm.label_distributions(single)
    base = model.evaluated_tokens - before
    before = model.evaluated_tokens
    lm.label_distributions(requests)
    assert model.evaluated_tokens - before <= base + len(requests)  # "10": one more token per item, not a pass
    two_long = ["1", "2", "10", "11", "12"]  # the longest runs with the prompt, the others apart
    for (msgs, _, prefix), outcome in zip(requests, lm.label_distributions([(m, two_long, p) for m, _, p in requests])):
        one = lm.label_distribution(msgs, two_long, prefix=prefix)
        assert np.abs(np.array(outcome.value.logprobs) - np.array(one.logprobs)).max() <= TOLERANCE


@pytest.mark.slow
def test_judge_all_scores_several_items_per_decode_with_the_same_verdicts(lm, data_root):
    examples = datasets.load("sts2012-msrpar", root=data_root)
    train = [e for e in examples if e.meta["split"] == "train"]
    test = [e for e in examples if e.meta["split"] == "test"][:9]
    judge = make_judge("rubric", lm, train=train, label_range=(0, 5), params={"k": 2})
    one_by_one = [judge(e) for e in test]
    batches = len(lm._batcher.batches)
    together = judge.judge_all(test)
    sizes = lm._batcher.batches[batches:]
    assert sum(sizes) == len(test) and max(sizes) == lm.batch_size == 3 and len(sizes) < len(test)
    for a, b in zip(together, one_by_one):
        assert a.parsed and b.parsed
        assert abs(a.score - b.score) <= 1e-3  # a score of 0-5: probabilities within ~1e-4 move it at most ~5e-4
        assert a.distribution == pytest.approx(b.distribution, abs=TOLERANCE)


def test_coalescer_batches_concurrent_requests_and_keeps_each_failure():
    seen: list[list[int]] = []

    def compute(requests: list[int]) -> list[int | Exception]:
        seen.append(list(requests))
        time.sleep(0.02)
        return [ValueError(f"bad {r}") if r == 5 else r * 10 for r in requests]

    coalescer = Coalescer(compute, size=3)
    results: dict[int, object] = {}

    def submit(r: int) -> None:
        try:
            results[r] = coalescer.submit(r)
        except ValueError as err:
            results[r] = str(err)

    threads = [threading.Thread(target=submit, args=(r,)) for r in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {r: ("bad 5" if r == 5 else r * 10) for r in range(12)}
    assert sorted(r for batch in seen for r in batch) == list(range(12))
    assert max(map(len, seen)) == 3 and len(seen) < 12
