"""File helpers shared across packages: checksums, and the one way outputs are written.

Every output (predictions, summaries, reports, plots) goes through :func:`atomic_write`: the content
lands in a temporary file in the target's folder, which is renamed over the target only when it is
complete. An interrupted or failed write leaves the old file (or no file), never half of one; a
hard link or symlink to an input is never written through (see :func:`same_file`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

from judgetune.errors import JudgetuneError

__all__ = ["atomic_write", "clashes", "make_folder", "same_file", "sha256_of", "write_bytes", "write_text"]


def make_folder(path: str | Path) -> Path:
    """``path`` as a folder (created with its parents), or a named error when a file stands in the way."""
    path = Path(path)
    blocked = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise JudgetuneError(f"cannot make the folder {path}: {blocked} is a file, not a folder")
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file (same device and inode: a hard link, a symlink, ``./x`` and ``x``).

    False when either does not exist.
    """
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def clashes(out: str | Path, inputs: Iterable[str | Path]) -> str | Path | None:
    """The first of ``inputs`` that ``out`` is, by identity or by resolved path; None when none."""
    target = Path(out).resolve()
    for path in inputs:
        if same_file(out, path) or target == Path(path).resolve():
            return path
    return None


@contextlib.contextmanager
def atomic_write(path: str | Path, mode: str = "w", *, encoding: str | None = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary file beside ``path`` for writing; on success it replaces ``path`` (a rename, so
    readers see the old file or the new one, and a link at ``path`` is replaced, not written through).

    On an exception (or Ctrl-C) the temporary file is removed and ``path`` is left as it was.

    Example:
        >>> with atomic_write("scores.jsonl") as out:  # doctest: +SKIP
        ...     out.write('{"id": 1}\\n')
    """
    path = Path(path)
    binary = "b" in mode
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb" if binary else "w", **({} if binary else {"encoding": encoding})) as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        if path.exists():  # keep the permissions the old file had
            with contextlib.suppress(OSError):
                os.chmod(temp, path.stat().st_mode & 0o777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temp, 0o666 & ~umask)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def write_text(path: str | Path, text: str) -> Path:
    """``path.write_text(text)``, atomically (UTF-8)."""
    with atomic_write(path) as out:
        out.write(text)
    return Path(path)


def write_bytes(path: str | Path, data: bytes) -> Path:
    """``path.write_bytes(data)``, atomically."""
    with atomic_write(path, "wb") as out:
        out.write(data)
    return Path(path)
