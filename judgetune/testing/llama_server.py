"""Real llama.cpp OpenAI-compatible servers on 127.0.0.1, for tests and benchmarks: llama-cpp-python's
(``python -m llama_cpp.server``, :class:`LlamaServer`) and llama.cpp's C++ ``llama-server`` (:class:`LlamaCppServer`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from judgetune.lm import embedded_threads

__all__ = ["LlamaCppServer", "LlamaServer", "free_port"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _ServerProcess:
    """A server process on a free port of 127.0.0.1, as a context manager: started on enter, and up once it lists
    its models; stopped on exit. Subclasses set ``name`` and build ``command`` from ``self.port``."""

    name = "server"

    def __init__(self, gguf: str | Path, log_path: str | Path, startup: float):
        self.gguf, self.log_path, self.startup = str(gguf), Path(log_path), startup
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self.command: list[str] = []
        self.process: subprocess.Popen | None = None

    @property
    def model(self) -> str:
        return self.gguf

    def __enter__(self):
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
        deadline = time.monotonic() + self.startup
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.process.returncode}:\n{self._tail()}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"{self.name} not up after {self.startup:.0f} s:\n{self._tail()}")
            time.sleep(0.25)

    def _tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def __exit__(self, *exc) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


class LlamaServer(_ServerProcess):
    """llama-cpp-python's server on ``gguf``. Use as a context manager; ``base_url`` is its ``.../v1`` address,
    ``model`` the name it lists.

    Raises:
        RuntimeError: the server exited or was not up within ``startup`` seconds (with its log's tail).
    """

    name = "llama.cpp server"

    def __init__(self, gguf: str | Path, log_path: str | Path, *, n_ctx: int = 2048, n_threads: int | None = None,
                 logits_all: bool = False, startup: float = 60.0):
        super().__init__(gguf, log_path, startup)
        self.command = [sys.executable, "-m", "llama_cpp.server", "--model", self.gguf, "--host", "127.0.0.1",
                        "--port", str(self.port), "--n_ctx", str(n_ctx),
                        "--n_threads", str(n_threads or embedded_threads()),
                        *(["--logits_all", "true"] if logits_all else [])]


class LlamaCppServer(_ServerProcess):
    """llama.cpp's C++ ``llama-server`` (``binary``, see ``.ci/llama_server.sh``) on ``gguf``, one slot, without
    flash attention (its default on a CPU moves label log-probabilities by up to 0.09 nats from llama-cpp-python's
    in-process ones; measured on SmolLM2, 1e-4 without it). ``extra``: more of its options. Used as
    :class:`LlamaServer` is.

    Raises:
        RuntimeError: the server exited or was not up within ``startup`` seconds (with its log's tail).
    """

    name = "llama-server"

    def __init__(self, binary: str | Path, gguf: str | Path, log_path: str | Path, *extra: str, n_ctx: int = 4096,
                 n_threads: int | None = None, startup: float = 120.0):
        super().__init__(gguf, log_path, startup)
        self.command = [str(binary), "-m", self.gguf, "--host", "127.0.0.1", "--port", str(self.port),
                        "-c", str(n_ctx), "-np", "1", "-t", str(n_threads or embedded_threads()), "--no-webui",
                        "-fa", "off", *extra]
