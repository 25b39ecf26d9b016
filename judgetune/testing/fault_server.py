"""A fault-injecting OpenAI-compatible chat server on 127.0.0.1, for retry and loss tests.

Each request draws, from a seeded generator, either a normal answer (after ``latency`` seconds)
or one fault: ``500``, ``timeout`` (hangs past the client's timeout), ``malformed`` (invalid
JSON), ``truncated`` (the body ends early) or ``empty`` (no choices); any other HTTP status
(``400``, ``401``, ``403``, ``429``, ``503``: a string of digits) only when asked for; a 429 or 503 carries
``Retry-After: retry_after`` when that is set (seconds, or an HTTP date as text). Every attempt is logged with
its item (the last user message) and outcome, so a test can check that nothing was lost. Any path but
``/chat/completions`` (``/completions``) answers 404, unlogged, as a chat-only server does.

With ``upstream`` (a real server's ``.../v1`` URL) it is a proxy: a normal answer is the upstream
server's, with ``overrides`` merged into the request; ``logprobs=False`` strips log-probabilities
from the request and the answer (a model that exposes none).
"""

from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

FAULTS = ("500", "timeout", "malformed", "truncated", "empty")


class _QuietServer(ThreadingHTTPServer):
    request_queue_size = 256  # the default backlog of 5 drops bursts of connections (1 s SYN retries)

    def handle_error(self, request, client_address) -> None:
        pass  # clients that time out hang up mid-answer: expected here, not worth a traceback


class FaultServer:
    """Use as a context manager; ``base_url`` is the OpenAI-style ``.../v1`` address."""

    def __init__(self, *, fault_rate: float = 0.0, faults: tuple[str, ...] = FAULTS, latency: float = 0.0,
                 hang: float = 5.0, seed: int = 0, logprobs: bool = True, upstream: str | None = None,
                 overrides: dict | None = None, retry_after: float | str | None = None):
        self.fault_rate, self.faults, self.latency, self.hang = fault_rate, faults, latency, hang
        self.retry_after = retry_after
        self.logprobs = logprobs  # False: a model that exposes no log-probabilities
        self.upstream, self.overrides = upstream, dict(overrides or {})
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.log: list[tuple[str, str]] = []  # (item, outcome) per attempt, in arrival order
        self.arrivals: list[float] = []  # time.monotonic() of each attempt, as in the log
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _draw(self, item: str) -> str:
        with self._lock:
            outcome = self._rng.choice(self.faults) if self._rng.random() < self.fault_rate else "ok"
            self.log.append((item, outcome))
            self.arrivals.append(time.monotonic())
        return outcome

    def _forward(self, body: dict) -> tuple[int, bytes]:
        """The upstream server's answer to ``body`` (log-probabilities removed unless ``self.logprobs``)."""
        body = {**body, **self.overrides}
        if not self.logprobs:
            body = {k: v for k, v in body.items() if k not in ("logprobs", "top_logprobs")}
        response = httpx.post(f"{self.upstream.rstrip('/')}/chat/completions", json=body, timeout=600)
        if response.status_code != 200 or self.logprobs:
            return response.status_code, response.content
        answer = response.json()
        for choice in answer.get("choices", []):
            choice["logprobs"] = None
        return 200, json.dumps(answer).encode()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms ACK stall

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if not self.path.endswith("/chat/completions"):  # a chat server only, as many are
                    return self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}).encode())
                item = body["messages"][-1]["content"]
                outcome = server._draw(item)
                if outcome.isdigit():  # an HTTP status: 400, 401, 403, 429, 500, 503, ...
                    message = "injected bad request" if outcome == "400" else f"injected {outcome}"
                    retry = {"Retry-After": str(server.retry_after)} if (
                        outcome in ("429", "503") and server.retry_after is not None) else {}
                    return self._send(int(outcome), json.dumps({"error": {"message": message}}).encode(), retry)
                if outcome == "timeout":
                    time.sleep(server.hang)
                    if server.upstream is not None:  # the client has hung up: spare the real server the work
                        return self._send(200, json.dumps(_completion(body, item)).encode())
                if outcome == "malformed":
                    return self._send(200, b'{"id": "x", "choices": [ {"message": ')
                if outcome == "empty":
                    return self._send(200, json.dumps(_completion(body, item, choices=False)).encode())
                time.sleep(server.latency)
                if server.upstream is not None:
                    status, payload = server._forward(body)
                    if status != 200:
                        return self._send(status, payload)
                else:
                    payload = json.dumps(_completion(body, item, logprobs=server.logprobs)).encode()
                if outcome == "truncated":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload[: len(payload) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return None
                return self._send(200, payload)

            def _send(self, status: int, payload: bytes, headers: dict | None = None) -> None:
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler


def answer_for(item: str) -> str:
    """The answer the server gives to ``item`` when no fault is injected."""
    return f"echo:{item}"


def _completion(body: dict, item: str, *, choices: bool = True, logprobs: bool = True) -> dict:
    choice = {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": answer_for(item)}}
    if body.get("logprobs") and logprobs:
        top = [{"token": t, "logprob": lp, "bytes": None} for t, lp in (("1", -0.5), ("2", -1.5), ("3", -2.5))]
        choice["logprobs"] = {"content": [{"token": "1", "logprob": -0.5, "bytes": None,
                                           "top_logprobs": top[: body.get("top_logprobs") or 0]}]}
    return {"id": "chatcmpl-fault", "object": "chat.completion", "created": 0, "model": body.get("model", "m"),
            "choices": [choice] if choices else [],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}


def main() -> None:
    """Serve until killed, printing the base URL first: ``python -m judgetune.testing.fault_server``."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fault-rate", type=float, default=0.0)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    with FaultServer(fault_rate=args.fault_rate, latency=args.latency, seed=args.seed) as server:
        print(server.base_url, flush=True)
        threading.Event().wait()


if __name__ == "__main__":
    main()
