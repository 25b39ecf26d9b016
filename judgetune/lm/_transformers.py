"""The transformers backend for ``hf:PATH`` checkpoints (and GGUF files, dequantized): the same
interface as the llama.cpp backend, with the prompt's KV cache kept between calls."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from judgetune.lm._llamacpp import GeneratedToken


class TransformersModel:
    """A causal LM in transformers, on the CPU, in float32. Generation is greedy (or sampled with a
    seed) token by token on the cached prompt; JSON-schema constraints need the llama.cpp backend."""

    backend = "transformers"

    def __init__(self, path: str | Path, *, n_threads: int = 2):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(n_threads)
        path = Path(path)
        kwargs = {"gguf_file": path.name} if path.suffix == ".gguf" else {}
        where = str(path.parent if path.suffix == ".gguf" else path)
        self.path = path
        self._tokenizer = AutoTokenizer.from_pretrained(where, **kwargs)
        self._model = AutoModelForCausalLM.from_pretrained(where, torch_dtype=torch.float32, **kwargs).eval()
        self._torch = torch
        self._lock = threading.RLock()
        self._cached_tokens: list[int] = []
        self._cache = None
        self.evaluated_tokens = 0

    @property
    def n_vocab(self) -> int:
        return self._model.config.vocab_size

    def render(self, messages: list[dict[str, str]], prefix: str = "") -> str:
        return self._tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + prefix

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False, split_special_tokens=not special)

    def token_text(self, token_id: int) -> str:
        return self._tokenizer.decode([token_id])

    @contextmanager
    def locked(self) -> Iterator[None]:
        with self._lock:
            yield

    def next_logprobs(self, tokens: list[int]) -> np.ndarray:
        """Log-probabilities of the next token, running only the part not in the kept KV cache."""
        from transformers import DynamicCache

        torch = self._torch
        with self._lock, torch.inference_mode():
            keep = 0
            for a, b in zip(self._cached_tokens, tokens[:-1]):
                if a != b:
                    break
                keep += 1
            if self._cache is None or keep == 0:
                self._cache, keep = DynamicCache(), 0
            elif keep < self._cache.get_seq_length():
                self._cache.crop(keep - self._cache.get_seq_length())  # a negative count removes tokens
            new = torch.tensor([tokens[keep:]])
            out = self._model(input_ids=new, past_key_values=self._cache, use_cache=True)
            self._cache = out.past_key_values
            self._cached_tokens = list(tokens)
            self.evaluated_tokens += len(tokens) - keep
            return torch.log_softmax(out.logits[0, -1].double(), dim=-1).numpy()

    def generate(self, tokens: list[int], *, max_tokens: int, temperature: float = 0.0, stop: tuple[str, ...] = (),
                 json_schema: dict | None = None, want_logprobs: bool = False,
                 seed: int | None = None) -> tuple[list[GeneratedToken], str, bytes]:
        if json_schema is not None:
            raise ValueError("JSON-schema-constrained generation needs the llama.cpp backend")
        rng = np.random.default_rng(seed)
        eos = self._tokenizer.eos_token_id
        with self._lock:
            out: list[GeneratedToken] = []
            finish, text = "length", b""
            for _ in range(max_tokens):
                logprobs = self.next_logprobs(tokens + [t.token_id for t in out])
                if temperature:
                    p = np.exp(logprobs / temperature - np.max(logprobs / temperature))
                    token = int(rng.choice(len(p), p=p / p.sum()))
                else:
                    token = int(np.argmax(logprobs))
                if token == eos:
                    finish = "stop"
                    break
                piece = self._tokenizer.decode([token]).encode()
                out.append(GeneratedToken(token, piece, logprobs if want_logprobs else None))
                text = self._tokenizer.decode([t.token_id for t in out]).encode()
                hits = [text.index(s.encode()) for s in stop if s.encode() in text]
                if hits:
                    text, finish = text[: min(hits)], "stop"
                    break
            return out, finish, text

    def close(self) -> None:
        self._cache = None
