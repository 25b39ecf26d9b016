"""Stage 5, the study's lifecycle: storage and sampler, create or resume (same spec, same data), dead
trials failed and retried, workers joining, the incumbent queued first, trials run to the budget
with progress, and the search summary.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
import warnings
from pathlib import Path
from typing import Any, TextIO

import optuna

from judgetune import datasets
from judgetune._progress import stage
from judgetune.judges import judge_class
from judgetune.lm import JudgeLM, load_lm
from judgetune.tuning._objective import Objective
from judgetune.tuning._pool import InstructionPool
from judgetune.tuning._proposals import proposal_round
from judgetune.tuning._space import default_params, pool_seeds
from judgetune.tuning._spec import RunSpec
from judgetune.tuning._splits import Splits

log = logging.getLogger(__name__)
SCHEMA_ATTEMPTS = 5  # opening a new storage while other workers create its tables
STARTUP_TRIALS = 5  # random trials before TPE models the results (Optuna's default 10 is most of a small budget)


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=STARTUP_TRIALS)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def storage_for(url: str, *, heartbeat: int = 10) -> optuna.storages.RDBStorage:
    """An RDB storage (SQLite file or PostgreSQL URL). A trial whose process died stops beating; three
    heartbeats later it is marked failed and retried once with the same parameters."""
    from sqlalchemy.exc import ArgumentError, IntegrityError, SQLAlchemyError

    for attempt in range(1, SCHEMA_ATTEMPTS + 1):
        with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna since 2.8; we rely on them
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            try:
                return optuna.storages.RDBStorage(
                    url, heartbeat_interval=heartbeat, grace_period=3 * heartbeat,
                    heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1))
            except (ArgumentError, ImportError) as err:
                raise ValueError(f"storage {url!r}: expected an SQLAlchemy URL such as sqlite:///runs/NAME/study.db "
                                 f"or postgresql://HOST/DB ({err})") from None
            except SQLAlchemyError as err:  # not a database file, a server that refuses us, ...
                # workers started together on a new storage race to create its tables and version row
                # (PostgreSQL says a table "already exists" as a ProgrammingError, SQLite as an OperationalError)
                racing = isinstance(err, IntegrityError) or any(s in str(err) for s in ("already exists", "locked"))
                if racing and attempt < SCHEMA_ATTEMPTS:
                    log.debug("storage %s: schema being created by another worker (%s); retrying", url, err)
                    time.sleep(0.2 * attempt)
                    continue
                raise ValueError(f"storage {url!r}: cannot be opened as an Optuna storage "
                                 f"({str(err.orig) if getattr(err, 'orig', None) else err})") from None
    raise AssertionError("unreachable")


def total_calls(study: optuna.Study) -> int:
    """LM calls of the trials and of the proposal rounds."""
    trials = sum(int(t.user_attrs.get("lm_calls", 0)) for t in study.get_trials(deepcopy=False))
    return trials + sum(int(r.get("lm_calls", 0)) for r in InstructionPool(study).rounds())


class CallBudget:
    """Stops the study once its trials have made ``max_calls`` LM calls (answers actually computed)."""

    def __init__(self, max_calls: int | None):
        self.max_calls = max_calls

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if self.max_calls is not None and total_calls(study) >= self.max_calls:
            log.info("LM-call budget of %d reached; stopping", self.max_calls)
            study.stop()


def open_study(spec: RunSpec, storage: str | optuna.storages.BaseStorage, *, heartbeat: int = 10,
               sampler: optuna.samplers.BaseSampler | None = None) -> optuna.Study:
    """Create the study, or resume it when it exists (same spec and same data required).

    On resume: a RUNNING trial whose process died on this machine is failed at once and queued for
    a retry with the same parameters (a trial of a worker on another host is left to the heartbeat
    check); the sampler is seeded with the run's seed plus the number of trials already in the
    study, so a resumed search does not replay the settings it already tried. ``storage`` is a URL
    (see ``storage_for``) or an Optuna storage object (e.g. ``optuna.storages.InMemoryStorage()``);
    ``sampler``, when given, is used as it is (no re-seeding).

    Raises:
        ValueError: the study exists with other settings, or its data file has changed.
    """
    if isinstance(storage, str):
        storage = storage_for(storage, heartbeat=heartbeat)
    study = optuna.create_study(study_name=spec.name, storage=storage, load_if_exists=True,
                                directions=["minimize", "maximize"],
                                sampler=sampler or make_sampler(spec.sampler, spec.seed))
    stored = study.user_attrs.get("spec")
    current = spec.to_dict()
    fingerprint = datasets.data_fingerprint(spec.data)
    if stored is None:
        study.set_user_attr("spec", current)
        study.set_user_attr("data_sha256", fingerprint)
    else:
        stored = {**RunSpec(**{"name": spec.name, "judge": spec.judge, "data": spec.data}).to_dict(), **stored}
        # more (or fewer) --trials on the same study and data: allowed, the study is extended; --also changes only
        # which other families' defaults the gate adds, never a trial
        resumable = ("n_trials", "also")
        changed = sorted(k for k in current if stored.get(k) != current[k] and k not in resumable)
        if changed:
            raise ValueError(f"study {spec.name} exists with other settings ({', '.join(changed)}); "
                             "use another --run name or the same settings")
        recorded = study.user_attrs.get("data_sha256")
        if recorded is not None and recorded != fingerprint:
            changed = sorted(k for k in set(recorded) | set(fingerprint) if recorded.get(k) != fingerprint.get(k))
            raise ValueError(f"study {spec.name}: the data changed since its trials were scored ({', '.join(changed)} "
                             "has another SHA-256); use another --run name, or restore the file")
        if any(stored.get(k) != current[k] for k in resumable):
            study.set_user_attr("spec", current)  # workers joining later run to the new count
    fail_dead_trials(study)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # workers elsewhere: three missed heartbeats
        study.set_metric_names(["mae", "spearman"])
    if sampler is None:
        study.sampler = make_sampler(spec.sampler, spec.seed + len(study.get_trials(deepcopy=False)))
    return study


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def fail_dead_trials(study: optuna.Study) -> list[int]:
    """Fail, and queue once for a retry, every RUNNING trial whose worker process on this machine is
    gone (killed, crashed); returns their numbers. Trials of other hosts are left to the heartbeat."""
    host, dead = socket.gethostname(), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        retry = optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1)
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        worker_host, _, pid = str(trial.user_attrs.get("worker", "")).rpartition(":")
        if worker_host != host or not pid.isdigit() or int(pid) == os.getpid() or _process_alive(int(pid)):
            continue
        try:
            study.tell(trial.number, state=optuna.trial.TrialState.FAIL)
        except (RuntimeError, optuna.exceptions.UpdateFinishedTrialError):  # another process got there first
            continue
        log.info("trial %d: its process %s is gone; failed and queued for a retry", trial.number, pid)
        failed = next(t for t in study.get_trials(deepcopy=False) if t.number == trial.number)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            retry(study, failed)
        dead.append(trial.number)
    return dead


def require_existing_storage(storage: str) -> None:
    """Refuse an SQLite URL whose file does not exist (opening it would create an empty database)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(storage)
    except ArgumentError:
        return  # storage_for names the bad URL
    if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:") \
            and not Path(url.database).is_file():
        raise ValueError(f"storage {storage}: no such SQLite file {url.database}; start the study first with "
                         f"`judgetune tune ... --storage {storage}`")


def join_study(name: str, storage: str, *, heartbeat: int = 10) -> tuple[optuna.Study, RunSpec]:
    """An existing study and its spec (for workers).

    Raises:
        ValueError: the storage is an SQLite file that does not exist, or holds no judgetune study ``name``.
    """
    require_existing_storage(storage)
    try:
        stored = optuna.load_study(study_name=name, storage=storage_for(storage, heartbeat=heartbeat))
        spec = RunSpec(**stored.user_attrs["spec"])
    except KeyError:
        raise ValueError(f"study {name} in {storage} has no judgetune spec; start it with `judgetune tune`") from None
    return open_study(spec, storage, heartbeat=heartbeat), spec


def finished_trials(study: optuna.Study) -> int:
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return len(study.get_trials(deepcopy=False, states=states))


def share_label_position(study: optuna.Study, spec: RunSpec, lm: JudgeLM | None) -> None:
    """Every process of a study reads labels one way over a server: the first to run trials records where its LM
    reads them (``lm.label_record()``, after the probe or as asked) in the study's ``label_position`` attribute;
    the others (``judgetune worker``, a resumed ``tune``) read them there, with the same chat template.

    Raises:
        LabelPositionError: this process's server or machine does not offer the recorded way (one line).
    """
    if lm is None or not hasattr(lm, "freeze_label_position"):
        return  # a stand-in (a scripted LM) reads no server
    recorded = study.user_attrs.get("label_position")
    if recorded:  # from a shared storage: its way is checked by the freeze
        recorded = recorded if isinstance(recorded, dict) else {"label_position": recorded}
        lm.freeze_label_position(recorded.get("label_position"), recorded.get("chat_template"),
                                 where=f"study {spec.name}")
    elif lm.label_position != "in-process":  # the probe, once, and recorded for the workers
        study.set_user_attr("label_position", lm.label_record())


def run_trials(study: optuna.Study, spec: RunSpec, lm: JudgeLM | None, splits: Splits, *,
               proposer: JudgeLM | None = None, progress: bool = False) -> None:
    """Run trials until the study has ``n_trials`` finished ones (complete or pruned) or the call budget is spent.

    Several processes may run this on one study, reading labels one way (:func:`share_label_position`): each
    stops when the shared count is reached (a trial already running elsewhere may still finish, so a study can
    end up to workers-1 over).
    Only a process given a ``proposer`` (the one running ``tune``) writes proposal rounds; with
    proposals on, round R's proposals are written once ``n_trials * R / rounds`` trials are done.
    The incumbent (the kind's default settings) is queued first, once. ``progress``: a bar over the
    trials on a terminal, else one line per finished trial (on standard error).
    """
    share_label_position(study, spec, lm)  # before anything reads a label
    pool = InstructionPool(study)
    pool.seed(pool_seeds(spec))
    default = default_params(spec, splits.data_fixed, lm=lm, instructions=pool.texts(), demo_pool=splits.demo_pool,
                             label_range=splits.label_range)
    study.enqueue_trial(default, user_attrs={"incumbent": True}, skip_if_exists=True)
    rounds = spec.rounds if spec.proposals and proposer is not None else 1
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    for r in range(rounds):
        target = spec.n_trials * (r + 1) // rounds
        if spec.max_calls is not None and total_calls(study) >= spec.max_calls:
            return
        if rounds > 1 and r not in {rec["round"] for rec in pool.rounds()}:
            proposal_round(study, spec, splits, proposer, r)
        if finished_trials(study) >= target:
            continue
        callbacks = [optuna.study.MaxTrialsCallback(target, states=states), CallBudget(spec.max_calls)]
        search = f"{spec.name}: searching (trials to {target} of {spec.n_trials})"
        with stage(search, enabled=progress), TrialProgress(spec.n_trials, enabled=progress) as report:
            study.optimize(Objective(spec, lm, splits), callbacks=[*callbacks, report], gc_after_trial=False)

class TrialProgress:
    """An Optuna callback that shows the search moving: a tqdm bar over the trials on a terminal,
    otherwise one plain line per finished trial; silent when not ``enabled``. A context manager
    (closes the bar)."""

    def __init__(self, total: int, *, enabled: bool = True, stream: TextIO | None = None):
        self.total, self.enabled, self.stream = total, enabled, stream or sys.stderr
        self.bar = None
        if enabled and self.stream.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc="trials", file=self.stream, leave=False)

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if not self.enabled:
            return
        done = finished_trials(study)
        figures = (f"MAE {trial.values[0]:.3f}, Spearman {trial.values[1]:+.3f}" if trial.values
                   else trial.state.name.lower())
        failed = trial.user_attrs.get("parse_failure_rate")
        if trial.user_attrs.get("note") == "too many parse failures":  # the worst values stand in: none measured
            figures = f"{100 * failed:.0f}% of its judgments failed, scored as the worst ({figures})"
        elif failed:
            figures += f", {100 * failed:.0f}% of its judgments failed"
        if self.bar is not None:
            self.bar.n = min(done, self.total)
            self.bar.set_postfix_str(figures)
            self.bar.refresh()
        else:
            self.stream.write(f"trial {trial.number}: {figures} ({done}/{self.total} finished)\n")
            self.stream.flush()

    def __enter__(self) -> TrialProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.close()


def load_run_lm(spec: RunSpec, *, timeout: float = 60.0, trusted: bool = True,
                label_position: str | None = None, rate_limit_wait: float = 600.0, concurrency: int = 8,
                rps: float | None = None) -> JudgeLM | None:
    """The run's LM (None for a judge without one); ``timeout`` is per attempt of a server call. ``trusted``:
    False when the spec was read from a shared storage (a worker's), whose endpoint gets the key only when
    the user trusts it. ``label_position``: where a served model's labels are read (None: probed);
    ``rate_limit_wait``: seconds an item may wait out a served model's rate limit; ``concurrency``, ``rps``: its
    calls at a time and requests per second at most (None: no bound)."""
    if not (spec.stack or judge_class(spec.judge).needs_lm_with(spec.fixed)
            or any(judge_class(kind).needs_lm for kind in spec.also_families())):
        return None
    return load_lm(spec.lm, api_base=spec.api_base, timeout=timeout, trust_endpoint=trusted,
                   endpoint_source=f"study {spec.name}", label_position=label_position, rate_limit_wait=rate_limit_wait,
                   concurrency=concurrency, rps=rps)


def study_summary(study: optuna.Study) -> dict[str, Any]:
    trials = study.get_trials(deepcopy=False)
    by_state: dict[str, int] = {}
    for t in trials:
        by_state[t.state.name] = by_state.get(t.state.name, 0) + 1
    return {"trials": by_state, "lm_calls": total_calls(study),
            "tokens": sum(int(t.user_attrs.get("tokens", 0)) for t in trials),
            "front": [{"number": t.number, "mae": t.values[0], "spearman": t.values[1], "params": t.params}
                      for t in study.best_trials]}


def load_study(run_dir: str | Path, storage: str | None = None) -> optuna.Study:
    """The study of a finished run folder (named after the folder; in its study.db unless ``storage`` says otherwise).
    A folder renamed or copied under another name still holds its one study, which is read."""
    run_dir = Path(run_dir)
    if storage is None and not run_dir.is_dir():
        raise ValueError(f"{run_dir}: no such folder; expected a run folder written by `judgetune tune`")
    if storage is None and not (run_dir / "study.db").is_file():
        raise ValueError(f"{run_dir}: no study.db here; expected a run folder written by `judgetune tune`")
    if storage is not None:
        require_existing_storage(storage)
    where = storage_for(storage or default_storage(run_dir))
    try:
        return optuna.load_study(study_name=run_dir.name, storage=where)
    except KeyError:
        names = optuna.get_all_study_names(where) if storage is None else []
        if len(names) == 1:  # the folder's own study.db, under the name the run had
            return optuna.load_study(study_name=names[0], storage=where)
        raise ValueError(f"{run_dir}: the storage holds no study named {run_dir.name!r}") from None


def default_storage(run_dir: Path) -> str:
    run_dir.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(run_dir / 'study.db').resolve()}"
