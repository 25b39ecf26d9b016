"""Target-token log-probabilities read in float32 with float64 sums (``_token_logprobs``) give the numbers of the
all-float64 pass they replaced: on random logits, and on the embedded model's label distributions (a two-token
label read along its path) and likelihood targets."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

from judgetune.lm import _llamacpp  # noqa: E402

TOLERANCE = 1e-6  # nats
SYSTEM = {"role": "system", "content": "Rate how close in meaning the two sentences are, from 1 to 10."}
PAIRS = [("The cat sat on the mat.", "A cat was sitting on the mat."),
         ("Stocks fell sharply on Monday after the report.", "On Monday shares dropped steeply."),
         ("He said the plan was dead.", "The weather was fine all week."),
         ("Officials confirmed 12 deaths in the storm.", "Twelve people died in the storm, officials said.")]
LABELS = [str(v) for v in range(1, 11)]  # "10" is two tokens: its second is scored by _token_logprobs


def float64_token_logprobs(rows: np.ndarray, tokens: list[int]) -> np.ndarray:
    """The implementation before: every row copied to float64."""
    z = rows.astype(np.float64)
    top = z.max(axis=1, keepdims=True)
    return z[np.arange(len(tokens)), tokens] - (top[:, 0] + np.log(np.exp(z - top).sum(axis=1)))


@pytest.mark.parametrize("vocab", [49152, 151936])  # SmolLM2's and Qwen2.5's vocabularies
def test_equals_the_float64_pass_on_random_logits(vocab):
    rng = np.random.default_rng(vocab)
    rows = (rng.standard_normal((16, vocab)) * 4).astype(np.float32)
    rows[3, 7] = 40.0  # a peaked row
    tokens = [int(t) for t in rng.integers(0, vocab, 16)]
    tokens[3] = 7
    assert np.abs(_llamacpp._token_logprobs(rows, tokens) - float64_token_logprobs(rows, tokens)).max() < TOLERANCE


def test_label_distributions_and_targets_unchanged_on_the_model(uncached_lm, monkeypatch):
    requests = [([SYSTEM, {"role": "user", "content": f"Sentence 1: {a}\nSentence 2: {b}"}], LABELS, "Score: ")
                for a, b in PAIRS]
    targets = [(uncached_lm.chat_prompt([{"role": "system", "content": "Say it in other words."},
                                         {"role": "user", "content": a}]), b) for a, b in PAIRS]

    def scores() -> tuple[np.ndarray, list[np.ndarray]]:
        labels = [o.value.logprobs for o in uncached_lm.label_distributions(requests)]
        return np.array(labels), [np.array(o.value.logprobs) for o in uncached_lm.target_logprobs(targets)]

    labels, tokens = scores()
    monkeypatch.setattr(_llamacpp, "_token_logprobs", float64_token_logprobs)
    labels_before, tokens_before = scores()
    assert np.isfinite(labels).all() and np.abs(labels - labels_before).max() < TOLERANCE
    assert max(np.abs(a - b).max() for a, b in zip(tokens, tokens_before)) < TOLERANCE
