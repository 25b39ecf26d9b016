"""JudgeLM: one model, wherever it runs, as a DSPy LM for generation and as a source of label
distributions and target-text log-probabilities for scoring; all cached on disk."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import dspy
from dspy import lm15

from judgetune._endpoints import BASE_URL_ENVS, OPENAI_ENDPOINT, check_endpoint, is_trusted, untrusted_hint
from judgetune.errors import ItemError
from judgetune.lm._batch import Coalescer, Outcome, run_items
from judgetune.lm._cache import ResponseCache, cached
from judgetune.lm._engine import LocalEngine, RemoteEngine
from judgetune.lm._labels import LabelDistribution, local_label_distributions
from judgetune.lm._position import ServerLabelReader
from judgetune.lm._remote import OpenAICompatibleClient
from judgetune.lm._spec import API_KEY_ENV, TEST_MODELS, LMSpec, embedded_threads, model_file, parse_lm_spec
from judgetune.lm._targets import TargetLogprobs, local_target_logprobs, remote_target_logprobs

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Generation:
    """One generated answer. ``logprobs`` lists, per answer token, ``(token, logprob, top)`` where
    ``top`` is a list of ``(token, logprob)`` alternatives (when asked for)."""

    text: str
    usage: dict[str, int] = field(default_factory=dict)
    logprobs: list[tuple[str, float, list[tuple[str, float]]]] | None = None


def _request(model: str, messages: list[dict[str, str]], config: lm15.Config) -> lm15.Request:
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system") or None
    turns = tuple(lm15.Message.assistant(m["content"]) if m["role"] == "assistant" else lm15.Message.user(m["content"])
                  for m in messages if m["role"] != "system")
    return lm15.Request(model=model, messages=turns, system=system, config=config)


class JudgeLM:
    """Build with :func:`load_lm`. ``label_calls`` counts scorings actually computed (not served from the
    cache): label distributions and target log-probabilities."""

    def __init__(self, spec: LMSpec, *, cache: ResponseCache | None, model=None,
                 client: OpenAICompatibleClient | None = None, model_id: str, concurrency: int = 1,
                 label_position: str | None = None, chat_template: str | None = None):
        self.spec, self.cache, self.model, self.client, self.model_id = spec, cache, model, client, model_id
        # threads for remote calls; an in-process model computes one item at a time anyway
        self.concurrency = concurrency if client is not None else 1
        self.engine = (RemoteEngine(client, cache=cache) if client is not None
                       else LocalEngine(model, cache=cache, model_id=model_id))
        self.label_calls = 0
        # label reads scored together in-process: the items decoded side by side (1: no batching)
        self.batch_size = getattr(model, "batch_size", 1) if client is None else 1
        # gathers in-process label reads from run()'s threads into batched calls
        self._batcher = Coalescer(lambda requests: local_label_distributions(self.model, requests), self.batch_size)
        self.transcript: list[dict[str, Any]] | None = None  # set to a list to record every prompt sent
        # over a server: the prompt ends at the label position (see _position); None in-process
        self.label_reader = ServerLabelReader(client, way=label_position, chat_template=chat_template) if client else None

    @property
    def in_process(self) -> bool:
        """True for a model in this process: answers can be prefilled (continued after a given prefix)."""
        return self.client is None

    @property
    def label_position(self) -> str | None:
        """Where label distributions are read: ``in-process``; over a server ``completions`` or ``prefill``
        (the prompt ends at the label, see ``_position``), or None for ``generated`` (judges then read the labels
        after the marker of a generated answer). A server is probed once; the way it got is logged once.

        Raises:
            LabelPositionError: the way asked for (or frozen) is not offered by the server.
        """
        if self.label_reader is None:
            return "in-process"
        way = self.label_reader.way()[0]
        return None if way == "generated" else way

    def label_record(self) -> dict[str, Any]:
        """What a judge.json records of how this LM read labels: over a server that has read some, its
        ``label_position`` and, for ``completions``, the ``chat_template`` identity ({source, sha256});
        nothing in-process or before any label was read."""
        reader = self.label_reader
        if reader is None or reader._way is None:
            return {}
        way = reader._way[0]
        return {"label_position": way, "chat_template": reader.template if way == "completions" else None}

    def freeze_label_position(self, way: str, chat_template: dict[str, str] | None, *, where: str) -> None:
        """Read labels as a frozen judge (``where``) was tuned to; a no-op in-process (labels are read exactly there).

        Raises:
            LabelPositionError: one line naming what the server (or this machine) no longer offers.
        """
        if self.label_reader is not None:
            self.label_reader.freeze(way, chat_template, where)

    def _record(self, **entry: Any) -> None:
        if self.transcript is not None:
            self.transcript.append(entry)

    def generate(self, messages: list[dict[str, str]], *, prefix: str = "", max_tokens: int = 256,
                 stop: Sequence[str] = (), json_schema: dict | None = None, top_logprobs: int | None = None,
                 temperature: float = 0.0, seed: int | None = None) -> Generation:
        """An answer, cached: greedy by default, else sampled at ``temperature`` with ``seed`` (one cache
        entry per seed). ``prefix`` starts the answer (in-process models only); ``json_schema``
        constrains it (in-process models only; servers get the instruction alone)."""
        if prefix and not self.in_process:
            raise ValueError(f"{self.spec}: a forced answer prefix needs an in-process model")
        self._record(op="generate", messages=messages, prefix=prefix)
        sent = [*messages, {"role": "assistant", "content": prefix}] if prefix else list(messages)
        response_format = None
        if json_schema is not None and self.in_process:
            response_format = {"type": "json_schema", "schema": json_schema}
        config = lm15.Config(max_tokens=max_tokens, temperature=temperature, stop=tuple(stop),
                             response_format=response_format, logprobs=top_logprobs, seed=seed)
        try:
            response = self.engine.complete(_request(self.model_id, sent, config))
        except lm15.ProviderError as err:  # the engine's wrapper of a call that failed for good
            if isinstance(err.__cause__, ItemError):  # a failed call, a prompt that fills the context
                raise err.__cause__ from None  # callers keep the item as failed, with its reason
            raise
        text = response.message.text or ""
        logprobs = None
        if response.logprobs is not None:
            logprobs = [(t.token, t.logprob, [(a.token, a.logprob) for a in t.top]) for t in response.logprobs]
        usage = {"prompt_tokens": response.usage.input_tokens or 0,
                 "completion_tokens": response.usage.output_tokens or 0}
        if response.usage.cache_read_tokens is not None:  # a server that reports its prompt cache
            usage["cached_tokens"] = response.usage.cache_read_tokens
        return Generation(text, usage, logprobs)

    @cached_property
    def dspy_lm(self) -> dspy.LM:
        """A ``dspy.LM`` on this model. DSPy's own cache and retries are off: judgetune's apply."""
        name = f"openai/{self.spec.model}" if self.spec.kind == "openai" else f"local/{self.model_id[:16]}"
        return dspy.LM(name, engine=self.engine, cache=False, num_retries=0, temperature=0.0, max_tokens=256)

    def label_distribution(self, messages: list[dict[str, str]], labels: Sequence[str], *,
                           prefix: str = "") -> LabelDistribution:
        """log p(label) for each label at the answer position (after ``prefix``), exact; in-process models only.

        Calls from several threads (``run(..., batched=True)``) are scored together, several prompts per
        decode (see ``label_distributions``). Over a server, judges read labels from a generated answer
        instead: its ``top_logprobs`` after the answer marker (``scoring_mode='logprobs'``), or parsed
        answers (``sampled``, ``parsed``).
        """
        self._record(op="labels", messages=messages, labels=list(labels), prefix=prefix)
        if not self.in_process and self.label_position is None:
            raise ValueError(f"{self.spec}: exact label distributions need an in-process model, or a server where "
                             f"the prompt can end at the label, and {self.label_reader.way()[1]}; over this server, "
                             "generate(..., top_logprobs=20) and read the answer's log-probabilities")

        def compute() -> dict:
            if self.in_process:
                result = self._batcher.submit((messages, list(labels), prefix))
            else:
                result = self.label_reader.distribution(messages, labels, prefix)
            self.label_calls += 1
            return result.to_dict()

        key = _labels_key(messages, labels, prefix)
        if self.label_reader is not None:  # one server, two ways: two answers
            key["position"] = self.label_reader.way()[0]
        return LabelDistribution.from_dict(cached(self.cache, model=self.model_id, endpoint=self.spec.endpoint,
                                                  request=key, compute=compute))

    def label_distributions(self, requests: Sequence[tuple[list[dict[str, str]], Sequence[str], str]]
                            ) -> list[Outcome[LabelDistribution]]:
        """``label_distribution`` of many ``(messages, labels, prefix)`` requests, cached per request.

        In-process, the requests not in the cache are scored in one batched call (llama.cpp: several
        prompts per decode over their shared, cached prefix); on a server, one call per request,
        ``concurrency`` at a time. A request that failed for good is kept as a failed Outcome.
        """
        if self.client is not None:
            return self.run(lambda r: self.label_distribution(r[0], r[1], prefix=r[2]), list(requests))
        for messages, labels, prefix in requests:
            self._record(op="labels", messages=messages, labels=list(labels), prefix=prefix)
        keys = [ResponseCache.key(model=self.model_id, endpoint=self.spec.endpoint, request=_labels_key(*r))
                for r in requests]
        found = [self.cache.get(key) if self.cache is not None else None for key in keys]
        missing = [i for i, value in enumerate(found) if value is None]
        errors: dict[int, str] = {}
        for i, result in zip(missing, local_label_distributions(self.model, [requests[i] for i in missing])):
            if isinstance(result, ItemError):
                errors[i] = str(result)
                continue
            if isinstance(result, Exception):
                raise result
            self.label_calls += 1
            found[i] = result.to_dict()
            if self.cache is not None:
                self.cache.set(keys[i], found[i])
        return [Outcome(i, error=errors[i]) if i in errors else Outcome(i, value=LabelDistribution.from_dict(found[i]))
                for i in range(len(requests))]

    def chat_prompt(self, messages: list[dict[str, str]]) -> str:
        """The model's chat template applied to ``messages``, the assistant turn opened (in-process only)."""
        if not self.in_process:
            raise ValueError(f"{self.spec} at {self.spec.endpoint}: the chat template is applied in-process only; "
                             "score plain-text prompts on a server (likelihood judge: chat=False)")
        return self.model.render(messages)

    def target_logprobs(self, pairs: Sequence[tuple[str, str]]) -> list[Outcome[TargetLogprobs]]:
        """log p(target | prompt) token by token for each ``(prompt, target)``, cached per pair.

        In-process, the pairs not in the cache are scored in one batched call over their shared
        prompt prefix; on a server, one echo call per pair, ``concurrency`` at a time. A call that
        failed for good is kept as a failed Outcome.
        """
        self._record(op="targets", pairs=[list(p) for p in pairs])
        keys = [{"op": "target", "prompt": prompt, "target": target} for prompt, target in pairs]
        found: list[dict | None] = [None] * len(pairs)
        if self.cache is not None:
            for i, key in enumerate(keys):
                found[i] = self.cache.get(ResponseCache.key(model=self.model_id, endpoint=self.spec.endpoint,
                                                            request=key))
        # prompts of one source one after another (the prompt cache of the model or server keeps it)
        missing = sorted((i for i, value in enumerate(found) if value is None), key=lambda i: pairs[i])
        computed: list[Outcome] = []
        if missing and self.client is None:
            scored = local_target_logprobs(self.model, [pairs[i] for i in missing])
            computed = [Outcome(i, value=value) for i, value in zip(missing, scored)]
        elif missing:
            computed = [Outcome(missing[o.index], value=o.value, error=o.error)
                        for o in self.run(lambda i: remote_target_logprobs(self.client, *pairs[i]), missing)]
        for outcome in computed:
            if outcome.ok:
                self.label_calls += 1
                found[outcome.index] = outcome.value.to_dict()
                if self.cache is not None:
                    self.cache.set(ResponseCache.key(model=self.model_id, endpoint=self.spec.endpoint,
                                                     request=keys[outcome.index]), found[outcome.index])
        errors = {o.index: o.error for o in computed if not o.ok}
        return [Outcome(i, error=errors[i]) if i in errors else Outcome(i, value=TargetLogprobs.from_dict(found[i]))
                for i in range(len(pairs))]

    def run(self, fn: Callable[[T], R], items: Sequence[T], *, progress: bool = False,
            batched: bool = False) -> list[Outcome[R]]:
        """``fn`` on every item, ``self.concurrency`` at a time; failed calls are kept with their reason.

        ``batched``: in-process, run ``2 * batch_size`` threads, so that the label reads of
        ``batch_size`` items are scored in one batch while the next items prepare theirs. The order
        of the calls then varies from run to run; their results do not.
        """
        threads = 2 * self.batch_size if batched and self.batch_size > 1 else self.concurrency
        return run_items(fn, items, concurrency=threads, progress=progress, description=str(self.spec))

    def close(self) -> None:
        if self.model is not None:
            self.model.close()


def _labels_key(messages: list[dict[str, str]], labels: Sequence[str], prefix: str) -> dict:
    return {"op": "labels", "messages": messages, "labels": list(labels), "prefix": prefix}


def load_lm(spec: str | LMSpec, *, api_base: str | None = None, cache: ResponseCache | None = None,
            use_cache: bool = True, backend: str | None = None, timeout: float = 60.0, max_retries: int = 3,
            concurrency: int = 8, n_ctx: int = 4096, n_threads: int | None = None, reasoning: bool | None = None,
            label_position: str | None = None, chat_template: str | None = None, rps: float | None = None,
            rate_limit_wait: float = 600.0, trust_endpoint: bool = True, endpoint_source: str = "the config",
            api_key: str | None = None) -> JudgeLM:
    """Load the model a spec names.

    Args:
        spec: ``local:smollm2``, ``llamacpp:PATH.gguf``, ``hf:PATH`` or ``openai/MODEL``
            (``test:deterministic``: a stand-in without weights, for plumbing tests).
        api_base: the server of an ``openai/MODEL`` spec (default: OpenAI).
        cache: where answers are kept (default: ``$JUDGETUNE_CACHE_DIR`` or ``~/.cache/judgetune``).
        use_cache: False to compute every answer afresh.
        backend: for ``local:`` specs, ``llamacpp`` (default) or ``transformers``.
        timeout, max_retries: per remote attempt, and retries of transient faults.
        concurrency: threads for remote calls in :meth:`JudgeLM.run`.
        rps, rate_limit_wait: a server's requests per second at most, and how long one call may wait out its
            rate limit (429/503, Retry-After honoured); see ``OpenAICompatibleClient``.
        n_threads: CPU threads of an in-process model (default ``$JUDGETUNE_THREADS``, else 2).
        reasoning: an ``openai/MODEL`` that is a reasoning model (None: decided from its name).
        label_position, chat_template: over a server, where labels are read (``completions``, ``prefill`` or
            ``generated``; None: the first the server offers, probed in that order) and the chat template for
            ``completions`` (a GGUF path or Jinja text; None: the GGUF the model is named by, or the embedded
            model of that name). See ``_position``.
        trust_endpoint: whether the caller named ``api_base`` (True) or read it from a file someone else may
            have written (False: ``$OPENAI_API_KEY`` is sent there only when the endpoint is trusted, see
            ``judgetune._endpoints``); ``endpoint_source`` names that file in the warning.
        api_key: the key to send to an ``openai/MODEL`` endpoint instead of ``$OPENAI_API_KEY`` ("" sends none).

    Example:
        >>> lm = load_lm("local:smollm2")  # doctest: +SKIP
        >>> lm.label_distribution([{"role": "user", "content": "2+2=4? yes/no"}], ["yes", "no"])  # doctest: +SKIP
    """
    if isinstance(spec, str):
        spec = parse_lm_spec(spec, api_base=api_base, reasoning=reasoning)
    cache = (cache or ResponseCache()) if use_cache else None
    if spec.kind == "openai":
        given = spec.api_base
        spec, send_key, withheld = _remote_endpoint(spec, trust_endpoint, endpoint_source)
        client = OpenAICompatibleClient(spec, timeout=timeout, max_retries=max_retries, rps=rps,
                                        rate_limit_wait=rate_limit_wait, send_key=send_key, withheld=withheld,
                                        api_key=api_key,
                                        endpoint_named_by=_endpoint_origin(given, spec, trust_endpoint, endpoint_source))
        return JudgeLM(spec, cache=cache, client=client, model_id=spec.model, concurrency=concurrency,
                       label_position=label_position, chat_template=chat_template)
    if spec.kind == "test":  # no weights: see judgetune/lm/_deterministic.py
        from judgetune.lm._deterministic import DeterministicModel

        model = DeterministicModel(n_ctx=n_ctx, delay=TEST_MODELS[spec.model])
        return JudgeLM(spec, cache=cache, model=model, model_id=f"{spec}:{model.version}")
    path = model_file(spec)
    backend = backend or ("transformers" if spec.kind == "hf" else "llamacpp")
    model = _in_process_model(path, backend, n_ctx=n_ctx, n_threads=n_threads or embedded_threads())
    fingerprint = cache.file_fingerprint(path) if cache is not None and path.is_file() else str(path.resolve())
    return JudgeLM(spec, cache=cache, model=model, model_id=f"{backend}:{fingerprint}")


def _endpoint_origin(given: str | None, spec: LMSpec, trusted: bool, source: str) -> str:
    """Where the endpoint in use was set, for the advice of a server error: ``--api-base``, the environment's
    base-URL variable, or the file ``source`` (a judge.json, a study) that named it."""
    if given is None and spec.api_base is not None:
        return next(f"${n}" for n in BASE_URL_ENVS if os.environ.get(n, "").strip())
    if given is None:
        return "--api-base (none was given: OpenAI's endpoint)"
    return "--api-base" if trusted else f"the endpoint {source} names, or pass --api-base"


def _remote_endpoint(spec: LMSpec, trusted: bool, source: str) -> tuple[LMSpec, bool, str | None]:
    """An ``openai/MODEL`` spec's endpoint (the OpenAI SDK's base-URL variable when none is named), whether the key
    is sent there, and the warning when it is withheld (said once here; the items still go there)."""
    named = next((os.environ[n].strip() for n in BASE_URL_ENVS if os.environ.get(n, "").strip()), None)
    if spec.api_base is None and named:  # the OpenAI SDK's variable: the endpoint its key is meant for
        check_endpoint(named)
        spec = dataclasses.replace(spec, api_base=named)
    send_key = trusted or is_trusted(spec.api_base)
    withheld = None if send_key else untrusted_hint(spec.api_base or OPENAI_ENDPOINT, source)
    if withheld and os.environ.get(API_KEY_ENV):
        log.warning("%s", withheld)
    elif withheld:  # no key to withhold, but the items themselves go to an endpoint the user did not name
        log.warning("%s names the endpoint %s, which you have not named or trusted: every item scored is sent "
                    "there. Pass --api-base to choose the endpoint yourself", source, spec.api_base or OPENAI_ENDPOINT)
    return spec, send_key, withheld


def _in_process_model(path: Path, backend: str, *, n_ctx: int, n_threads: int):
    if backend == "llamacpp":
        from judgetune.lm._llamacpp import LlamaCppModel

        return LlamaCppModel(path, n_ctx=n_ctx, n_threads=n_threads)
    if backend == "transformers":
        from judgetune.lm._transformers import TransformersModel

        return TransformersModel(path, n_threads=n_threads)
    raise ValueError(f"backend must be 'llamacpp' or 'transformers', got {backend!r}")
