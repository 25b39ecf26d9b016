"""File helpers shared across packages: the one way inputs are opened and outputs are written, locks, checksums.

Every input goes through :func:`open_regular` (or :func:`read_bounded`): only a regular file (after
symlinks) is opened, so a device (``/dev/zero``), a FIFO or a socket is refused at once instead of being
read forever, and a whole-file read stops at its limit whatever the file reports as its size.

Every output (predictions, summaries, reports, plots) goes through :func:`atomic_write`: the content
lands in a temporary file in the target's folder, which is renamed over the target only when it is
complete. An interrupted or failed write leaves the old file (or no file), never half of one; a
hard link or symlink to an input is never written through (see :func:`same_file`).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import filelock

from judgetune.errors import JudgetuneError, shown

try:
    import fcntl
except ImportError:  # not on Windows: locks are advisory there and left out
    fcntl = None  # type: ignore[assignment]

__all__ = ["FileKindError", "FileTooLargeError", "LockedError", "OutputLock", "atomic_write", "clashes", "exclusive",
           "make_folder", "open_regular", "read_bounded", "remove_stale_temps", "same_file", "sha256_of", "write_bytes",
           "write_text"]


class FileKindError(JudgetuneError, OSError):
    """An input that is not a regular file (a device, a FIFO, a socket): never read."""


class LockedError(JudgetuneError):
    """Another process holds the lock of a run folder or an output."""


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def open_regular(path: str | Path, what: str = "file") -> IO[bytes]:
    """``path`` opened for binary reading, when it is a regular file (symlinks followed).

    The file is opened without blocking (a FIFO would wait for a writer) and checked on the open handle, so a
    file swapped for a device between a check and the open is refused too.

    Raises:
        FileNotFoundError: no such file.
        FileKindError: a device, FIFO, socket or folder, named as such (``what`` says what was expected).
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except IsADirectoryError:
        raise FileKindError(f"{shown(path)}: expected a {what}, found a folder") from None
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise FileKindError(f"{shown(path)}: expected a {what}, found a symlink loop") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise FileKindError(f"{shown(path)}: expected a {what}, found a folder")
        if not stat.S_ISREG(mode):
            raise FileKindError(f"{shown(path)}: expected a {what} (a regular file), found {_kind(mode)}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_bounded(path: str | Path, limit: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; at most ``limit + 1`` bytes are ever read.

    Raises:
        FileNotFoundError, FileKindError: see :func:`open_regular`.
        FileTooLargeError: the file holds more than ``limit`` bytes.
    """
    with open_regular(path, what) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise FileTooLargeError(f"{shown(path)}: expected a {what} of at most {limit:,} bytes, found more")
    return data


class FileTooLargeError(JudgetuneError):
    """A whole-file input over its size limit."""


@contextlib.contextmanager
def exclusive(path: str | Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created when missing; ``filelock``) for the block; another
    process holding it: :class:`LockedError` at once, naming ``what``. The lock goes with the process (a
    killed run leaves no lock behind); the lock file itself stays.
    """
    lock = filelock.FileLock(path, timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise LockedError(f"{what} is in use by another judgetune process; wait for it to finish, or use "
                          "another name") from None
    except OSError:  # a read-only folder: nothing is written there either
        lock = None
    try:
        yield
    finally:
        if lock is not None:
            lock.release()


STALE_AFTER = 2.0  # seconds: a temporary file younger than this may be one a writer has just created


def remove_stale_temps(path: str | Path) -> list[Path]:
    """Remove the temporary files :func:`atomic_write` left beside ``path`` (``.NAME.XXXX.tmp``) when its
    process died mid-write (SIGKILL, power loss); returns them. A writer holds a lock on its temporary
    file while it writes, so a live one is never removed."""
    path = Path(path)
    removed = []
    try:
        candidates = list(path.parent.glob(f".{glob_escape(path.name)}.*.tmp"))
    except OSError:
        return removed
    for temp in candidates:
        try:
            if time.time() - temp.lstat().st_mtime < STALE_AFTER or not temp.is_file() or temp.is_symlink():
                continue
            with temp.open("rb") as handle:
                if fcntl is not None:
                    try:
                        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        continue  # a live writer
                temp.unlink()
                removed.append(temp)
        except OSError:
            continue
    return removed


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[]" else c for c in name)


def make_folder(path: str | Path) -> Path:
    """``path`` as a folder (created with its parents), or a named error when a file stands in the way."""
    path = Path(path)
    blocked = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise JudgetuneError(f"cannot make the folder {shown(path)}: {shown(blocked)} is a file, not a folder")
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open_regular(path) as handle:
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
    target = _resolved(out)
    for path in inputs:
        if same_file(out, path) or target == _resolved(path):
            return path
    return None


def _resolved(path: str | Path) -> Path:
    """``path`` resolved; as it is when it cannot be (a symlink loop)."""
    try:
        return Path(path).resolve()
    except (OSError, RuntimeError):  # Python 3.11 raises RuntimeError on a symlink loop
        return Path(os.path.abspath(path))


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
    remove_stale_temps(path)
    handle, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        if fcntl is not None:  # held while writing: remove_stale_temps leaves a live writer's file alone
            fcntl.flock(handle, fcntl.LOCK_EX)
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
    """One writer per output: an exclusive lock (``filelock``) on ``.NAME.lock`` beside ``path``, held while the
    ``with`` block runs and released by the OS if the process dies (a SIGKILL leaves no stale lock).

    A second writer is refused at once with a one-line :class:`JudgetuneError` naming the holder's pid (the
    holder writes it into the lock file).

    Example:
        >>> with OutputLock("scores.jsonl", what="judgetune score"):  # doctest: +SKIP
        ...     ...
    """

    def __init__(self, path: str | Path, *, what: str = "another judgetune command"):
        self.path = Path(path)
        self.lock_path = self.path.with_name(f".{self.path.name}.lock")
        self.what = what
        self._lock: filelock.BaseFileLock | None = None

    def __enter__(self) -> OutputLock:
        lock = filelock.FileLock(self.lock_path, timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            try:
                holder = self.lock_path.read_text(encoding="ascii", errors="replace").strip()[:32] or "unknown"
            except OSError:
                holder = "unknown"
            raise JudgetuneError(f"{self.path}: {self.what} is already writing it (pid {holder}); wait for it "
                                 "to finish, or write elsewhere") from None
        with contextlib.suppress(OSError):
            self.lock_path.write_text(str(os.getpid()), encoding="ascii")
        self._lock = lock
        return self

    def __exit__(self, *exc: object) -> None:
        if self._lock is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.lock_path)
        self._lock.release()
        self._lock = None
