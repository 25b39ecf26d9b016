"""Fetch catalog files: from a local mirror folder or their canonical URL, checked by SHA-256.

A download is held to the rules of a scoring request (``judgetune._endpoints``): no link-local or cloud
metadata address, directly, through the environment's proxy or by a redirect (redirects are never followed:
the recorded URLs serve their files themselves), and it stops reading past the manifest's recorded size. A
manifest path must stay inside the data folder. A failed fetch leaves no partial file and no empty folder.

Files already present are checked against the manifest whenever a source is read (:func:`verify_files`); a
file verified once in this process is not hashed again while its size and modification time stay the same.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import urllib.parse
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from judgetune._files import open_regular, sha256_of
from judgetune.errors import JudgetuneError, printable

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

DOWNLOAD_TIMEOUT = 30.0  # seconds without progress before a download fails


@dataclass(frozen=True)
class ManifestEntry:
    path: str  # relative to the data folder and to a mirror
    sha256: str
    size: int
    url: str | None  # None where no canonical URL is known: a mirror is then needed


class FetchError(JudgetuneError):
    """A file could not be fetched or did not match its checksum; ``cause`` says why in a few words."""

    def __init__(self, message: str, cause: str | None = None):
        super().__init__(message)
        self.cause = cause or message


class FetchRefusedError(FetchError):
    """A download that must not be made (a metadata address, a proxy at one, a redirect, a path outside the data
    folder): a network would not help, so it is reported as it is."""


class DataChecksumError(JudgetuneError):
    """A data file present in the data folder differs from the catalogued version (truncated or edited)."""


@cache
def _manifest() -> tuple[ManifestEntry, ...]:
    text = resources.files("judgetune.datasets").joinpath("manifest.json").read_text(encoding="utf-8")
    return tuple(ManifestEntry(**item) for item in json.loads(text)["files"])


def manifest_entries(prefixes: tuple[str, ...]) -> list[ManifestEntry]:
    """The manifest entries under any of ``prefixes`` (a file path or a folder ending in ``/``)."""
    entries = [e for e in _manifest() if any(e.path == p or (p.endswith("/") and e.path.startswith(p))
                                             for p in prefixes)]
    if not entries:
        raise JudgetuneError(f"the manifest lists no file under {', '.join(prefixes)}")
    return entries


def target_of(entry: ManifestEntry, root: Path) -> Path:
    """Where ``entry`` lives under ``root``.

    Raises:
        FetchRefusedError: the manifest path is absolute or climbs out of the folder (``..``).
    """
    path = PurePosixPath(entry.path)
    if (not entry.path or path.is_absolute() or "\\" in entry.path or ":" in entry.path
            or any(part in ("", ".", "..") for part in entry.path.split("/"))):
        raise FetchRefusedError(f"manifest row {printable(repr(entry.path))}: expected a relative path inside the "
                                "data folder (no '..', not absolute); refused: reinstall judgetune")
    return root.joinpath(*path.parts)


def missing_files(entries: list[ManifestEntry], root: Path) -> list[str]:
    """Entries whose file is absent under ``root`` (present files are checked by :func:`verify_files`)."""
    return [e.path for e in entries if not target_of(e, root).is_file()]


_verified: dict[tuple[str, int, int], str] = {}  # (resolved path, size, mtime_ns) -> its SHA-256, this process
_verified_lock = threading.Lock()


def _matches(path: Path, entry: ManifestEntry) -> tuple[bool, str]:
    """Whether the file at ``path`` is the catalogued one, and what was found when it is not."""
    stat = path.stat()
    if stat.st_size != entry.size:
        return False, f"{stat.st_size:,} bytes"
    with _verified_lock:
        known = _verified.get(_stamp(path))
    found = known or sha256_of(path)
    if found == entry.sha256 and known is None:
        _remember(path, found)
    return found == entry.sha256, f"SHA-256 {found}"


def _stamp(path: Path) -> tuple[str, int, int]:
    stat = path.stat()
    return str(path.resolve()), stat.st_size, stat.st_mtime_ns


def _remember(path: Path, sha256: str) -> None:
    """Record ``path`` as verified (with ``sha256``) while its size and modification time stay the same."""
    stamp = _stamp(path)
    with _verified_lock:
        _verified[stamp] = sha256


def verify_files(entries: list[ManifestEntry], root: Path, source: str) -> None:
    """Check every present file of ``entries`` under ``root`` against its manifest size and SHA-256.

    Raises:
        DataChecksumError: one line naming the first file that differs and how to restore it.
    """
    for entry in entries:
        target = target_of(entry, root)
        if not target.is_file():
            continue
        ok, found = _matches(target, entry)
        if not ok:
            raise DataChecksumError(
                f"{printable(str(target))}: expected the catalogued file ({entry.size:,} bytes, SHA-256 "
                f"{entry.sha256}), found {found} (truncated or edited); run `judgetune data fetch {source}` to "
                "restore it (or delete it and re-run)")


def fetch_files(entries: list[ManifestEntry], root: Path, mirror: Path | None) -> list[Path]:
    """Place every entry under ``root``, skipping files already there with the right checksum."""
    placed = []
    for entry in entries:
        target = target_of(entry, root)
        if target.is_file() and _matches(target, entry)[0]:
            placed.append(target)
            continue
        created = _make_folders(target.parent)
        try:
            _fetch_one(entry, target, mirror)
        except BaseException:
            _remove_empty(created)
            raise
        placed.append(target)
    return placed


def _fetch_one(entry: ManifestEntry, target: Path, mirror: Path | None) -> None:
    """Write ``entry`` to ``target`` through a temporary file renamed only once its checksum matches."""
    with tempfile.NamedTemporaryFile(dir=target.parent, delete=False, suffix=".part") as tmp:
        partial = Path(tmp.name)
    try:
        if mirror is not None:
            _copy_from_mirror(entry, mirror, partial)
        elif entry.url is None:
            raise FetchError(f"{entry.path}: no public URL is recorded for this file; "
                             "fetch it with --mirror DIR from a copy you have")
        else:
            _download(entry, partial)
        found = sha256_of(partial)
        if found != entry.sha256:
            raise FetchError(f"{entry.path}: expected SHA-256 {entry.sha256}, found {found} "
                             f"(from {mirror or entry.url}); the file differs from the catalogued version")
        partial.replace(target)
        _remember(target, found)
    finally:
        partial.unlink(missing_ok=True)


def _too_large(entry: ManifestEntry, origin: str) -> FetchError:
    return FetchError(f"{entry.path}: {origin} holds more than the recorded {entry.size:,} bytes; stopped reading "
                      "(the file differs from the catalogued version)",
                      cause=f"more than the recorded {entry.size:,} bytes")


def _copy_from_mirror(entry: ManifestEntry, mirror: Path, partial: Path) -> None:
    origin = target_of(entry, mirror)
    if not origin.is_file():
        raise FetchError(f"{entry.path}: not in mirror {mirror}")
    with open_regular(origin, "data file") as source, partial.open("wb") as out:
        copied = 0
        for block in iter(lambda: source.read(1 << 20), b""):
            copied += len(block)
            if copied > entry.size:
                raise _too_large(entry, str(origin))
            out.write(block)


def _check_url(entry: ManifestEntry, url: str) -> None:
    """The checks a scoring request passes (no link-local or metadata address, also through a proxy).

    Raises:
        FetchRefusedError: naming the URL or proxy and why.
    """
    from judgetune._endpoints import EndpointError, check_endpoint, check_proxy, check_resolved

    try:
        check_endpoint(url, "download URL", "a data source")
        check_resolved(url, "download URL", "a data source")
        check_proxy(url)
    except EndpointError as err:
        raise FetchRefusedError(f"{entry.path}: {err}") from None


def _download(entry: ManifestEntry, partial: Path) -> None:
    """Stream ``entry.url`` into ``partial``: no redirect followed, no byte past the recorded size.

    Raises:
        FetchRefusedError: a forbidden address or a redirect.
        FetchError: the server is unreachable, answers an error, or sends more than the recorded size.
    """
    import httpx  # here: reading the catalog needs no HTTP client

    url = str(entry.url)
    _check_url(entry, url)
    host = urllib.parse.urlsplit(url).hostname
    log.warning("downloading %s (%d kB) from %s", entry.path, max(1, entry.size // 1000), url)
    try:
        with httpx.stream("GET", url, timeout=DOWNLOAD_TIMEOUT, follow_redirects=False,
                          headers={"Accept-Encoding": "identity"}) as response, partial.open("wb") as out:
            _refuse_answer(entry, url, response)
            written = 0
            for chunk in response.iter_raw():
                written += len(chunk)
                if written > entry.size:
                    raise _too_large(entry, url)
                out.write(chunk)
    except httpx.HTTPError as err:
        reason = printable(str(err) or type(err).__name__)
        raise FetchError(f"{entry.path}: download from {url} failed ({reason}); "
                         "use --mirror DIR or JUDGETUNE_DATA_MIRROR for a local copy",
                         cause=f"{host}: {reason}") from err


def _refuse_answer(entry: ManifestEntry, url: str, response: httpx.Response) -> None:
    """Raise for an answer that is not the file: a redirect (never followed) or an error status."""
    host = urllib.parse.urlsplit(url).hostname
    if response.is_redirect:
        where = printable(response.headers.get("location", "")[:200])
        raise FetchRefusedError(f"{entry.path}: {url} redirects to {where!r}; a recorded URL serves its file itself, "
                                "so the redirect is not followed: use --mirror DIR or JUDGETUNE_DATA_MIRROR for a "
                                "local copy", cause=f"{host}: a redirect, not followed")
    if response.status_code != 200:
        raise FetchError(f"{entry.path}: download from {url} failed (HTTP {response.status_code}); "
                         "use --mirror DIR or JUDGETUNE_DATA_MIRROR for a local copy",
                         cause=f"{host}: HTTP {response.status_code}")


def _make_folders(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; the ones created, deepest first."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        path.mkdir(exist_ok=True)
    return missing


def _remove_empty(folders: list[Path]) -> None:
    """Remove the folders (deepest first) that a failed fetch created and left empty."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:  # not empty (another file landed there) or already gone
            return
