"""On-disk cache of LM answers and label distributions.

A key covers the full request, the model's identity (the SHA-256 of its weights file, or its name
on a server) and the endpoint, so two servers that serve one model name never share answers. Keys
and values never hold an API key: requests are built without one.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import diskcache

from judgetune._files import sha256_of
from judgetune.errors import JudgetuneError


def default_cache_dir() -> Path:
    return Path(os.environ.get("JUDGETUNE_CACHE_DIR", Path.home() / ".cache" / "judgetune"))


class ResponseCache:
    """A thread-safe JSON-value cache; ``hits`` and ``misses`` count lookups since creation."""

    def __init__(self, directory: str | Path | None = None):
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        try:
            self._store = diskcache.Cache(str(self.directory), size_limit=2**33)
        except (OSError, sqlite3.Error) as err:  # a file or a device where the folder should be, no permission
            raise JudgetuneError(f"the answer cache {self.directory} ($JUDGETUNE_CACHE_DIR) cannot be used "
                                 f"({err}): point $JUDGETUNE_CACHE_DIR at a writable folder (or pass --no-cache, where "
                                 "the command takes it)") from None
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(*, model: str, endpoint: str, request: dict[str, Any]) -> str:
        payload = json.dumps({"model": model, "endpoint": endpoint, "request": request}, sort_keys=True,
                             ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()  # a key never fails on text

    def get(self, key: str) -> Any | None:
        value = self._store.get(key)
        with self._lock:
            if value is None:
                self.misses += 1
            else:
                self.hits += 1
        return None if value is None else json.loads(value)

    def answers(self) -> int:
        """How many answers are stored (model fingerprints not counted)."""
        return sum(1 for key in self._store.iterkeys() if not str(key).startswith("sha256:"))

    def set(self, key: str, value: Any) -> None:
        self._store.set(key, json.dumps(value))

    def file_fingerprint(self, path: Path) -> str:
        """SHA-256 of a weights file, remembered per (path, size, mtime) so it is hashed once."""
        stat = path.stat()
        memo = f"sha256:{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"
        digest = self._store.get(memo)
        if digest is None:
            digest = sha256_of(path)
            self._store.set(memo, digest)
        return digest

    def close(self) -> None:
        self._store.close()


def cached(cache: ResponseCache | None, *, model: str, endpoint: str, request: dict[str, Any],
           compute: Callable[[], Any]) -> Any:
    """``compute()``'s plain-data answer, from the cache when it holds it (always computed without a cache)."""
    if cache is None:
        return compute()
    key = ResponseCache.key(model=model, endpoint=endpoint, request=request)
    value = cache.get(key)
    if value is None:
        value = compute()
        cache.set(key, value)
    return value
