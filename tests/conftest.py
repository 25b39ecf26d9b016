"""Shared fixtures: the catalog data, copied once per session from the shared mirror; the embedded model;
one real llama.cpp OpenAI-compatible server per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from judgetune import datasets

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The read-only copy of the catalog data: $JUDGETUNE_DATA_MIRROR or ../shared/data beside the checkout."""
    path = Path(os.environ.get("JUDGETUNE_DATA_MIRROR", REPO.parent / "shared" / "data"))
    if not (path / "PROVENANCE.tsv").is_file():
        pytest.fail(f"catalog mirror not found at {path}; set JUDGETUNE_DATA_MIRROR")
    return path


@pytest.fixture(scope="session")
def data_root(tmp_path_factory: pytest.TempPathFactory, mirror: Path) -> Path:
    """A data folder with every catalog source fetched (checksummed) from the mirror."""
    root = tmp_path_factory.mktemp("datasets")
    for name in datasets.CATALOG:
        datasets.fetch(name, root=root, mirror=mirror)
    return root


@pytest.fixture(scope="module")
def embedded_lm(tmp_path_factory):
    """The embedded model (local:smollm2) with its own answer cache, per test module."""
    from judgetune.lm import ResponseCache, load_lm

    lm = load_lm("local:smollm2", cache=ResponseCache(tmp_path_factory.mktemp("cache")))
    yield lm
    lm.close()


@pytest.fixture(scope="module")
def uncached_lm():
    """The embedded model (llama.cpp in-process) without an answer cache, so every call computes; per test module."""
    from judgetune.lm import load_lm

    lm = load_lm("local:smollm2", use_cache=False)
    yield lm
    lm.close()


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """A real llama.cpp server (``python -m llama_cpp.server``) on the embedded GGUF, with prompt
    log-probabilities (``--logits_all true``); started once per session, on first use."""
    from judgetune.lm._spec import model_file, parse_lm_spec
    from judgetune.testing import LlamaServer

    gguf = model_file(parse_lm_spec("local:smollm2"))
    with LlamaServer(gguf, tmp_path_factory.mktemp("llama_server") / "server.log", logits_all=True) as server:
        yield server


@pytest.fixture
def run_cli(capsys):
    """Calls ``judgetune.cli.main(argv)`` and returns its exit code (argparse's too), stdout and stderr."""
    from judgetune import cli

    def run(argv: list[str]) -> tuple[int, str, str]:
        try:
            code = cli.main(argv)
        except SystemExit as exit_:  # argparse refused an option
            code = exit_.code
        out = capsys.readouterr()
        return code, out.out, out.err

    return run
