"""Several workers on one study through PostgreSQL: every trial completes once, none is lost; and
workers started together on a new storage (SQLite, or a new PostgreSQL database) all open it.
The workers judge with ``test:slow`` (no weights, 0.1 s an answer, about the embedded model's pace, so
that both workers get trials): the test is about sharing a study, not about what the model says.

Needs a PostgreSQL URL in $JUDGETUNE_TEST_POSTGRES (`.ci/run` installs the Debian package, starts
it on 127.0.0.1 and sets it); skipped otherwise, unless $JUDGETUNE_REQUIRE_POSTGRES demands it.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import uuid

import optuna
import pytest

from judgetune.cli import main
from judgetune.tuning import RunSpec, open_study, storage_for

URL = os.environ.get("JUDGETUNE_TEST_POSTGRES")


@pytest.fixture()
def postgres():
    if not URL:
        if os.environ.get("JUDGETUNE_REQUIRE_POSTGRES"):
            pytest.fail("JUDGETUNE_REQUIRE_POSTGRES is set but JUDGETUNE_TEST_POSTGRES is not")
        pytest.skip("no PostgreSQL (set JUDGETUNE_TEST_POSTGRES=postgresql://user:pass@127.0.0.1/db)")
    return URL


@pytest.mark.slow
def test_two_workers_share_one_study_without_losing_or_repeating_a_trial(postgres, data_root, tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGETUNE_DATA_DIR", str(data_root))
    monkeypatch.setenv("JUDGETUNE_CACHE_DIR", str(tmp_path / "cache"))
    name = f"workers-{uuid.uuid4().hex[:8]}"
    spec = RunSpec(name=name, judge="rubric", data="sts2012-msrpar", lm="test:slow", n_trials=6, also=[],
                   search_items=8, chunk=8,
                   dev_items=8, test_items=4, gate_items=16, fixed={"reasoning": False})
    open_study(spec, postgres)
    command = [sys.executable, "-m", "judgetune.cli", "worker", "--storage", postgres, "--study", name]
    workers = [subprocess.Popen(command, env=dict(os.environ), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    outputs = [w.communicate(timeout=600) for w in workers]
    assert all(w.returncode == 0 for w in workers), [err[-2000:] for _, err in outputs]
    trials = optuna.load_study(study_name=name, storage=postgres).get_trials()
    states = [t.state.name for t in trials]
    # a worker stops once 6 trials have finished; one already running elsewhere may still finish
    assert 6 <= states.count("COMPLETE") <= 7 and set(states) == {"COMPLETE"}
    assert sorted(t.number for t in trials) == list(range(len(trials)))
    assert len({t.user_attrs["worker"] for t in trials}) == 2  # both workers ran trials
    # `tune` with the same spec finds the search done and only calibrates, tests and freezes
    assert main(["tune", "--judge", "rubric", "--lm", "test:slow", "--data", "sts2012-msrpar",
                 "--trials", "6", "--search-items", "8",
                 "--chunk", "8", "--dev-items", "8", "--test-items", "4", "--gate-items", "16", "--fix", "reasoning=false",
                 "--run", name,
                 "--storage", postgres, "--runs-dir", str(tmp_path)]) == 0
    assert len(optuna.load_study(study_name=name, storage=postgres).get_trials()) == len(trials)
    assert (tmp_path / name / "judge.json").is_file()


def _open_together(urls: list[str], barrier, outcomes) -> None:
    """A worker: for each new storage, wait for the others, then open it at the same moment."""
    for url in urls:
        barrier.wait(timeout=120)
        try:
            storage_for(url)
            outcomes.put("opened")
        except ValueError as err:
            outcomes.put(str(err))


@pytest.fixture()
def fresh_postgres_databases(postgres):
    """A factory of new, empty PostgreSQL databases (dropped afterwards), each a storage URL."""
    import psycopg

    made = []

    def make() -> str:
        made.append(f"judgetune_race_{uuid.uuid4().hex[:10]}")
        with psycopg.connect(postgres, autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {made[-1]}")
        return postgres.rsplit("/", 1)[0] + "/" + made[-1]

    yield make
    with psycopg.connect(postgres, autocommit=True) as connection:
        for name in made:
            connection.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_workers_started_together_on_a_new_storage_all_open_it(backend, tmp_path, request):
    """Optuna creates a new storage's tables and version row on open; three workers racing to do so
    used to fail one or two of them on SQLite (UNIQUE constraint failed: alembic_version.version_num)
    and now and then on PostgreSQL (relation "studies" already exists)."""
    if backend == "postgresql":
        new_storage = request.getfixturevalue("fresh_postgres_databases")
        urls = [new_storage() for _ in range(4)]
    else:
        urls = [f"sqlite:///{tmp_path / f'study{n}.db'}" for n in range(4)]
    context = multiprocessing.get_context("spawn")  # not fork: the test process may hold threads and their locks
    barrier, outcomes = context.Barrier(3), context.Queue()
    workers = [context.Process(target=_open_together, args=(urls, barrier, outcomes)) for _ in range(3)]
    for worker in workers:
        worker.start()
    seen = [outcomes.get(timeout=180) for _ in range(3 * len(urls))]  # drained before the join (a full pipe blocks)
    for worker in workers:
        worker.join(timeout=60)
    assert seen == ["opened"] * (3 * len(urls)) and [w.exitcode for w in workers] == [0, 0, 0]
