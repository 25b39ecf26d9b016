"""The label position over a server: where the label distribution of a judge is read, and the probe that
chooses it.

Three ways, tried in this order when none is asked for:

- ``completions``: the legacy ``/completions`` endpoint with the chat prompt rendered here, ending at
  the answer prefix (``... [[ ## score ## ]]\\n``); the next token's log-probabilities are read there, as an
  in-process model reads them. It needs the model's chat template on this side: the template of the
  embedded model of the same name (``openai/smollm2`` served from SmolLM2's GGUF), of a GGUF file named
  as the model (``openai//models/x.gguf``), or one given to ``load_lm(chat_template=)`` (a GGUF path, or
  the Jinja text itself). llama-cpp-python's server and llama.cpp's ``llama-server`` get this way.
- ``prefill``: the chat endpoint with the answer prefix as a trailing assistant message that the server
  continues (``continue_final_message``, as vLLM takes it; llama.cpp's ``llama-server`` continues one by
  itself). One request tells whether the server continues such a turn: asked to repeat a sentence, with
  the turn ending one word short, a server that continues writes the last word; one that opens a new
  turn starts over.
- ``generated``: the model writes its answer and the labels are read at the token after the marker it
  wrote (``top_logprobs``); an item fails when the marker is missing. Judges take this way when the label
  position is None (see ``JudgeLM.label_position``).

A way asked for (``label_position=``), or frozen in a judge.json, is checked, never replaced: a server that
does not offer it stops the run in one line (:class:`LabelPositionError`).

The ``WIDE`` most probable next tokens are asked for (llama-cpp-python and llama-server list them), in one
request per item: a second request for the same prompt would be computed from the server's prompt cache
in another way, and llama-server's numbers then depend on the order of the requests (measured: up to 0.08
on a 0-5 score). A server that refuses that many is asked for the ``TOP`` 20 from then on, and a label
outside them is missing (probability 0) unless, having several characters, it is scored through the echo
of prompt + label (exact when the server echoes aligned log-probabilities).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from judgetune.errors import JudgetuneError, printable
from judgetune.lm._labels import LabelDistribution
from judgetune.lm._modes import LogprobsUnavailableError
from judgetune.lm._remote import LMCallError, OpenAICompatibleClient, classify
from judgetune.lm._spec import LOCAL_MODELS, OPTIONAL_LOCAL_MODELS, LMSpec, LMSpecError, model_file, parse_lm_spec
from judgetune.lm._targets import remote_target_logprobs

__all__ = ["LABEL_POSITIONS", "TOP", "WIDE", "LabelPositionError", "ServerLabelReader", "chat_formatter",
           "template_identity", "template_source"]

log = logging.getLogger(__name__)
_DECIDING = threading.Lock()
LABEL_POSITIONS = ("completions", "prefill", "generated")
TOP = 20  # next-token alternatives asked for
WIDE = 1000  # asked for when a label is not among the TOP (llama-cpp-python lists any number)
# the prefill probe: the user's request, the assistant turn to continue, and the word a continuation starts with
CONTINUE_PROBE = ("Repeat this sentence exactly: The quick brown fox jumps over the lazy dog.",
                  "The quick brown fox jumps over the lazy", "dog")
TEXT_SOURCE = "text"  # the source recorded for a chat template given as Jinja text


class LabelPositionError(JudgetuneError):
    """A label position asked for, or frozen in a judge.json, that the server (or this machine) does not offer."""


@functools.lru_cache(maxsize=8)
def _template(source: str) -> tuple[str, str, str]:
    """The chat template of ``source`` (``local:NAME``, a GGUF path or Jinja text) with its eos and bos pieces."""
    from judgetune.lm.llama_build import prepare_import

    if source.startswith("local:") or (source.endswith(".gguf") and Path(source).expanduser().is_file()):
        path = model_file(parse_lm_spec(source)) if source.startswith("local:") else Path(source).expanduser()
        prepare_import()
        from llama_cpp import Llama

        llm = Llama(str(path), vocab_only=True, verbose=False)
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            from judgetune.lm._llamacpp import no_template_message

            raise LMSpecError(no_template_message(path))
        piece = lambda token: llm.detokenize([token], special=True).decode()  # noqa: E731
        return template, piece(llm.token_eos()), piece(llm.token_bos())
    if source.endswith(".gguf"):
        raise LMSpecError(f"chat template: no such GGUF file {source}")
    return source, "", ""


@functools.lru_cache(maxsize=8)
def chat_formatter(source: str):
    """A renderer of the chat template of ``source`` (``local:NAME``, a GGUF path or Jinja text), exactly as
    llama-cpp-python renders it (its own server and the in-process engine use the same one)."""
    from judgetune.lm.llama_build import prepare_import

    prepare_import()
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    template, eos, bos = _template(source)
    return Jinja2ChatFormatter(template, eos_token=eos, bos_token=bos)


def template_identity(source: str) -> dict[str, str]:
    """What judge.json records of the chat template of ``source``: where it came from (``local:NAME``, the GGUF
    path, or ``text`` for Jinja text given as such) and the SHA-256 of its Jinja text."""
    shown = source if source.startswith("local:") or source.endswith(".gguf") else TEXT_SOURCE
    return {"source": shown, "sha256": hashlib.sha256(_template(source)[0].encode()).hexdigest()}


def template_source(spec: LMSpec, chat_template: str | None = None) -> str | None:
    """Where the chat template of a served model comes from: ``chat_template``, else a GGUF file named
    by the model, else the embedded model of that name (``local:NAME``); None when none is known here."""
    if chat_template:
        return chat_template
    if spec.model.endswith(".gguf") and Path(spec.model).expanduser().is_file():
        return str(Path(spec.model).expanduser())
    if spec.model in (*LOCAL_MODELS, *OPTIONAL_LOCAL_MODELS):
        try:
            model_file(parse_lm_spec(f"local:{spec.model}"))
        except (LMSpecError, ValueError, KeyError):
            return None
        return f"local:{spec.model}"
    return None


class ServerLabelReader:
    """Reads label distributions at the answer position of a served model (see the module docstring).

    Args:
        client: the server's client.
        way: ``completions``, ``prefill`` or ``generated``; None: the first of them the server offers.
        chat_template: see :func:`template_source`.
    """

    def __init__(self, client: OpenAICompatibleClient, *, way: str | None = None, chat_template: str | None = None):
        if way is not None and way not in LABEL_POSITIONS:
            raise ValueError(f"label_position must be one of {list(LABEL_POSITIONS)}, got {way!r}")
        self.client, self.requested, self.chat_template = client, way, chat_template
        self.frozen: dict[str, Any] | None = None  # {label_position, chat_template, where} a judge.json requires
        self.template: dict[str, str] | None = None  # the identity of the template read with (completions)
        self._way: tuple[str, str] | None = None
        self._template_source: str | None = None  # what the template of ``completions`` is read from
        self.narrow: set[str] = set()  # the endpoints (text, chat) that refused WIDE alternatives

    @property
    def where(self) -> str:
        return f"{self.client.spec} at {self.client.spec.endpoint}"

    def way(self) -> tuple[str, str]:
        """(the way labels are read, why): ``completions``, ``prefill`` or ``generated``. Decided once, and said once.

        Raises:
            LabelPositionError: the way asked for, or frozen, is not offered (one line saying what is missing).
        """
        with _DECIDING:  # one probe, and one template load (llama.cpp swaps the process's stdout while loading)
            if self._way is None:
                try:
                    self._way = self._decide()
                except LMCallError as err:  # each item that needs the way fails so, and the next item probes again
                    raise LMCallError(f"the label-position probe failed, so this item's labels were not read: "
                                      f"{err}") from err.__cause__
                log.warning("label position %s: %s: %s", self._way[0], self.where, self._way[1])
        return self._way

    def freeze(self, way: str, template: dict[str, str] | None, where: str) -> None:
        """Read labels as the judge ``where`` (its judge.json) was tuned to, ``way`` with the chat template of
        identity ``template`` for ``completions``; checked now.

        Raises:
            LabelPositionError: the server no longer offers it, the template differs, or this LM reads labels
                another way already.
        """
        if way not in LABEL_POSITIONS:
            raise LabelPositionError(f"{where}: lm.label_position: expected one of {', '.join(LABEL_POSITIONS)}, "
                                     f"found {printable(repr(way))}")
        with _DECIDING:
            current = self._way[0] if self._way is not None else self.requested
            if current not in (None, way):
                raise LabelPositionError(f"{where}: labels are read at label position {way}, as the judge was tuned, "
                                         f"but this LM reads them at {current} (label_position={current!r})")
            if template and self.template and template.get("sha256") != self.template["sha256"]:
                raise LabelPositionError(f"{where}: labels are read with the chat template of {template.get('source')} "
                                         f"(sha256 {str(template.get('sha256'))[:12]}...), as the judge was tuned, but "
                                         f"this LM renders {self.template['source']}'s (sha256 "
                                         f"{self.template['sha256'][:12]}...)")
            self.requested, self.frozen = way, {"label_position": way, "chat_template": template, "where": where}
        self.way()

    def _decide(self) -> tuple[str, str]:
        asked = self.requested
        if asked == "generated":
            return "generated", f"labels are read in generated answers, after their marker ({self._by()})"
        tried = []
        for way, offered in (("completions", self._completions), ("prefill", self._prefill)):
            if asked not in (None, way):
                continue
            found, why = offered()
            if found:
                return way, f"{why}" + (f" ({self._by()})" if asked else "")
            if asked:
                raise LabelPositionError(self._refusal(way, why))
            tried.append(why)
        return "generated", "; ".join(tried) + "; labels are read in generated answers, after their marker"

    def _by(self) -> str:
        return "as the judge was tuned" if self.frozen else "asked for"

    def _refusal(self, way: str, why: str) -> str:
        if self.frozen:
            return (f"{self.frozen['where']}: labels are read at label position {way}, as the judge was tuned, but "
                    f"{self.where}: {why}: score it where that is offered (or tune it again on this server)")
        return (f"label position {way} (asked for): {self.where}: {why}; choose another (--label-position), or leave "
                "it unset to have the probe choose")

    def _completions(self) -> tuple[bool, str]:
        """(does ``/completions`` give next-token log-probabilities with a chat template known here, why)."""
        frozen = (self.frozen or {}).get("chat_template")
        source = self.chat_template or (frozen["source"] if frozen and frozen.get("source") != TEXT_SOURCE else None)
        source = source or template_source(self.client.spec)
        if source is None:
            if frozen:
                return False, (f"its chat template was given as text (sha256 {frozen.get('sha256', '?')[:12]}...) "
                               "and is not known here (pass the same chat_template= to load_lm)")
            return False, ("no chat template known here to render the prompt for /completions (name the model's "
                           "GGUF, or pass chat_template=)")
        try:
            identity = template_identity(source)
        except LMSpecError as err:
            return False, f"the chat template of {source} cannot be read here ({err})"
        if frozen and identity["sha256"] != frozen.get("sha256"):
            return False, (f"the chat template of {identity['source']} here (sha256 {identity['sha256'][:12]}...) is "
                           f"not the one it was tuned with ({frozen.get('source')}, sha256 "
                           f"{str(frozen.get('sha256'))[:12]}...)")
        try:
            top = self._next_top(chat_formatter(source)(messages=[{"role": "user", "content": "Say yes."}]).prompt)
        except LMCallError as err:
            if classify(err) == "unsupported":
                return False, f"/completions refused a request for logprobs ({err})"
            raise
        if not top:
            return False, "/completions returned no next-token log-probabilities"
        self.template, self._template_source = identity, source
        return True, f"/completions with the prompt ending at the label (template of {identity['source']})"

    def _prefill(self) -> tuple[bool, str]:
        """(does the chat endpoint continue a trailing assistant turn, why): one request (``CONTINUE_PROBE``)."""
        ask, start, word = CONTINUE_PROBE
        try:
            completion = self.client.complete([{"role": "user", "content": ask}, {"role": "assistant", "content": start}],
                                              max_tokens=2, extra=_CONTINUE)
        except LMCallError as err:
            if classify(err) == "unsupported":
                return False, f"the chat endpoint refused a trailing assistant turn to continue ({err})"
            raise
        text = completion.text.removeprefix(start)  # a server may repeat the turn it continued
        if text.strip().lower().startswith(word):
            return True, "the chat endpoint continues a trailing assistant turn ending at the label"
        return False, (f"the chat endpoint does not continue a trailing assistant turn (asked to continue {start!r}, it "
                       f"answered {printable(repr(completion.text[:40]))})")

    def _next_top(self, prompt: str) -> dict[str, float]:
        choice, _ = self.client.complete_text(prompt, max_tokens=1, logprobs=TOP)
        return _first_top(choice)

    def distribution(self, messages: list[dict[str, str]], labels: Sequence[str], prefix: str) -> LabelDistribution:
        """log p(label) at the position after ``prefix`` for each label.

        Raises:
            ValueError: no way to read labels on this server (call :meth:`way` first to know).
            LMCallError: the call failed (after retries).
        """
        way, why = self.way()
        if way == "generated":
            raise ValueError(why)
        if way == "completions":
            text = chat_formatter(self._template_source)(messages=messages).prompt + prefix
            choice, usage = self._widest(lambda n: self.client.complete_text(text, max_tokens=1, logprobs=n), "text")
            top = _first_top(choice)
        else:
            sent = [*messages, {"role": "assistant", "content": prefix}]
            completion = self._widest(lambda n: self.client.complete(sent, max_tokens=1, top_logprobs=n,
                                                                     extra=_CONTINUE), "chat")
            first = (completion.logprobs or [{}])[0]
            top = {t["token"]: float(t["logprob"]) for t in first.get("top_logprobs") or []}
            usage, text = completion.usage, None
        logprobs = []
        for label in labels:
            if label in top:
                logprobs.append(top[label])
            elif len(label) > 1 and text is not None:
                logprobs.append(self._echoed(text, label))
            else:
                logprobs.append(-math.inf)
        missing = tuple(label for label, lp in zip(labels, logprobs) if lp == -math.inf)
        return LabelDistribution(tuple(labels), tuple(logprobs), missing, usage=dict(usage))

    def _widest(self, call, endpoint: str):
        """``call(n)`` with ``n = WIDE`` alternatives, or ``TOP`` once the endpoint refused ``WIDE`` (then never asked
        again). One request per item: the labels' numbers never depend on which request came before."""
        if endpoint in self.narrow:
            return call(TOP)
        try:
            return call(WIDE)
        except LMCallError as err:
            if classify(err) != "unsupported":
                raise
        self.narrow.add(endpoint)  # the server caps the alternatives (OpenAI: 5 or 20, vLLM: 20 by default)
        return call(TOP)

    def _echoed(self, prompt: str, label: str) -> float:
        try:
            return remote_target_logprobs(self.client, prompt, label).total
        except LogprobsUnavailableError:
            return -math.inf


_CONTINUE = {"continue_final_message": True, "add_generation_prompt": False}


def _first_top(choice: dict[str, Any]) -> dict[str, float]:
    """The first answer token's alternatives, ``{token: logprob}``: the legacy completions layout
    (``top_logprobs: [{token: logprob}]``, llama-cpp-python, vLLM) or the chat one (``content: [{top_logprobs:
    [{token, logprob}]}]``, llama.cpp's ``llama-server``)."""
    logprobs = choice.get("logprobs") or {}
    if not isinstance(logprobs, dict):
        return {}
    tops = logprobs.get("top_logprobs") or []
    if tops and isinstance(tops[0], dict):
        pairs = list(tops[0].items())
    else:
        content = logprobs.get("content") or []
        first = content[0] if content and isinstance(content[0], dict) else {}
        pairs = [(t.get("token"), t.get("logprob")) for t in first.get("top_logprobs") or [] if isinstance(t, dict)]
    out: dict[str, float] = {}
    for token, lp in pairs:
        if isinstance(token, str) and isinstance(lp, (int, float)) and math.isfinite(float(lp)):
            out.setdefault(token, float(lp))
    return out
