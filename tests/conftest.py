"""Shared fixtures and the test tiers.

Tiers are pytest markers (registered here, so ``pyproject.toml`` stays short):

- ``model``: loads the embedded model (SmolLM2 through llama.cpp, or transformers);
- ``server``: starts a real llama.cpp OpenAI-compatible server;
- ``slow``: subprocesses, kills, tuning workers, long planted sweeps, and model tests of more than about
  4 s on 2 idle cores (long prompts, whole tunes).

``python -m pytest`` runs every tier (as CI does); ``python -m pytest -m "not slow"`` is the fast
tier. A test that uses one of the model or server fixtures below is marked automatically; mark any
other test that loads the model or starts a server yourself. A test that loads the embedded model
without the ``model`` mark gets a warning naming it.

Fixtures: the catalog data, fetched lazily (file by file, on first use) from the shared mirror;
the embedded model; one real llama.cpp server per session; a per-session answer cache
(``JUDGETUNE_CACHE_DIR``), so no test writes to ``~/.cache/judgetune``.
"""

from __future__ import annotations

import os
import resource
import warnings
from pathlib import Path

import pytest

# The suite runs on two workers (pyproject's addopts) and llama.cpp runs OpenMP threads in each: waiting
# threads must sleep rather than spin, or the workers take each other's cores (read once, when OpenMP starts;
# subprocesses inherit it).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# One llama.cpp thread per worker: with two workers on two cores, two threads each made every parallel
# kernel wait for a thread the other worker had taken (measured: two model-heavy test files side by side
# 80 s with two threads each, 69 s with one). Scores are the same with 1 or 2 threads (docs/lms.md).
os.environ.setdefault("JUDGETUNE_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
# Installed models (the optional grading model, joined once from its packages) stay where the user keeps them,
# though every session gets its own answer cache below.
os.environ.setdefault("JUDGETUNE_MODEL_DIR", str(Path(os.environ.get("JUDGETUNE_CACHE_DIR", Path.home() / ".cache"
                                                                       / "judgetune")) / "models"))

TIERS = {
    "model": "loads the embedded model (SmolLM2 in-process); marked automatically for the model fixtures",
    "server": "starts a real llama.cpp OpenAI-compatible server; marked automatically for llama_server",
    "slow": "subprocesses, kills, tuning workers, long planted sweeps or model tests of over ~4 s; "
            "deselect with -m 'not slow'",
}
MODEL_FIXTURES = {"embedded_lm", "uncached_lm"}
SERVER_FIXTURES = {"llama_server"}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-durations", type=int, default=None, metavar="N",
                     help="list the N tests that used the most CPU time (this process and its finished children): "
                          "a measure that a loaded machine inflates far less than wall time")


def pytest_configure(config: pytest.Config) -> None:
    for name, description in TIERS.items():
        config.addinivalue_line("markers", f"{name}: {description}")


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_cpu_times: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem):
    start = _cpu_seconds()
    yield
    _cpu_times[item.nodeid] = _cpu_seconds() - start


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    n = config.getoption("--cpu-durations")
    if n is None:
        return
    if not _cpu_times:  # the tests ran in xdist workers, whose figures stay there
        terminalreporter.write_line("--cpu-durations: no figures in this process; run with -n 0")
        return
    total = sum(_cpu_times.values())
    terminalreporter.write_sep("=", f"CPU seconds: {total:.1f} in all; the {n} largest")
    for nodeid, seconds in sorted(_cpu_times.items(), key=lambda kv: -kv[1])[:n]:
        terminalreporter.write_line(f"{seconds:8.2f}s {nodeid}")


# Module fixtures that run a whole tune: a test that uses one is slow (the other slow tests carry the mark).
SLOW_FIXTURES = {"run", "small_demo"}


# The files that take longest, longest first. The two xdist workers take whole files (``--dist loadfile``)
# in collection order (``--no-loadscope-reorder``): the long ones first, so that the many short ones fill
# the gaps at the end and both workers finish together. Order only: every test runs either way.
LONGEST_FILES = ("test_lm_modes.py", "test_tuner_planted.py", "test_kv_reuse.py", "test_tuning.py", "test_hybrid.py",
                 "test_lm_server.py", "test_conformance.py", "test_sweep.py", "test_likelihood.py", "test_sweep_root.py",
                 "test_lm_batch.py", "test_judges_local.py", "test_audit.py", "test_frozen.py", "test_api.py",
                 "test_workers.py")


def _file_rank(item: pytest.Item) -> int:
    name = item.path.name
    return LONGEST_FILES.index(name) if name in LONGEST_FILES else len(LONGEST_FILES)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_file_rank)  # stable: each file keeps its own order
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if names & MODEL_FIXTURES:
            item.add_marker(pytest.mark.model)
        if names & SERVER_FIXTURES:
            item.add_marker(pytest.mark.server)
        if names & SLOW_FIXTURES and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


_model_loads: list[str] = []


@pytest.fixture(scope="session", autouse=True)
def _count_model_loads():
    """Counts embedded models loaded in this process, to name tests that load one without the mark."""
    try:
        from judgetune.lm._llamacpp import LlamaCppModel
    except ImportError:  # llama-cpp-python missing: the model tests fail on their own
        yield
        return
    original = LlamaCppModel.__init__

    def counting(self, *args, **kwargs):
        _model_loads.append(str(args[0]) if args else "")
        original(self, *args, **kwargs)

    LlamaCppModel.__init__ = counting
    yield
    LlamaCppModel.__init__ = original


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    before = len(_model_loads)
    yield
    if len(_model_loads) > before and item.get_closest_marker("model") is None:
        warnings.warn(f"{item.nodeid} loads the embedded model but is not marked @pytest.mark.model", stacklevel=1)


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory: pytest.TempPathFactory):
    """One answer cache for the whole session (also for subprocesses, which inherit the environment):
    answers computed by one test are reused by the next, and nothing lands in ~/.cache/judgetune.
    A test that needs a cold cache sets its own ``JUDGETUNE_CACHE_DIR``."""
    saved = {name: os.environ.get(name) for name in ("JUDGETUNE_CACHE_DIR", "DSPY_CACHEDIR")}
    os.environ["JUDGETUNE_CACHE_DIR"] = str(tmp_path_factory.mktemp("judgetune-cache"))
    os.environ["DSPY_CACHEDIR"] = str(tmp_path_factory.mktemp("dspy-cache"))
    yield
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture(scope="session")
def mirror() -> Path:
    """The read-only copy of the catalog data: $JUDGETUNE_DATA_MIRROR or ../shared/data beside the checkout."""
    path = Path(os.environ.get("JUDGETUNE_DATA_MIRROR", REPO.parent / "shared" / "data"))
    if not (path / "PROVENANCE.tsv").is_file():
        how = (f"catalog data not found at {path}: point JUDGETUNE_DATA_MIRROR at a copy, e.g. one made with a "
               "network by `judgetune data fetch all --dir DIR` (DIR then holds it)")
        if os.environ.get("JUDGETUNE_REQUIRE_DATA"):
            pytest.fail(how)
        pytest.skip(how)
    return path


@pytest.fixture
def offline_catalog(monkeypatch) -> str:
    """The catalog's recorded URLs pointed at a closed port on 127.0.0.1: a download fails at once, as on a
    machine without a network (whatever network this one has). Returns that URL prefix."""
    from dataclasses import replace

    from judgetune.datasets import _fetch

    dead = "http://127.0.0.1:9/"
    entries = tuple(replace(e, url=dead + e.path) for e in _fetch._manifest())
    monkeypatch.setattr(_fetch, "_manifest", lambda: entries)
    return dead


@pytest.fixture(scope="session")
def data_root(tmp_path_factory: pytest.TempPathFactory, mirror: Path) -> Path:
    """A data folder that fills on demand: ``datasets.load(name, root=data_root)`` (and everything built
    on ``ensure_fetched``) copies and checksums only that source's files from the mirror, once per
    session. Read a file by path only after ``datasets.ensure_fetched(name, root=data_root)``."""
    saved = os.environ.get("JUDGETUNE_DATA_MIRROR")
    os.environ["JUDGETUNE_DATA_MIRROR"] = str(mirror)  # subprocesses and ensure_fetched fetch from it
    yield tmp_path_factory.mktemp("datasets")
    if saved is None:
        os.environ.pop("JUDGETUNE_DATA_MIRROR", None)
    else:
        os.environ["JUDGETUNE_DATA_MIRROR"] = saved


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
