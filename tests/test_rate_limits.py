"""A server that answers 429/503 gets a pause, whatever its Retry-After says: the client's own backoff is a floor
(a header of 0, a past date or a negative number never makes the retry immediate), every thread shares the pause,
and the run says that it waits, on which server and until when."""

from __future__ import annotations

import email.utils
import logging
import re
import time
from datetime import datetime

import pytest

from judgetune.lm import _remote
from judgetune.lm._batch import run_items
from judgetune.lm._remote import LMCallError, OpenAICompatibleClient, retry_after
from judgetune.lm._spec import parse_lm_spec
from judgetune.testing.fault_server import FaultServer, answer_for


def client(server: FaultServer, **kwargs) -> OpenAICompatibleClient:
    options = {"timeout": 2.0, "max_retries": 0} | kwargs
    return OpenAICompatibleClient(parse_lm_spec("openai/fake", api_base=server.base_url), **options)


def ask(c: OpenAICompatibleClient, item: str) -> str:
    return c.complete([{"role": "user", "content": item}], max_tokens=4).text


def _no_pause_headers() -> dict[str, str]:
    return {"zero": "0", "past date": email.utils.formatdate(time.time() - 3600, usegmt=True), "negative": "-5"}


@pytest.mark.parametrize("kind", ["zero", "past date", "negative"])
def test_a_retry_after_asking_for_no_pause_never_removes_the_backoff_floor(kind):
    header = _no_pause_headers()[kind]
    assert retry_after(header) == 0.0
    with FaultServer(fault_rate=1.0, faults=("429",), retry_after=header) as server:
        c = client(server, backoff=0.05, max_backoff=0.2, rate_limit_wait=2.0)
        with pytest.raises(LMCallError, match=r"rate limited for 2 s, --rate-limit-wait"):
            ask(c, "q")
    gaps = [b - a for a, b in zip(server.arrivals, server.arrivals[1:])]
    assert min(gaps) >= 0.05 - 0.005  # never sooner than the floor
    assert 5 <= len(server.log) <= 16  # waits of 0.05, 0.1, then 0.2-0.25 s: about 11 in 2 s (thousands without)


@pytest.mark.parametrize("kind", ["zero", "past date", "negative"])
def test_with_the_default_backoff_eight_threads_send_a_few_requests_a_second(kind):
    """The CLI's default concurrency (8) and the client's default backoff (0.5 s, doubling): past the first burst,
    the server answering 429 is probed by one request at a time, after a growing pause every thread shares."""
    with FaultServer(fault_rate=1.0, faults=("429",), retry_after=_no_pause_headers()[kind]) as server:
        c = client(server, rate_limit_wait=2.5)
        start = time.monotonic()
        outcomes = run_items(lambda item: ask(c, item), [f"q{i}" for i in range(8)], concurrency=8)
        took = time.monotonic() - start
    assert not any(o.ok for o in outcomes)
    assert all(re.search(r"rate limited for 2.5 s|outlasts this call's --rate-limit-wait 2.5 s", o.error)
               for o in outcomes)
    later = [at for at in server.arrivals if at - start > 0.3]  # past the first burst of at most 8
    assert len(server.log) <= 8 + 3 and len(later) <= 3  # a probe about every 0.75 s, then 1.25 s, ...
    assert took < 4  # a call whose pause would outlast --rate-limit-wait gives up without sending


def test_the_pause_ends_when_the_server_takes_requests_again():
    with FaultServer(fault_rate=0.5, faults=("429", "503"), retry_after="0", seed=2) as server:
        c = client(server, backoff=0.01, max_backoff=0.05)
        items = [f"q{i}" for i in range(24)]
        outcomes = run_items(lambda item: ask(c, item), items, concurrency=4)
    assert [o.value for o in outcomes] == [answer_for(i) for i in items]
    assert sum(outcome != "ok" for _, outcome in server.log) >= 8  # the storm happened


def test_a_pause_longer_than_the_users_bound_stops_later_calls_without_a_request():
    with FaultServer(fault_rate=1.0, faults=("429",), retry_after=3600) as server:
        c = client(server, rate_limit_wait=600)
        with pytest.raises(LMCallError, match=r"the server asked to wait 3600 s, more than --rate-limit-wait 600"):
            ask(c, "first")
        start = time.monotonic()
        with pytest.raises(LMCallError, match=r"not sent: the server answered 429/503 and its pause outlasts this "
                                              r"call's --rate-limit-wait 600 s \(it ends in 3600 s\)") as err:
            ask(c, "second")
        assert time.monotonic() - start < 1 and len(server.log) == 1
    assert _remote.classify(err.value) == "overload"


def test_waiting_out_a_429_says_so_naming_the_server_why_and_until_when(monkeypatch, caplog):
    """An unreadable Retry-After (here the key itself, echoed back): one warning names the host and port, the
    status, the header (redacted) and the clock time the next request goes, then at most one per notice period."""
    key = "sk-test-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    with FaultServer(fault_rate=1.0, faults=("429",), retry_after=key) as server:
        port = server.base_url.split(":")[2].split("/")[0]
        c = client(server, backoff=0.05, max_backoff=0.1, rate_limit_wait=1.5)
        with caplog.at_level(logging.WARNING, logger="judgetune.lm._remote"), pytest.raises(LMCallError):
            ask(c, "q")
        notices = [r.getMessage() for r in caplog.records if "waiting until" in r.getMessage()]
        assert len(notices) == 1 and len(server.log) > 5  # one line, though the server was asked again and again
        line = notices[0]
        assert line.startswith(f"127.0.0.1:{port} answered HTTP 429 (Retry-After '[redacted]', unreadable): waiting "
                               "until ") and key not in line and "\n" not in line
        until = re.search(r"waiting until (\d\d:\d\d:\d\d) \(([\d.]+) s\) before the next request", line)
        assert until and 0.05 <= float(until.group(2)) <= 0.2
        clock = datetime.strptime(until.group(1), "%H:%M:%S").time()
        assert abs(datetime.combine(datetime.now().date(), clock).timestamp() - time.time()) < 3
        assert "--rate-limit-wait 1.5 s" in line

        caplog.clear()
        monkeypatch.setattr(_remote, "WAIT_NOTICE_SECONDS", 0.5)
        c = client(server, backoff=0.05, max_backoff=0.1, rate_limit_wait=1.6)
        with caplog.at_level(logging.WARNING, logger="judgetune.lm._remote"), pytest.raises(LMCallError):
            ask(c, "q")
    notices = [r.getMessage() for r in caplog.records if "waiting until" in r.getMessage()]
    assert 2 <= len(notices) <= 4  # about 1.6 s / 0.5 s, never one per request
    assert "rate limited for 1 s so far" in notices[-1] or "rate limited for 2 s so far" in notices[-1]


def test_evaluate_takes_the_rate_limit_wait_its_notices_name(tmp_path, run_cli):
    data = tmp_path / "d.csv"
    data.write_text("answer,reference,label\n" + "".join(f"a{i},r{i},{i % 3}\n" for i in range(4)))
    with FaultServer(fault_rate=1.0, faults=("429",), retry_after=1) as server:
        start = time.monotonic()
        code, _, err = run_cli(["evaluate", "--judge", "rubric", "--lm", "openai/m", "--api-base", server.base_url,
                                "--data", str(data), "--rate-limit-wait", "3", "--timeout", "2", "--resamples", "20"])
    assert code == 3 and "rate limited for 3 s, --rate-limit-wait" in err, err
    assert time.monotonic() - start < 120  # bounded by the wait asked for, not the default 600 s per item


def test_a_hanging_server_is_said_between_attempts_not_waited_on_in_silence(caplog):
    with FaultServer(fault_rate=1.0, faults=("timeout",), hang=1.5) as server:
        with caplog.at_level(logging.WARNING, logger="judgetune.lm._remote"), pytest.raises(LMCallError):
            ask(client(server, timeout=0.5, max_retries=2, backoff=0.01), "item")
    notices = [r.getMessage() for r in caplog.records if "no answer in" in r.getMessage()]
    assert notices == [f"openai/fake at {server.base_url}: no answer in 0.5 s (--timeout), attempt 1 of 3; trying again"]


@pytest.mark.parametrize("command", [["evaluate", "--no-cache"], ["tune", "--trials", "1", "--search-items", "4",
                                                                  "--dev-items", "4", "--test-items", "4"]])
def test_evaluate_and_tune_keep_to_the_rps_they_are_given(tmp_path, run_cli, monkeypatch, command):
    """--rps bounds every command that calls a server, not only score: requests start at least 1/rps apart."""
    from _kits import jsonl
    from _kits import length_rows as rows

    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    data = jsonl(tmp_path / "d.jsonl", rows(40))
    with FaultServer() as server:
        code, _, err = run_cli([command[0], "--judge", "rubric", "--data", str(data), "--lm", "openai/m", "--api-base",
                                server.base_url, "--rps", "20", "--concurrency",
                                "4", *command[1:], *(["--runs-dir", str(tmp_path / "runs")] * (command[0] == "tune"))])
    arrivals = sorted(server.arrivals)
    assert code in (0, 3) and "unrecognized" not in err, err  # the echo server's answers hold no label: 3 is fine
    assert len(arrivals) >= 6
    assert arrivals[-1] - arrivals[0] >= 0.8 * (len(arrivals) - 1) / 20  # paced (unpaced, 4 threads far outrun it)
