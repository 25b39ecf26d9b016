"""Scoring against servers as users run them: Retry-After honoured and rate limits waited out (within a bound the
user sets), a requests-per-second cap, token totals per run, and a token budget that stops before it is passed."""

from __future__ import annotations

import json
import re
import time
from collections import defaultdict

import pytest

from judgetune.lm import load_lm
from judgetune.lm._remote import LMCallError, OpenAICompatibleClient, retry_after
from judgetune.lm._spec import parse_lm_spec
from judgetune.testing.fault_server import FaultServer, answer_for


def client(server: FaultServer, **kwargs) -> OpenAICompatibleClient:
    options = {"timeout": 2.0, "max_retries": 0, "backoff": 0.01} | kwargs
    return OpenAICompatibleClient(parse_lm_spec("openai/fake", api_base=server.base_url), **options)


def ask(c: OpenAICompatibleClient, item: str) -> str:
    return c.complete([{"role": "user", "content": item}], max_tokens=4).text


def _attempts(server: FaultServer) -> dict[str, list[tuple[float, str]]]:
    by_item = defaultdict(list)
    for (item, outcome), at in zip(server.log, server.arrivals):
        by_item[item].append((at, outcome))
    return by_item


def test_a_429_storm_costs_no_item_and_each_retry_waits_what_retry_after_asks():
    from judgetune.lm._batch import run_items

    items = [f"q{i}" for i in range(16)]
    with FaultServer(fault_rate=0.6, faults=("429",), retry_after=0.1, seed=4) as server:
        c = client(server)  # no retries of faults at all: only the rate limit is waited out
        outcomes = run_items(lambda item: ask(c, item), items, concurrency=6)
    assert [o.value for o in outcomes] == [answer_for(i) for i in items]
    limited = 0
    for tries in _attempts(server).values():
        for (at, outcome), (after, _) in zip(tries, tries[1:]):
            assert outcome == "429"
            assert after - at >= 0.1 - 0.01  # never sooner than the server asked
            limited += 1
    assert limited >= 8  # the storm happened (about 0.6 / 0.4 * 16 = 24 expected)
    assert c.usage == {"prompt_tokens": 5 * 16, "completion_tokens": 16, "requests": 16}  # the server's counts


def test_a_rate_limit_without_retry_after_is_waited_out_past_the_fault_retries():
    with FaultServer(fault_rate=0.7, faults=("503",), seed=1) as server:
        c = client(server, max_retries=0)
        assert [ask(c, f"q{i}") for i in range(8)] == [answer_for(f"q{i}") for i in range(8)]
    assert sum(outcome == "503" for _, outcome in server.log) >= 8


def test_a_rate_limit_longer_than_the_users_bound_fails_the_item_in_that_time():
    with FaultServer(fault_rate=1.0, faults=("429",), retry_after=0.15) as server:
        c = client(server, rate_limit_wait=0.5)
        start = time.monotonic()
        with pytest.raises(LMCallError, match=r"rate limited for 0.5 s, --rate-limit-wait"):
            ask(c, "q")
        took = time.monotonic() - start
    assert 0.3 <= took < 3 and 3 <= len(server.log) <= 5


def test_requests_per_second_are_capped_across_threads():
    from judgetune.lm._batch import run_items

    with FaultServer() as server:
        c = client(server, rps=20)
        start = time.monotonic()
        run_items(lambda item: ask(c, item), [f"q{i}" for i in range(12)], concurrency=6)
        took = time.monotonic() - start
    # a request is never sent before its slot but may be sent late (a loaded machine), so any 5 arrivals
    # span at least 4 slots less one lateness (allowed 0.1 s); uncapped, 6 threads send 5 in a few ms
    arrivals = sorted(server.arrivals)
    spans = [b - a for a, b in zip(arrivals, arrivals[4:])]
    assert took >= 11 / 20 - 0.02 and min(spans) >= 4 / 20 - 0.1


def test_retry_after_reads_seconds_and_http_dates():
    import email.utils

    assert retry_after("3") == 3.0 and retry_after("0.5") == 0.5 and retry_after(None) is None
    assert retry_after("soon") is None
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retry_after(later) <= 31


def _rubric_judge(server, tmp_path):
    from judgetune.config import JudgeConfig
    from judgetune.judges import make_judge

    lm = load_lm(f"openai/{server.model}", api_base=server.base_url, use_cache=False)
    judge = make_judge("rubric", lm, train=[], label_range=(1.0, 5.0), params={"k": 0, "scoring_mode": "logprobs"})
    spec = parse_lm_spec(f"openai/{server.model}", api_base=server.base_url).to_dict()
    path = JudgeConfig.from_judge(judge, lm=spec, calibrator=None, label_range=(1.0, 5.0)).save(tmp_path / "judge.json")
    items = [{"id": f"i{n}", "question": q, "answer": a, "reference": r} for n, (q, a, r) in enumerate([
        ("What is the capital of France?", "Paris.", "Paris is the capital of France."),
        ("What is 2+2?", "5", "4"),
        ("Who wrote Hamlet?", "Shakespeare wrote it.", "William Shakespeare."),
        ("What color is the sky?", "Green.", "Blue on a clear day."),
        ("How many legs has a spider?", "Eight.", "Eight legs."),
        ("What is water made of?", "Hydrogen and oxygen.", "H2O: hydrogen and oxygen."),
    ])]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    return path, data


@pytest.mark.slow
def test_a_token_budget_stops_before_it_is_passed_keeps_the_rows_and_resumes(llama_server, tmp_path, run_cli,
                                                                               monkeypatch):
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))  # every call reaches the server
    config, data = _rubric_judge(llama_server, tmp_path)
    out = tmp_path / "scored.jsonl"
    base = ["score", "--config", str(config), "--data", str(data), "--out", str(out), "--chunk-size", "6",
            "--prompt-price", "2", "--completion-price", "8"]
    code, _, err = run_cli([*base, "--max-tokens", "1000"])
    assert code == 2 and "--max-tokens: stopped before the budget would be passed" in err
    spent = _tokens(err)
    assert 0 < sum(spent) <= 1000
    kept = (tmp_path / "scored.jsonl.part" / "rows.jsonl").read_text().splitlines()
    assert 0 < len(kept) < 6 and not out.exists()
    code, stdout, err = run_cli(base)
    assert code == 0, err
    assert f"{len(kept)} kept from the interrupted run" in stdout
    assert [json.loads(r)["id"] for r in out.read_text().splitlines()] == [f"i{n}" for n in range(6)]
    prompt, completion = _tokens(err)
    assert prompt > spent[0] and f"cost {(prompt * 2 + completion * 8) / 1e6:.4f}" in err


def _tokens(text: str) -> list[int]:
    found = re.search(r"tokens: ([\d,]+) prompt \+ ([\d,]+) completion", text)
    assert found, text
    return [int(n.replace(",", "")) for n in found.groups()]


def test_a_server_failing_every_call_trips_the_circuit_breaker():
    """Calls that fail after all their retries, 8 in a row, stop the client: every later call raises the
    one unusable-server error at once (no more requests), which stops a run (resumable) in one line. A success in
    between resets the count."""
    from judgetune.lm import ServerUnreachableError
    from judgetune.lm._remote import FAILED_CALLS_TO_STOP

    with FaultServer(fault_rate=1.0, faults=("500",)) as server:
        c = client(server, max_retries=1)
        for i in range(FAILED_CALLS_TO_STOP - 1):
            with pytest.raises(LMCallError):
                ask(c, f"q{i}")
        with pytest.raises(LMCallError):
            ask(c, "last")
        sent = len(server.log)
        assert sent == 2 * FAILED_CALLS_TO_STOP  # each call: one try and one retry
        with pytest.raises(ServerUnreachableError, match=r"8 calls in a row failed after their retries .* resumable"):
            ask(c, "after")
        assert len(server.log) == sent  # nothing more was sent
    with FaultServer(fault_rate=0.5, faults=("500",), seed=3) as server:  # a flaky server never trips it
        c = client(server, max_retries=0)
        outcomes = []
        for i in range(40):
            try:
                outcomes.append(ask(c, f"q{i}") is not None)
            except ServerUnreachableError:
                raise
            except LMCallError:
                outcomes.append(False)
        assert any(outcomes) and not all(outcomes)


def test_a_retry_after_beyond_the_users_bound_fails_at_once_saying_what_the_server_asked():
    """A 429 whose Retry-After (3600 s) exceeds --rate-limit-wait fails the call at once, and the
    message says the server asked for 3600 s (not that the call was rate limited for the whole bound)."""
    with FaultServer(fault_rate=1.0, faults=("429",), retry_after=3600) as server:
        c = client(server, rate_limit_wait=600)
        start = time.monotonic()
        with pytest.raises(LMCallError, match=r"the server asked to wait 3600 s, more than --rate-limit-wait 600 "
                                              r"allows") as err:
            ask(c, "q")
        assert time.monotonic() - start < 2 and "rate limited for 600 s" not in str(err.value)
