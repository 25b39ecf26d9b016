"""A real llama.cpp OpenAI-compatible server (``python -m llama_cpp.server``) on 127.0.0.1, for tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

from judgetune.lm import embedded_threads


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    """Use as a context manager; ``base_url`` is its ``.../v1`` address, ``model`` the name it lists.

    Raises:
        RuntimeError: the server exited or was not up within ``startup`` seconds (with its log's tail).
    """

    def __init__(self, gguf: str | Path, log_path: str | Path, *, n_ctx: int = 2048, n_threads: int | None = None,
                 logits_all: bool = False, startup: float = 60.0):
        self.gguf, self.log_path, self.startup = str(gguf), Path(log_path), startup
        self.base_url = f"http://127.0.0.1:{free_port()}/v1"
        self.command = [sys.executable, "-m", "llama_cpp.server", "--model", self.gguf, "--host", "127.0.0.1",
                        "--port", self.base_url.split(":")[2].split("/")[0], "--n_ctx", str(n_ctx),
                        "--n_threads", str(n_threads or embedded_threads()),
                        *(["--logits_all", "true"] if logits_all else [])]
        self.process: subprocess.Popen | None = None

    @property
    def model(self) -> str:
        return self.gguf

    def __enter__(self) -> LlamaServer:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT,
                                            env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
        deadline = time.monotonic() + self.startup
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {self.process.returncode}:\n{self._tail()}")
            try:
                if httpx.get(f"{self.base_url}/models", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"llama.cpp server not up after {self.startup:.0f} s:\n{self._tail()}")
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
