"""DSPy engines (the 3.4 ``dspy.LM(..., engine=...)`` contract) over judgetune's own backends, so
every call, local or remote, goes through judgetune's cache (keyed by model file and endpoint)
and retry policy. A trailing assistant message is a prefill that the answer continues."""

from __future__ import annotations

import numpy as np
from dspy import lm15
from dspy.clients.engines.base import validate_request
from dspy.lm15 import Message, Response, TextPart, TokenLogprob, TopLogprob, Usage, response_to_events

from judgetune.lm._cache import ResponseCache, cached
from judgetune.lm._remote import LMCallError, OpenAICompatibleClient

DEFAULT_MAX_TOKENS = 256


def request_messages(request: lm15.Request) -> list[dict[str, str]]:
    """The request as plain chat messages (system first)."""
    messages = []
    if request.system is not None:
        system = request.system if isinstance(request.system, str) else "".join(p.text for p in request.system)
        messages.append({"role": "system", "content": system})
    for message in request.messages:
        if message.text is None:
            raise lm15.InvalidRequestError("judgetune engines read text-only messages")
        messages.append({"role": "system" if message.role == "developer" else message.role, "content": message.text})
    return messages


def _request_key(request: lm15.Request) -> dict:
    c = request.config
    return {"op": "complete", "messages": request_messages(request), "max_tokens": c.max_tokens,
            "temperature": c.temperature, "stop": list(c.stop or ()), "logprobs": c.logprobs, "seed": c.seed,
            "response_format": c.response_format}


def _logprob_entry(token: str, logprob: float, top: list[tuple[str, float]]) -> dict:
    """One answer token's log-probability and its top alternatives, as cached plain data."""
    return {"token": token, "logprob": float(logprob), "bytes": list(token.encode()),
            "top": [{"token": t, "logprob": float(lp), "bytes": list(t.encode())} for t, lp in top]}


def _response(request: lm15.Request, data: dict) -> Response:
    logprobs = None
    if data["logprobs"] is not None:
        logprobs = tuple(TokenLogprob(token=t["token"], logprob=t["logprob"], bytes=tuple(t["bytes"]),
                                      top=tuple(TopLogprob(token=a["token"], logprob=a["logprob"], bytes=tuple(a["bytes"]))
                                                for a in t["top"]))
                         for t in data["logprobs"])
    return Response(id=None, model=request.model, message=Message.assistant([TextPart(data["text"])]),
                    finish_reason=data["finish_reason"],
                    usage=Usage(input_tokens=data["usage"]["prompt_tokens"],
                                output_tokens=data["usage"]["completion_tokens"],
                                cache_read_tokens=data["usage"].get("cached_tokens")),
                    logprobs=logprobs)


class _CachedEngine:
    """complete() = the cached answer, else ``_run`` (one answer as plain data), stored."""

    supports_response_schema = True
    supported_params = frozenset({"response_format"})

    def __init__(self, cache: ResponseCache | None, model_id: str, endpoint: str):
        self.cache, self.model_id, self.endpoint = cache, model_id, endpoint
        self.calls = 0  # answers actually computed (cache misses)

    def complete(self, request: lm15.Request) -> Response:
        validate_request(request)
        if request.tools:
            raise lm15.UnsupportedFeatureError("judgetune engines have no tool calling", feature="tools")

        def compute() -> dict:
            data = self._run(request)
            self.calls += 1
            return data

        data = cached(self.cache, model=self.model_id, endpoint=self.endpoint, request=_request_key(request),
                      compute=compute)
        return _response(request, data)

    def stream(self, request: lm15.Request):
        return response_to_events(self.complete(request))

    def _run(self, request: lm15.Request) -> dict:
        raise NotImplementedError

    def close(self) -> None:
        pass


class LocalEngine(_CachedEngine):
    """Generation on an in-process model (llama.cpp or transformers)."""

    def __init__(self, model, *, cache: ResponseCache | None, model_id: str):
        super().__init__(cache, model_id, "in-process")
        self.model = model

    def _run(self, request: lm15.Request) -> dict:
        config = request.config
        messages = request_messages(request)
        prefill = messages.pop()["content"] if messages[-1]["role"] == "assistant" else ""
        tokens = self.model.tokenize(self.model.render(messages, prefill))
        schema = None
        if config.response_format is not None:
            schema = config.response_format.get("schema") or {"type": "object"}
        n_top = config.logprobs
        try:
            out, finish, text = self.model.generate(
                tokens, max_tokens=config.max_tokens or DEFAULT_MAX_TOKENS, temperature=config.temperature or 0.0,
                stop=tuple(config.stop or ()), json_schema=schema, want_logprobs=n_top is not None, seed=config.seed)
        except ValueError as err:
            raise lm15.ContextLengthError(str(err)) from err
        logprobs = None
        if n_top is not None:
            logprobs, used = [], 0
            for item in out:  # only tokens wholly inside the text kept after a stop string
                if used + len(item.text) > len(text):
                    break
                used += len(item.text)
                best = np.argsort(-item.logprobs)[:n_top] if n_top else []
                logprobs.append(_logprob_entry(item.text.decode("utf-8", "replace"), item.logprobs[item.token_id],
                                               [(self.model.token_text(int(i)), item.logprobs[i]) for i in best]))
        return {"text": text.decode("utf-8", "replace"), "finish_reason": finish, "logprobs": logprobs,
                "usage": {"prompt_tokens": len(tokens), "completion_tokens": len(out)}}


class RemoteEngine(_CachedEngine):
    """Generation on an OpenAI-compatible server through judgetune's retrying client."""

    supports_response_schema = False  # JSON-schema output is not portable across servers
    supported_params = frozenset()

    def __init__(self, client: OpenAICompatibleClient, *, cache: ResponseCache | None):
        super().__init__(cache, client.spec.model, client.spec.endpoint)
        self.client = client

    def _run(self, request: lm15.Request) -> dict:
        config = request.config
        if config.response_format is not None:
            raise lm15.UnsupportedFeatureError("judgetune's remote engine sends no response_format",
                                               feature="response_format")
        messages = request_messages(request)
        if messages[-1]["role"] == "assistant":
            raise lm15.InvalidRequestError(
                f"{self.client.spec}: an OpenAI-compatible chat endpoint starts a new turn instead of continuing "
                "a trailing assistant message (a prefill); use a local model for prefilled answers, or an adapter "
                "that does not prefill")
        try:
            completion = self.client.complete(messages, max_tokens=config.max_tokens or DEFAULT_MAX_TOKENS,
                                              temperature=config.temperature or 0.0, stop=list(config.stop or ()) or None,
                                              top_logprobs=config.logprobs or None, seed=config.seed)
        except LMCallError as err:
            raise lm15.ProviderError(str(err)) from err  # already retried: DSPy must not retry again
        logprobs = None
        if config.logprobs is not None and completion.logprobs is not None:
            logprobs = [_logprob_entry(t["token"], t["logprob"],
                                       [(a["token"], a["logprob"]) for a in t.get("top_logprobs") or []])
                        for t in completion.logprobs]
        usage = {"prompt_tokens": completion.usage.get("prompt_tokens", 0),
                 "completion_tokens": completion.usage.get("completion_tokens", 0)}
        if "cached_tokens" in completion.usage:  # the server's prompt cache served these (where it says so)
            usage["cached_tokens"] = completion.usage["cached_tokens"]
        return {"text": completion.text, "finish_reason": completion.finish_reason or "stop", "logprobs": logprobs,
                "usage": usage}
