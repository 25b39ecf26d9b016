"""A client for OpenAI-compatible chat endpoints (OpenAI, vLLM, llama.cpp server, Ollama).

Plain httpx (the openai SDK's per-call overhead caps what threads gain against a fast server),
with bounded retries. A server's errors are classified once, here (:func:`classify`):

- ``auth`` (401, 403): the key is missing, wrong or not allowed. Raises :class:`ServerAuthError`, which
  stops the command at the first call (never retried, never read as a missing feature);
- ``unreachable``: connections refused; after ``REFUSALS_TO_STOP`` refused attempts in a row the client
  raises :class:`ServerUnreachableError` and every later call fails at once;
- ``overload`` (429, 503): every thread pauses for the longer of the server's ``Retry-After`` and the client's
  own exponential backoff with jitter (a header of 0, a past date or a negative number never removes the
  backoff), and while the server keeps answering so, one request at a time probes it; a call gives up after
  ``rate_limit_wait`` seconds in all. A warning says, at most every ``WAIT_NOTICE_SECONDS``, that the run waits,
  on which server and until when;
- ``fault`` (other 5xx, 408, 409), timeouts and broken or empty bodies: retried ``max_retries`` times with
  exponential backoff and jitter; what still fails raises LMCallError for that item;
- ``unsupported`` (other 4xx: a parameter or endpoint the server does not take): LMCallError at once.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import httpx

from judgetune._endpoints import check_proxy, check_resolved
from judgetune.errors import ItemError, JudgetuneError, printable
from judgetune.lm._prefix import reported_usage
from judgetune.lm._spec import API_KEY_ENV, LMSpec

log = logging.getLogger(__name__)


class LMCallError(ItemError):
    """An LM call that failed for good (after retries, or on a permanent error such as a 400)."""


class ServerError(JudgetuneError):
    """The server cannot be used at all (not one item's failure): the command stops with this message."""


class ServerAuthError(ServerError):
    """The server refused the credentials (HTTP 401) or their rights (HTTP 403)."""


class ServerUnreachableError(ServerError):
    """Connections to the server were refused ``REFUSALS_TO_STOP`` times in a row."""


MAX_RESPONSE_BYTES = 64 << 20  # a chat answer is kilobytes; a server sending more is broken or hostile
REFUSALS_TO_STOP = 4  # refused connection attempts in a row (over any calls) before the client gives up
FAILED_CALLS_TO_STOP = 8  # calls in a row that failed after all their retries (a server failing everything) likewise
WAIT_NOTICE_SECONDS = 30.0  # a run waiting out a server's 429/503 says so at most this often


class _Transient(Exception):
    """A reply that is broken in a way a retry may fix (empty choices, unreadable body)."""


class _PausedPastDeadline(Exception):
    """The server's pause (after a 429/503) ends after the call's ``rate_limit_wait``: nothing more is sent."""

    def __init__(self, until: float):
        super().__init__(f"paused until {until}")
        self.until = until


@dataclass(frozen=True)
class Completion:
    """One chat answer. ``logprobs`` is OpenAI's per-token list, when asked for and given."""

    text: str
    finish_reason: str | None
    usage: dict[str, int] = field(default_factory=dict)
    logprobs: list[dict[str, Any]] | None = None


class StatusError(Exception):
    """An HTTP error status from the server (kept as the cause of an LMCallError)."""

    def __init__(self, status: int, body: str, retry_after: float | None = None, header: str | None = None):
        super().__init__(f"HTTP {status}: {printable(body[:300])}")  # a server's text, never raw to a terminal
        self.status = status
        self.retry_after = retry_after  # seconds the server asked to wait (its Retry-After), if it did
        self.header = header  # the Retry-After header as sent, if any


def classify(error: BaseException | None) -> str:
    """What kind of server error this is: ``auth``, ``unsupported``, ``overload``, ``fault``, ``unreachable``,
    ``timeout`` or ``broken`` (an unreadable or empty answer); the cause of an LMCallError is looked at."""
    if isinstance(error, LMCallError):
        error = error.__cause__
    if isinstance(error, _PausedPastDeadline):
        return "overload"
    if isinstance(error, ServerAuthError) or isinstance(error, StatusError) and error.status in (401, 403):
        return "auth"
    if isinstance(error, ServerUnreachableError) or isinstance(error, httpx.ConnectError):
        return "unreachable"
    if isinstance(error, StatusError):
        if error.status in (429, 503):
            return "overload"
        return "fault" if error.status >= 500 or error.status in (408, 409) else "unsupported"
    if isinstance(error, httpx.TimeoutException):
        return "timeout"
    return "broken"


def _is_transient(error: BaseException) -> bool:
    return classify(error) in ("overload", "fault", "timeout", "broken", "unreachable") and not isinstance(
        error, ServerError)


class OpenAICompatibleClient:
    """Chat completions against ``spec.api_base`` (OpenAI when None); the key comes from ``$OPENAI_API_KEY``.

    Args:
        timeout: seconds per attempt.
        max_retries: attempts after the first, for transient faults only.
        backoff: first wait in seconds; it doubles per retry (with jitter) up to ``max_backoff``. Under 429/503
            answers it is also the floor of every pause, whatever the server's ``Retry-After`` says.
        rps: at most this many requests per second (all threads together); None: no cap.
        rate_limit_wait: seconds one call may spend waiting out 429/503 answers before it fails.

    ``usage`` counts what the server reported spending: ``prompt_tokens``, ``completion_tokens``, ``requests``.
    """

    def __init__(self, spec: LMSpec, *, timeout: float = 60.0, max_retries: int = 3, backoff: float = 0.5,
                 max_backoff: float = 8.0, api_key_env: str = API_KEY_ENV, rps: float | None = None,
                 rate_limit_wait: float = 600.0, send_key: bool = True, withheld: str | None = None,
                 api_key: str | None = None, endpoint_named_by: str = "--api-base"):
        if spec.kind != "openai":
            raise ValueError(f"{spec} is not an openai/MODEL spec")
        if spec.api_base is not None:
            check_resolved(spec.api_base)  # a name that points at a link-local or metadata address
        check_proxy(spec.endpoint)  # a proxy from the environment would see every request, the bearer too
        self.spec = spec
        self.timeout = timeout
        self.max_retries, self.backoff, self.max_backoff = max_retries, backoff, max_backoff
        self.rps, self.rate_limit_wait = rps, rate_limit_wait
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "requests": 0}
        self._not_before = 0.0  # monotonic time before which no request starts (a pause after a 429/503)
        self._overloads = 0  # pauses in a row the server asked for (429/503); a request it takes resets it
        self._overloaded_since = 0.0  # monotonic time of the first of them
        self._last_notice = -WAIT_NOTICE_SECONDS  # monotonic time the last waiting notice was logged
        self._probe = threading.Lock()  # held by the one request in flight while the server is overloaded
        self._next_slot = 0.0  # the next request's start under --rps
        # a key of the caller's own (a dspy.LM's) goes to its endpoint; else the environment's, where it may go
        key = api_key if api_key is not None else os.environ.get(api_key_env) if send_key else None
        self.api_key_env = api_key_env
        self.withheld = withheld  # why the key is not sent (an endpoint the user did not name), or None
        self.endpoint_named_by = endpoint_named_by  # where the endpoint is set, for the advice in errors
        self._refusals = 0  # refused connection attempts in a row
        self._failed_calls = 0  # calls in a row that gave up after their retries (the circuit breaker)
        self._fatal: ServerError | None = None  # once set, every call raises it at once
        self._lock = threading.Lock()
        self._client = httpx.Client(base_url=spec.endpoint.rstrip("/") + "/", timeout=timeout,
                                    headers={"Authorization": f"Bearer {key}"} if key else {},
                                    limits=httpx.Limits(max_connections=64, max_keepalive_connections=64))

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int, temperature: float = 0.0,
                 stop: list[str] | None = None, top_logprobs: int | None = None, seed: int | None = None,
                 extra: dict[str, Any] | None = None) -> Completion:
        """One chat completion; ``top_logprobs`` asks for that many alternatives per answer token; ``extra``
        adds fields to the request body (``continue_final_message``).

        Raises:
            LMCallError: permanent errors at once, transient ones after the retries.
        """
        request = request_body(self.spec, messages, max_tokens=max_tokens, temperature=temperature, stop=stop,
                               top_logprobs=top_logprobs, seed=seed)
        request.update(extra or {})
        completion = self._call(self._attempt, request)
        if stop and "stop" not in request:  # a reasoning model got no stop strings: cut here instead
            cut = min((i for i in (completion.text.find(s) for s in stop) if i >= 0), default=len(completion.text))
            completion = Completion(completion.text[:cut], completion.finish_reason, completion.usage, completion.logprobs)
        return completion

    def complete_text(self, prompt: str, *, max_tokens: int, echo: bool = False,
                      logprobs: int | None = None) -> tuple[dict[str, Any], dict[str, int]]:
        """One call of the legacy text completions endpoint (``/completions``): the first choice and the usage.

        Raises:
            LMCallError: permanent errors at once (the StatusError as its cause), transient ones after the retries.
        """
        request: dict[str, Any] = {"model": self.spec.model, "prompt": prompt, "max_tokens": max_tokens,
                                   "temperature": 0.0, "echo": echo}
        if logprobs is not None:
            request["logprobs"] = logprobs
        return self._call(self._attempt_text, request)

    def _call(self, attempt, request: dict[str, Any]):
        """One call with its retries: faults ``max_retries`` times; rate limits (429/503) waited out for up to
        ``rate_limit_wait`` seconds in all (see ``_overloaded`` for how long each pause lasts)."""
        try:
            result = self._retried(attempt, request)
        except LMCallError as err:
            cause = err.__cause__
            if isinstance(cause, _PausedPastDeadline):
                raise  # nothing was sent: the server's state is unknown, the circuit breaker's count unchanged
            if not (isinstance(cause, (StatusError, _Transient, httpx.TransportError)) and _is_transient(cause)):
                self._failed_calls = 0  # the server answered (a request it does not take): it is not down
                raise
            with self._lock:
                self._failed_calls += 1
                if self._failed_calls >= FAILED_CALLS_TO_STOP and self._fatal is None:
                    self._fatal = ServerUnreachableError(
                        f"{self.spec} at {self.spec.endpoint}: {self._failed_calls} calls in a row failed after their "
                        f"retries (the last: {err}); stopping. The run is resumable: re-run the command once the server "
                        "answers")
            raise
        self._failed_calls = 0
        return result

    def _retried(self, attempt, request: dict[str, Any]):
        faults, attempts, overload = 0, 0, None
        deadline = time.monotonic() + self.rate_limit_wait
        while True:
            attempts += 1
            try:
                return self._guarded(attempt, request, deadline)
            except _PausedPastDeadline as late:
                raise self._late_error(overload, late.until, attempts - 1) from (overload or late)
            except (StatusError, _Transient, httpx.TransportError) as err:
                if not _is_transient(err):
                    raise LMCallError(f"{self.spec} at {self.spec.endpoint}: {_describe(err)}") from err
                if classify(err) == "overload":
                    overload, left = err, self._overloaded(err)
                    self._give_up_if_late(err, left, deadline, attempts)
                    self._say_waiting(err, left)
                    continue  # the next attempt waits out the pause (``_admit``)
                faults += 1
                if faults > self.max_retries:
                    raise LMCallError(f"{self.spec} at {self.spec.endpoint}: gave up after {attempts} attempts: "
                                      f"{_describe(err)}") from err
                if isinstance(err, httpx.TimeoutException):
                    self._say_timed_out(attempts)
                time.sleep(self._backoff(faults))

    def _late_error(self, err: StatusError | None, until: float, attempts: int) -> LMCallError:
        """The error of a call whose next request would start after its ``rate_limit_wait`` is up."""
        if err is None:  # this call sent nothing: the server's pause for every request outlasts it
            left = until - time.monotonic()
            ends = f" (it ends in {left:.0f} s)" if left >= 1 else ""
            return LMCallError(f"{self.spec} at {self.spec.endpoint}: not sent: the server answered 429/503 and its pause "
                               f"outlasts this call's --rate-limit-wait {self.rate_limit_wait:g} s{ends}: the server is "
                               "overloaded")
        return LMCallError(f"{self.spec} at {self.spec.endpoint}: gave up after {attempts} attempts (rate limited for "
                           f"{self.rate_limit_wait:g} s, --rate-limit-wait): {_describe(err)}")

    def _give_up_if_late(self, err: StatusError, wait: float, deadline: float, attempts: int) -> None:
        """Raise LMCallError when waiting ``wait`` more seconds would pass this call's ``rate_limit_wait``."""
        left = deadline - time.monotonic()
        if left > 0 and wait <= left:
            return
        asked = err.retry_after
        why = (f"the server asked to wait {asked:g} s, more than --rate-limit-wait {self.rate_limit_wait:g} allows"
               if asked is not None and asked > self.rate_limit_wait else
               f"rate limited for {self.rate_limit_wait:g} s, --rate-limit-wait")
        raise LMCallError(f"{self.spec} at {self.spec.endpoint}: gave up after {attempts} attempts ({why}): "
                          f"{_describe(err)}") from err

    def _backoff(self, n: int) -> float:
        """The n-th wait (from 1): doubling from ``backoff`` up to ``max_backoff``, with jitter."""
        return min(self.max_backoff, self.backoff * 2 ** (max(1, n) - 1)) + random.uniform(0, self.backoff)

    def _overloaded(self, err: StatusError) -> float:
        """Pause every thread after a 429/503 and return the seconds left of the pause.

        The pause is the longer of the server's ``Retry-After`` and the client's own backoff, so a header of 0, a
        past date or a negative number never makes the retry immediate. The backoff doubles with each answer that
        arrives after the previous pause ended (the answers to one burst of concurrent requests count once)."""
        with self._lock:
            now = time.monotonic()
            if now >= self._not_before:
                if not self._overloads:
                    self._overloaded_since = now
                self._overloads += 1
            wait = max(err.retry_after or 0.0, self._backoff(self._overloads))
            self._not_before = max(self._not_before, now + wait)
            return self._not_before - now

    def _say_timed_out(self, attempts: int) -> None:
        """Log that a call got no answer in ``--timeout`` and is tried again, at most every ``WAIT_NOTICE_SECONDS``
        (a hanging server is otherwise silent for the attempts' whole time)."""
        with self._lock:
            now = time.monotonic()
            if now - self._last_notice < WAIT_NOTICE_SECONDS:
                return
            self._last_notice = now
        log.warning("%s", printable(f"{self.spec} at {self.spec.endpoint}: no answer in {self.timeout:g} s (--timeout), "
                                    f"attempt {attempts} of {self.max_retries + 1}; trying again"))

    def _say_waiting(self, err: StatusError, left: float) -> None:
        """Log that the run waits out the server's pause, at most every ``WAIT_NOTICE_SECONDS``."""
        with self._lock:
            now = time.monotonic()
            if now - self._last_notice < WAIT_NOTICE_SECONDS:
                return
            self._last_notice = now
            waited = now - self._overloaded_since
        log.warning("%s", self._waiting_notice(err, left, waited))

    def _waiting_notice(self, err: StatusError, left: float, waited: float) -> str:
        """One line: the run waits, on which server (host and port only), why, and until when."""
        parts = urlsplit(self.spec.endpoint)
        host = parts.hostname or "the server"
        host = f"[{host}]" if ":" in host else host
        where = f"{host}:{parts.port}" if parts.port else host
        header = err.header
        said = ("no Retry-After" if header is None else
                f"Retry-After {header[:40]!r}, unreadable" if err.retry_after is None else
                f"Retry-After {header[:40]!r}")
        until = datetime.fromtimestamp(time.time() + left).strftime("%H:%M:%S")
        since = f"; rate limited for {waited:.0f} s so far" if waited >= 1 else ""
        return printable(f"{where} answered HTTP {err.status} ({said}): waiting until {until} ({left:.1f} s) before "
                         f"the next request{since}; an item gives up after --rate-limit-wait "
                         f"{self.rate_limit_wait:g} s")

    def _admit(self, deadline: float) -> bool:
        """Wait until this request may start: past any pause, alone while the server is overloaded (a probe), and in
        its slot under ``rps``. True when it holds the probe lock (to release once answered).

        Raises:
            _PausedPastDeadline: the pause ends after ``deadline`` (nothing is sent).
        """
        while True:
            with self._lock:
                until = self._not_before
            if until > deadline:
                raise _PausedPastDeadline(until)
            if until > time.monotonic():
                time.sleep(max(0.0, until - time.monotonic()))
                continue
            if not self._overloads:
                break
            left = deadline - time.monotonic()
            if not self._probe.acquire(timeout=-1 if left == math.inf else max(0.0, left)):
                raise _PausedPastDeadline(deadline)  # the probe in flight outlasted this call's bound
            if time.monotonic() >= self._not_before:  # no answer while it waited set a new pause
                self._pace()
                return True
            self._probe.release()
        self._pace()
        return False

    def _pace(self) -> None:
        """Under ``rps``, wait for this request's slot."""
        if not self.rps:
            return
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next_slot)
            self._next_slot = start + 1.0 / self.rps
        if start > now:
            time.sleep(start - now)

    def _guarded(self, attempt, request: dict[str, Any], deadline: float = math.inf):
        """One attempt, unless the server was found unusable; counts refused connections in a row."""
        if self._fatal is not None:
            raise self._fatal
        probing = self._admit(deadline)
        try:
            result = attempt(request)
        except httpx.ConnectError as err:
            with self._lock:
                self._refusals += 1
                if self._refusals >= REFUSALS_TO_STOP and self._fatal is None:
                    self._fatal = ServerUnreachableError(
                        f"{self.spec} at {self.spec.endpoint}: {self._refusals} connection attempts in a row failed "
                        f"({err}); stopping. Start the server, or check {self.endpoint_named_by}")
                if self._fatal is not None:
                    raise self._fatal from None
            raise
        except StatusError as err:
            if classify(err) != "overload":
                self._overloads = 0  # the server took the request (and refused it otherwise)
            raise
        finally:
            if probing:
                self._probe.release()
        self._refusals = 0
        self._overloads = 0
        usage = result.usage if isinstance(result, Completion) else result[1]
        with self._lock:
            self.usage["requests"] += 1
            for key in ("prompt_tokens", "completion_tokens"):
                self.usage[key] += int(usage.get(key) or 0)
        return result

    def _post(self, path: str, request: dict[str, Any]) -> Any:
        with self._client.stream("POST", path, json=request) as streamed:  # read with bounds, never whole
            body = bytearray()
            deadline = time.monotonic() + self.timeout  # a body dripped byte by byte never resets the clock
            for chunk in streamed.iter_bytes():
                body += chunk
                if len(body) > MAX_RESPONSE_BYTES:
                    raise _Transient(f"the server's answer exceeds {MAX_RESPONSE_BYTES:,} bytes")
                if time.monotonic() > deadline:
                    raise httpx.ReadTimeout(f"the server's answer took over {self.timeout:g} s to arrive")
            response = httpx.Response(streamed.status_code, headers=streamed.headers, content=bytes(body),
                                      request=streamed.request)
        if response.status_code in (401, 403):
            what = ("refused the credentials" if response.status_code == 401
                    else "refused access with these credentials")
            key = "set" if self._client.headers.get("Authorization") else "not set"
            advice = (self.withheld if self.withheld and os.environ.get(self.api_key_env) else
                      f"${self.api_key_env} is {key}: give it a key this server accepts for this model")
            error = ServerAuthError(f"{self.spec} at {self.spec.endpoint}: the server {what} (HTTP "
                                    f"{response.status_code}: {printable(response.text[:200])}); {advice}")
            with self._lock:
                self._fatal = self._fatal or error
            raise self._fatal
        if response.status_code == 404 and path == "chat/completions":  # every judge needs it: a wrong URL or model
            error = ServerError(f"{self.spec} at {self.spec.endpoint}: no chat endpoint there, or no model "
                                f"{self.spec.model!r} (HTTP 404: {printable(response.text[:200])}); check "
                                f"{self.endpoint_named_by} (the server's URL, most often ending in /v1) and the "
                                "model's name")
            with self._lock:
                self._fatal = self._fatal or error
            raise self._fatal
        if response.status_code != 200:
            header = response.headers.get("retry-after")
            raise StatusError(response.status_code, response.text, retry_after(header), header)
        try:
            return json.loads(response.content)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise _Transient(f"the server answered with invalid JSON ({err})") from err

    def _attempt_text(self, request: dict[str, Any]) -> tuple[dict[str, Any], dict[str, int]]:
        body = self._post("completions", request)
        choices = body.get("choices") if isinstance(body, dict) else None
        if not choices or not isinstance(choices[0], dict):
            raise _Transient("the server answered with no choices")
        return choices[0], reported_usage(body)

    def _attempt(self, request: dict[str, Any]) -> Completion:
        body = self._post("chat/completions", request)
        choices = body.get("choices") if isinstance(body, dict) else None
        if not choices or not isinstance(choices[0], dict) or not isinstance(choices[0].get("message"), dict):
            raise _Transient("the server answered with no choices")
        choice = choices[0]
        logprobs = (choice.get("logprobs") or {}).get("content")
        return Completion(choice["message"].get("content") or "", choice.get("finish_reason"), reported_usage(body),
                          logprobs)


def retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (a number of seconds or an HTTP date; a past date or a negative
    number is 0); None when absent or unreadable (``nan``, ``inf`` included). The client never waits less than its
    own backoff whatever this says."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time()) if when is not None else None


REASONING_MIN_TOKENS = 4096  # a reasoning model's hidden reasoning counts against its token limit


def request_body(spec: LMSpec, messages: list[dict[str, str]], *, max_tokens: int, temperature: float = 0.0,
                 stop: list[str] | None = None, top_logprobs: int | None = None, seed: int | None = None) -> dict[str, Any]:
    """The JSON body of a chat completion request.

    A reasoning model (``spec.is_reasoning``) gets no temperature, logprobs or stop strings (they are
    rejected) and its limit as ``max_completion_tokens``, at least ``REASONING_MIN_TOKENS``. Other
    models get ``max_tokens``: llama.cpp's server ignores ``max_completion_tokens``. Sampling
    (temperature above 0) sends ``top_p=1``, so the answers follow the model's own distribution.
    """
    request: dict[str, Any] = {"model": spec.model, "messages": messages}
    if seed is not None:
        request["seed"] = seed
    if spec.is_reasoning:
        request["max_completion_tokens"] = max(max_tokens, REASONING_MIN_TOKENS)
        return request
    request.update(max_tokens=max_tokens, temperature=temperature)
    if temperature > 0:
        request["top_p"] = 1.0
    if stop:
        request["stop"] = stop
    if top_logprobs:
        request.update(logprobs=True, top_logprobs=top_logprobs)
    return request


def _describe(error: BaseException | None) -> str:
    if error is None:
        return "unknown error"
    if isinstance(error, httpx.TimeoutException):
        return f"request timed out ({type(error).__name__})"
    if isinstance(error, httpx.TransportError):
        return f"connection error ({type(error).__name__}: {error})"
    if classify(error) == "overload":
        return f"the server is overloaded ({error})"
    return str(error) if isinstance(error, (StatusError, _Transient)) else f"{type(error).__name__}: {error}"
