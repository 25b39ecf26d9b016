"""Scoring modes against real servers: llama.cpp's OpenAI-compatible server on the embedded GGUF,
behind a proxy on 127.0.0.1 that strips log-probabilities (this llama-cpp-python returns them even
without --logits_all, so the proxy stands for the servers that give none)."""

from __future__ import annotations

import json
import logging
import math
import os

import numpy as np
import pytest

os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

from judgetune import datasets  # noqa: E402
from judgetune.cli import main  # noqa: E402
from judgetune.judges import make_judge  # noqa: E402
from judgetune.judges._sampling import parse_label  # noqa: E402
from judgetune.lm import LogprobsUnavailableError, load_lm, resolve_scoring_mode  # noqa: E402
from judgetune.lm._remote import request_body  # noqa: E402
from judgetune.lm._spec import parse_lm_spec  # noqa: E402
from judgetune.testing import FaultServer  # noqa: E402

# llama.cpp samples like OpenAI's API: temperature only (no top-k or min-p cut), so a sampled label's
# probability is the model's, tempered.
PLAIN_SAMPLING = {"top_k": 0, "min_p": 0.0}


@pytest.fixture(scope="module")
def no_logprobs(llama_server):
    """The same server without log-probabilities."""
    with FaultServer(upstream=llama_server.base_url, logprobs=False, overrides=PLAIN_SAMPLING) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def msrpar(data_root):
    examples = datasets.load("sts2012-msrpar", root=data_root)
    return ([e for e in examples if e.meta["split"] == "train"], [e for e in examples if e.meta["split"] == "test"][:4])


def remote(server, url, **kwargs):
    return load_lm(f"openai/{server.model}", api_base=url, use_cache=False, **kwargs)


def test_parse_label_reads_the_label_after_the_marker():
    labels = ["1", "2", "10", "pass", "partially pass"]
    assert parse_label("[[ ## score ## ]]\n10\n\n[[ ## completed ## ]]", "score", labels) == "10"
    assert parse_label("[[ ## score ## ]]\n2/5", "score", labels) == "2"
    assert parse_label("[[ ## score ## ]]\n11", "score", labels) is None  # not "1"
    assert parse_label("Partially pass.", "score", labels) == "partially pass"  # no marker: the whole answer
    assert parse_label("[[ ## reasoning ## ]]\n1 reason\n[[ ## score ## ]]\n pass", "score", labels) == "pass"
    assert parse_label("[[ ## score ## ]]\nexcellent", "score", labels) is None


def test_reasoning_models_get_no_parameters_they_reject():
    messages = [{"role": "user", "content": "hi"}]
    for name in ("o1", "o3-mini", "o4-mini", "gpt-5", "gpt-5-mini"):
        body = request_body(parse_lm_spec(f"openai/{name}"), messages, max_tokens=24, temperature=0.7,
                            stop=["x"], top_logprobs=20, seed=1)
        assert set(body) == {"model", "messages", "max_completion_tokens", "seed"}, name
        assert body["max_completion_tokens"] >= 24
    body = request_body(parse_lm_spec("openai/gpt-4o-mini"), messages, max_tokens=24, temperature=0.7, top_logprobs=5)
    assert body["max_tokens"] == 24 and "max_completion_tokens" not in body  # llama.cpp ignores the latter
    assert body["temperature"] == 0.7 and body["top_p"] == 1.0 and body["top_logprobs"] == 5
    assert request_body(parse_lm_spec("openai/m", reasoning=True), messages, max_tokens=8).keys() == {
        "model", "messages", "max_completion_tokens"}


def test_probe_picks_sampled_without_logprobs_and_logprobs_with(llama_server, no_logprobs, caplog):
    caplog.set_level(logging.WARNING)
    plain = remote(llama_server, no_logprobs.base_url)
    assert resolve_scoring_mode(plain, None) == "sampled"
    assert resolve_scoring_mode(plain, None) == "sampled"
    said = [r.getMessage() for r in caplog.records if "scoring mode" in r.getMessage()]
    assert len(said) == 1 and "returned no top_logprobs" in said[0]  # once, with the reason
    assert len(no_logprobs.log) == 1  # one probe per LM
    assert resolve_scoring_mode(remote(llama_server, llama_server.base_url), None) == "logprobs"
    with pytest.raises(LogprobsUnavailableError) as info:
        resolve_scoring_mode(plain, "logprobs")
    message = str(info.value)
    assert f"openai/{llama_server.model}" in message and no_logprobs.base_url in message
    assert "scoring_mode='sampled'" in message and "scoring_mode='generate'" not in message


@pytest.mark.slow
def test_sampled_and_parsed_agree_with_the_in_process_judge(llama_server, no_logprobs, msrpar, embedded_lm):
    """Sampled at temperature 0.5, a label's probability is the in-process one squared, renormalized
    over the labels (tempering; sampling is temperature-only here). The mean of the m parsed labels
    then has standard error sd/sqrt(m); each item must fall within 3.5 of them (two-sided p 0.0005,
    so 4 items fail by chance about once in 500 runs). Measured on 6 items with n=8: |z| <= 1.25.
    Greedy parsing must give the in-process argmax wherever it leads by more than 0.05."""
    train, test = msrpar
    exact = make_judge("rubric", embedded_lm, train=train, label_range=(0, 5), params={"k": 2})
    lm = remote(llama_server, no_logprobs.base_url)
    sampled = make_judge("rubric", lm, train=train, label_range=(0, 5),
                         params={"k": 2, "n_samples": 4, "temperature": 0.5})
    parsed = make_judge("rubric", lm, train=train, label_range=(0, 5),
                        params={"k": 2, "scoring_mode": "parsed"})
    assert sampled.params["scoring_mode"] == "sampled"  # probed
    for example in test:
        truth, drawn, one = exact(example), sampled(example), parsed(example)
        assert drawn.parsed and one.parsed, (drawn.raw, one.raw)
        assert drawn.usage["calls"] == 4 and one.usage["calls"] == 1 and drawn.usage["completion_tokens"] > 0
        labels = list(truth.distribution)
        values = np.array([float(label) for label in labels])
        tempered = np.array([truth.distribution[label] for label in labels]) ** 2
        tempered /= tempered.sum()
        mean, sd = float(tempered @ values), float(math.sqrt(tempered @ (values - tempered @ values) ** 2))
        counts, m = drawn.detail["counts"], drawn.detail["parsed_answers"]
        observed = sum(float(label) * c for label, c in counts.items()) / m
        assert abs(observed - mean) <= 3.5 * sd / math.sqrt(m), (observed, mean, sd, m)
        # the smoothed expected value is the observed mean pulled toward the labels' mean by alpha
        alpha = drawn.detail["alpha"]
        assert drawn.score == pytest.approx((m * observed + alpha * values.sum()) / (m + alpha * len(labels)))
        ranked = sorted(truth.distribution.values(), reverse=True)
        if ranked[0] - ranked[1] > 0.05:
            assert one.score == float(max(truth.distribution, key=truth.distribution.get))


@pytest.mark.slow
def test_faults_lose_nothing_and_score_nothing_in_the_new_modes(llama_server, msrpar):
    train, test = msrpar
    with FaultServer(upstream=llama_server.base_url, logprobs=False, overrides=PLAIN_SAMPLING) as clean:
        judge = make_judge("rubric", remote(llama_server, clean.base_url), train=train, label_range=(0, 5),
                           params={"k": 2, "scoring_mode": "parsed"})
        reference = [v.score for v in judge.judge_all(test)]
    with FaultServer(upstream=llama_server.base_url, logprobs=False, overrides=PLAIN_SAMPLING, fault_rate=0.4, hang=4,
                     seed=5) as faulty:
        lm = remote(llama_server, faulty.base_url, max_retries=1, timeout=3)
        for mode, params in (("parsed", {}), ("sampled", {"n_samples": 2, "temperature": 0.5})):
            judge = make_judge("rubric", lm, train=train, label_range=(0, 5),
                               params={"k": 2, "scoring_mode": mode, **params})
            verdicts = judge.judge_all(test)
            assert len(verdicts) == len(test)  # nothing lost
            for verdict, expected in zip(verdicts, reference):
                if verdict.parsed:
                    if mode == "parsed":
                        assert verdict.score == expected  # a retried answer is the same answer
                else:  # failed calls are failures with their reason, never a number
                    assert verdict.score is None and "gave up after 2 attempts" in verdict.raw
    outcomes = {outcome for _, outcome in faulty.log}
    assert "ok" in outcomes and len(outcomes) >= 3


@pytest.mark.slow
def test_evaluate_and_tune_end_to_end_without_logprobs(llama_server, no_logprobs, data_root, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(data_root))
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    lm = ["--lm", f"openai/{llama_server.model}", "--api-base", no_logprobs.base_url]
    code = main(["evaluate", "--judge", "rubric", "--data", "sts2012-msrpar", *lm, "--limit", "2", "--param", "k=2",
                 "--param", "n_samples=2", "--param", "temperature=0.5", "--resamples", "50", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["judge"]["params"]["scoring_mode"] == "sampled"
    code = main(["tune", "--judge", "rubric", "--data", "sts2012-msrpar", *lm, "--runs-dir", str(tmp_path / "runs"),
                 "--run", "nolp", "--trials", "1", "--search-items", "4", "--dev-items", "4", "--test-items", "2",
                 "--gate-items", "8", "--also", "none",  # the LM judge's own run: no other family's default
                 "--fix", "k=2", "--fix", "reasoning=false", "--fix", "n_samples=2", "--fix", "temperature=0.5", "--json"])
    assert code == 0, capsys.readouterr().err
    config = json.loads((tmp_path / "runs" / "nolp" / "judge.json").read_text())
    assert config["params"]["scoring_mode"] == "sampled" and config["params"]["n_samples"] == 2
    assert "scoring_mode" in (tmp_path / "runs" / "nolp" / "report.html").read_text()
