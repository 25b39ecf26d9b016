"""Remote endpoints under injected faults: bounded retries, nothing lost, nothing silently scored."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest

from judgetune.lm._batch import run_items
from judgetune.lm._remote import LMCallError, OpenAICompatibleClient
from judgetune.lm._spec import parse_lm_spec
from judgetune.testing.fault_server import FAULTS, FaultServer, answer_for


def client(server: FaultServer, **kwargs) -> OpenAICompatibleClient:
    options = {"timeout": 0.3, "max_retries": 2, "backoff": 0.01} | kwargs
    return OpenAICompatibleClient(parse_lm_spec("openai/fake", api_base=server.base_url), **options)


def ask(c: OpenAICompatibleClient, item: str) -> str:
    return c.complete([{"role": "user", "content": item}], max_tokens=4).text


@pytest.mark.parametrize("fault,reason", [
    ("500", "HTTP 500"), ("timeout", "timed out"), ("malformed", "invalid JSON"),
    ("truncated", "(?i)connection error|invalid JSON"), ("empty", "no choices")])
def test_each_fault_is_retried_then_reported(fault, reason):
    with FaultServer(fault_rate=1.0, faults=(fault,), hang=1.0) as server:
        with pytest.raises(LMCallError, match=reason) as info:
            ask(client(server), "item")
    assert "gave up after 3 attempts" in str(info.value)
    assert server.log == [("item", fault)] * 3


def test_permanent_error_is_not_retried():
    with FaultServer(fault_rate=1.0, faults=("400",)) as server:
        with pytest.raises(LMCallError, match="HTTP 400"):
            ask(client(server), "item")
    assert len(server.log) == 1


def test_a_fault_then_success_answers_the_item():
    with FaultServer(fault_rate=0.5, faults=("500",), seed=3) as server:
        c = client(server, max_retries=10)
        assert [ask(c, f"q{i}") for i in range(20)] == [answer_for(f"q{i}") for i in range(20)]
    assert any(outcome == "500" for _, outcome in server.log)


def test_thousand_requests_with_20_percent_faults_lose_nothing():
    items = [f"item-{i}" for i in range(1000)]
    # a client timeout well above an answer's time under load (at 0.3 s, answers that arrived after the client had
    # given up were retried by the dozen on a busy CI machine; at 1.5 s, one in 1000 was)
    with FaultServer(fault_rate=0.2, hang=2.5, seed=7) as server:
        c = client(server, max_retries=2, timeout=1.5)
        outcomes = run_items(lambda item: ask(c, item), items, concurrency=16)
    assert [o.index for o in outcomes] == list(range(1000))
    attempts = defaultdict(list)
    for item, outcome in server.log:
        attempts[item].append(outcome)
    assert set(attempts) == set(items)
    late = 0  # an answer that came after the client had given up (a starved server thread) is asked again
    for item, outcome in zip(items, outcomes):
        tries = attempts[item]
        if outcome.ok:
            assert outcome.value == answer_for(item) and tries[-1] == "ok"
            late += tries.count("ok") > 1
        else:  # failed only when none of its 3 attempts answered in time, and says which
            assert len(tries) == 3 and all(t in FAULTS or t == "ok" for t in tries)
            assert outcome.error and "gave up after 3 attempts" in outcome.error
            late += "ok" in tries  # an answer that came after the client had given up (CI saw one) is no answer
    failed = sum(not o.ok for o in outcomes)
    assert 0 < failed < 30  # about 1000 * 0.2**3 = 8 expected
    assert late <= 10  # rare, and only on a busy machine (one in 1000 was seen in CI): never the rule
    assert {t for tries in attempts.values() for t in tries} == {"ok", *FAULTS}


def test_concurrency_runs_requests_in_parallel():
    items = [f"q{i}" for i in range(32)]
    # 0.1 s a request: the ratio stays above 4 unless handling a request costs 75 ms of overhead (load 10)
    with FaultServer(latency=0.1) as server:
        c = client(server, timeout=5)
        start = time.perf_counter()
        run_items(lambda item: ask(c, item), items, concurrency=1)
        serial = time.perf_counter() - start
        start = time.perf_counter()
        outcomes = run_items(lambda item: ask(c, item), items, concurrency=16)
        parallel = time.perf_counter() - start
    assert all(o.ok for o in outcomes)
    assert serial / parallel > 4  # the 10x figure is measured in benchmarks/lm_throughput.py


def test_judge_lm_runs_items_with_its_concurrency(tmp_path):
    from judgetune.lm import ResponseCache, load_lm

    with FaultServer(fault_rate=1.0, faults=("400",)) as server:
        lm = load_lm("openai/m", api_base=server.base_url, cache=ResponseCache(tmp_path), concurrency=4)
        outcomes = lm.run(lambda item: lm.generate([{"role": "user", "content": item}], top_logprobs=1), ["a", "b"])
    assert lm.concurrency == 4
    assert [(o.index, o.ok) for o in outcomes] == [(0, False), (1, False)]
    assert all("HTTP 400" in o.error for o in outcomes)


def test_a_judge_keeps_items_whose_server_calls_failed_as_counted_failures():
    from judgetune.datasets import Example, Reference
    from judgetune.judges import RubricJudge
    from judgetune.lm import load_lm

    examples = [Example(id=str(i), answer=f"a{i}", references=(Reference("r"),), label=1.0) for i in range(4)]
    with FaultServer(fault_rate=1.0, faults=("500",)) as server:
        for reasoning in (False, True):  # label reading and generation both go to the server
            # a client per pass: one client would reach the circuit breaker's 8 failed calls in a row (a probe and 8
            # items) in the second pass, stopping it or not by how its concurrent calls interleave
            lm = load_lm("openai/m", api_base=server.base_url, use_cache=False, max_retries=0)
            verdicts = RubricJudge(lm, reasoning=reasoning).judge_all(examples)
            assert [v.parsed for v in verdicts] == [False] * 4
            assert all("500" in v.raw for v in verdicts)
            # reading labels needs the label position first: its probe's failure is named in each item's failure
            assert all(("label-position probe failed" in v.raw) != reasoning for v in verdicts), verdicts[0].raw


def test_a_404_from_the_chat_endpoint_stops_at_once_naming_the_url(tmp_path, run_cli):
    from judgetune.lm._remote import ServerError

    with FaultServer(fault_rate=1.0, faults=("404",)) as server:
        with pytest.raises(ServerError, match=r"no chat endpoint there, or no model 'fake' \(HTTP 404: .*check "
                                              r"--api-base"):
            ask(client(server), "item")
        assert len(server.log) == 1  # not retried: no attempt can succeed at a wrong address
        data = tmp_path / "d.csv"
        data.write_text("answer,reference,label\n" + "".join(f"a{i},r{i},{i % 3}\n" for i in range(8)))
        code, out, err = run_cli(["evaluate", "--judge", "rubric", "--lm", "openai/m", "--api-base", server.base_url,
                                  "--data", str(data), "--limit", "2", "--timeout", "2"])
    assert code == 2 and "Traceback" not in err and "no chat endpoint there, or no model 'm'" in err, err
