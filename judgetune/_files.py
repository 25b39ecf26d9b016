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

__all__ = ["OutputLock", "atomic_write", "clashes", "make_folder", "remove_stale_temps", "same_file", "sha256_of",
           "write_bytes", "write_text"]


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


class OutputLock:
    """One writer per output: an exclusive ``fcntl`` lock on ``.NAME.lock`` beside ``path``, held while the
    ``with`` block runs and released by the OS if the process dies (a SIGKILL leaves no stale lock).

    A second writer is refused at once with a one-line :class:`JudgetuneError` naming the holder's pid.

    Example:
        >>> with OutputLock("scores.jsonl", what="judgetune score"):  # doctest: +SKIP
        ...     ...
    """

    def __init__(self, path: str | Path, *, what: str = "another judgetune command"):
        self.path = Path(path)
        self.lock_path = self.path.with_name(f".{self.path.name}.lock")
        self.what = what
        self._fd: int | None = None

    def __enter__(self) -> OutputLock:
        import fcntl

        while True:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
                os.close(fd)
                raise JudgetuneError(f"{self.path}: {self.what} is already writing it (pid {holder}); wait for it "
                                     "to finish, or write elsewhere") from None
            try:  # the file we locked may have been removed by the holder we waited for: lock the new one
                same = os.fstat(fd).st_ino == os.stat(self.lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.lock_path)
        os.close(self._fd)  # releases the lock
        self._fd = None


def remove_stale_temps(path: str | Path) -> list[Path]:
    """Remove the temporary files an interrupted :func:`atomic_write` of ``path`` left (``.NAME.XXXX.tmp``);
    call it while holding ``path``'s :class:`OutputLock`, so no live write loses its file."""
    path = Path(path)
    removed = []
    for temp in path.parent.glob(f".{glob_escape(path.name)}.*.tmp"):
        with contextlib.suppress(OSError):
            temp.unlink()
            removed.append(temp)
    return removed


def glob_escape(name: str) -> str:
    """``name`` with glob's special characters taken literally."""
    import glob

    return glob.escape(name)
