"""The label position over a server: the prompt ends where the label goes, and the next token's
log-probabilities are read there, as an in-process model reads them.

Two ways, tried in this order:

- ``completions``: the legacy ``/completions`` endpoint with the chat prompt rendered here, ending at
  the answer prefix (``... [[ ## score ## ]]\\n``). It needs the model's chat template on this side: the
  template of the embedded model of the same name (``openai/smollm2`` served from SmolLM2's GGUF), of
  a GGUF file named as the model (``openai//models/x.gguf``), or one given to ``load_lm(chat_template=)``
  (a GGUF path, or the Jinja text itself). llama-cpp-python's server gets this way.
- ``prefill``: the chat endpoint with the answer prefix as a trailing assistant message that the server
  continues (``continue_final_message``, as vLLM takes it; llama.cpp's C++ server continues one by
  itself). Chosen only when asked for (``label_position="prefill"``): a server that opens a new turn
  instead cannot be told apart from its answer alone.

A label the server lists among the ``TOP`` most probable next tokens gets its log-probability; when a
label is not listed, the ``WIDE`` most probable are asked for (llama-cpp-python lists them; a server that
refuses is not asked again). A label of several characters still not listed is scored through the echo
of prompt + label (exact when the server echoes aligned log-probabilities), else it is missing
(probability 0), as in the older marker-reading path.
"""

from __future__ import annotations

import functools
import logging
import math
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from judgetune.lm._labels import LabelDistribution
from judgetune.lm._modes import LogprobsUnavailableError
from judgetune.lm._remote import LMCallError, OpenAICompatibleClient, classify
from judgetune.lm._spec import LMSpec, LMSpecError, model_file, parse_lm_spec
from judgetune.lm._targets import remote_target_logprobs

__all__ = ["LABEL_POSITIONS", "TOP", "WIDE", "ServerLabelReader", "chat_formatter"]

log = logging.getLogger(__name__)
_DECIDING = threading.Lock()
LABEL_POSITIONS = ("completions", "prefill")
TOP = 20  # next-token alternatives asked for
WIDE = 1000  # asked for when a label is not among the TOP (llama-cpp-python lists any number)


@functools.lru_cache(maxsize=4)
def chat_formatter(source: str):
    """A renderer of the chat template in a GGUF file (``source`` a path), or of the Jinja text ``source``,
    exactly as llama-cpp-python renders it (its own server and the in-process engine use the same one)."""
    from judgetune.lm.llama_build import prepare_import

    prepare_import()
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    if source.endswith(".gguf") and Path(source).is_file():
        from llama_cpp import Llama

        llm = Llama(source, vocab_only=True, verbose=False)
        template = llm.metadata.get("tokenizer.chat_template")
        if not template:
            from judgetune.lm._llamacpp import no_template_message

            raise LMSpecError(no_template_message(source))
        piece = lambda token: llm.detokenize([token], special=True).decode()  # noqa: E731
        return Jinja2ChatFormatter(template, eos_token=piece(llm.token_eos()), bos_token=piece(llm.token_bos()))
    return Jinja2ChatFormatter(source, eos_token="", bos_token="")


def template_source(spec: LMSpec, chat_template: str | None = None) -> str | None:
    """Where the chat template of a served model comes from: ``chat_template``, else a GGUF file named
    by the model, else the embedded model of that name; None when none is known here."""
    if chat_template:
        return chat_template
    if spec.model.endswith(".gguf") and Path(spec.model).expanduser().is_file():
        return str(Path(spec.model).expanduser())
    try:
        return str(model_file(parse_lm_spec(f"local:{spec.model}")))
    except (LMSpecError, ValueError, KeyError):
        return None


class ServerLabelReader:
    """Reads label distributions at the answer position of a served model (see the module docstring).

    Args:
        client: the server's client.
        way: ``completions`` or ``prefill``; None picks ``completions`` when a template is known and the
            server answers a probe with next-token log-probabilities.
        chat_template: see :func:`template_source`.
    """

    def __init__(self, client: OpenAICompatibleClient, *, way: str | None = None, chat_template: str | None = None):
        if way is not None and way not in LABEL_POSITIONS:
            raise ValueError(f"label_position must be one of {list(LABEL_POSITIONS)}, got {way!r}")
        self.client, self.requested, self.chat_template = client, way, chat_template
        self._way: tuple[str | None, str] | None = None
        self.wide = True  # whether the server may list WIDE alternatives

    @property
    def where(self) -> str:
        return f"{self.client.spec} at {self.client.spec.endpoint}"

    def way(self) -> tuple[str | None, str]:
        """(the way labels are read, why); (None, why) when neither works. Decided once, and said once."""
        with _DECIDING:  # one probe, and one template load (llama.cpp swaps the process's stdout while loading)
            if self._way is None:
                self._way = self._decide()
                way, why = self._way
                log.warning("label position: %s", why if way else f"{why}; labels are read in generated answers")
        return self._way

    def _decide(self) -> tuple[str | None, str]:
        if self.requested == "prefill":
            return "prefill", f"{self.where}: the answer prefix is sent as an assistant turn to continue (asked for)"
        source = template_source(self.client.spec, self.chat_template)
        if source is None:
            return None, (f"{self.where}: no chat template known here to render the prompt for /completions "
                          "(name the model's GGUF, or pass chat_template=, or label_position='prefill')")
        try:
            top = self._next_top(chat_formatter(source)(messages=[{"role": "user", "content": "Say yes."}]).prompt)
        except LMCallError as err:
            if classify(err) == "unsupported":
                return None, f"{self.where}: /completions refused a request for logprobs ({err})"
            raise
        if not top:
            return None, f"{self.where}: /completions returned no next-token log-probabilities"
        return "completions", f"{self.where}: /completions with the prompt ending at the label (template of {source})"

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
        if way is None:
            raise ValueError(why)
        if way == "completions":
            prompt = chat_formatter(template_source(self.client.spec, self.chat_template))(messages=messages).prompt
            text = prompt + prefix
            choice, usage = self.client.complete_text(text, max_tokens=1, logprobs=TOP)
            top = _first_top(choice)
            if self.wide and any(label not in top for label in labels):  # a label below the top 20: look wider
                try:
                    choice, usage = self.client.complete_text(text, max_tokens=1, logprobs=WIDE)
                    top = {**top, **_first_top(choice)}
                except LMCallError as err:
                    if classify(err) != "unsupported":
                        raise
                    self.wide = False  # the server caps the alternatives (OpenAI: 5, vLLM: 20 by default)
        else:
            completion = self.client.complete([*messages, {"role": "assistant", "content": prefix}], max_tokens=1,
                                              top_logprobs=TOP, extra={"continue_final_message": True,
                                                                       "add_generation_prompt": False})
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

    def _echoed(self, prompt: str, label: str) -> float:
        try:
            return remote_target_logprobs(self.client, prompt, label).total
        except LogprobsUnavailableError:
            return -math.inf


def _first_top(choice: dict[str, Any]) -> dict[str, float]:
    """The first answer token's alternatives, ``{token: logprob}`` (legacy completions layout)."""
    logprobs = choice.get("logprobs") or {}
    tops = logprobs.get("top_logprobs") or []
    if not tops or not isinstance(tops[0], dict):
        return {}
    return {str(token): float(lp) for token, lp in tops[0].items() if lp is not None and math.isfinite(float(lp))}
