"""The tuner: an Optuna study over a judge's declared search space, against human labels.

Each trial builds a judge from the trial's parameters (instruction, k demos, reasoning and the
judge's own knobs) and scores a seeded sample of the training split ("search items"; demos are
drawn from the rest of the training split, so no item is its own demo). Objectives: MAE of the
raw score mapped onto the human scale (minimize) and Spearman (maximize; per group, averaged,
where the data has groups). Items are scored in chunks; after each chunk a trial whose bootstrap
interval is clear of a point of the Pareto front on both objectives stops (pruned).

The run's full spec lives in the study's user attributes, so ``worker`` processes on other
machines join the same study from the storage URL alone. Trials hold only JSON.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from judgetune import datasets
from judgetune.datasets import Example, groups_of, limit_by_group, sample_per_group
from judgetune.judges import BuildContext, Choice, IntRange, JudgeSpec, Verdict, build, judge_class
from judgetune.lm import JudgeLM, load_lm
from judgetune.stats import bootstrap_interval, correlation, grouped_correlation, rescale

log = logging.getLogger(__name__)
SAMPLERS = ("tpe", "nsga2", "random")
PICK_RULES = ("spearman", "mae")
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
MAX_FAILURE_RATE = 0.5  # a trial failing to judge more items than this gets the worst objective values


@dataclass(frozen=True)
class RunSpec:
    """Everything one tuning run needs; stored as the study's user attributes."""

    name: str
    judge: str
    data: str
    lm: str = "local:smollm2"
    api_base: str | None = None
    seed: int = 0
    n_trials: int = 12
    sampler: str = "tpe"
    search_items: int = 40
    chunk: int = 10
    dev_items: int | None = None
    test_items: int | None = None
    max_calls: int | None = None
    per_question: int | None = None  # answers kept per question (group) in every split; None keeps all
    fixed: dict[str, Any] = field(default_factory=dict)
    instructions: list[str] = field(default_factory=list)  # the user's own instruction variants
    pick: str = "spearman"
    scale: list[float] | None = None  # the human scale the user stated ([low, high]); None: the labels' range

    def __post_init__(self) -> None:
        if not _RUN_NAME.fullmatch(self.name) or ".." in self.name:
            raise ValueError(f"run name {self.name!r}: expected a plain name (letters, digits, '.', '_', '-'; "
                             "no path, no '..'): a run lives in runs/NAME/")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, got {self.sampler!r}")
        if self.pick not in PICK_RULES:
            raise ValueError(f"pick must be one of {PICK_RULES}, got {self.pick!r}")
        if self.search_items < 4 or self.chunk < 1 or self.n_trials < 1:
            raise ValueError("search_items must be >= 4, chunk and n_trials >= 1")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def storage_for(url: str, *, heartbeat: int = 10) -> optuna.storages.RDBStorage:
    """An RDB storage (SQLite file or PostgreSQL URL). A trial whose process died stops beating; three
    heartbeats later it is marked failed and retried once with the same parameters."""
    from sqlalchemy.exc import ArgumentError

    with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna since 2.8; we rely on them
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        try:
            return optuna.storages.RDBStorage(
                url, heartbeat_interval=heartbeat, grace_period=3 * heartbeat,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1))
        except (ArgumentError, ImportError) as err:
            raise ValueError(f"storage {url!r}: expected an SQLAlchemy URL such as sqlite:///runs/NAME/study.db or "
                             f"postgresql://HOST/DB ({err})") from None


@dataclass
class Splits:
    search: list[Example]
    demo_pool: list[Example]
    train: list[Example]
    dev: list[Example]
    test: list[Example]
    label_range: tuple[float, float]


def prepare_splits(spec: RunSpec) -> Splits:
    """train / dev / test by group (seeded); the search items a seeded sample of train groups. With
    ``per_question``, each question keeps that many of its answers (seeded) first."""
    scale = None if spec.scale is None else datasets.Scale(*spec.scale)
    examples, label_range = datasets.load_data(spec.data, scale=scale)
    examples = [e for e in examples if e.judgment is not None]
    splits = datasets.split_examples(examples, seed=spec.seed)
    if spec.per_question is not None:  # many questions with a few answers each, rather than few whole questions
        splits = {name: sample_per_group(items, spec.per_question, seed=spec.seed) for name, items in splits.items()}
    search = limit_by_group(splits["train"], spec.search_items, seed=spec.seed)
    search_groups = {e.group_key for e in search}
    demo_pool = [e for e in splits["train"] if e.group_key not in search_groups]
    dev = limit_by_group(splits["dev"], spec.dev_items, seed=spec.seed)
    test = limit_by_group(splits["test"], spec.test_items, seed=spec.seed)
    if len(search) < 4 or len(dev) < 4 or len(test) < 2:
        raise ValueError(f"{spec.data}: too few labeled items (search {len(search)}, dev {len(dev)}, test {len(test)})")
    return Splits(search, demo_pool, splits["train"], dev, test, label_range)


def suggest(trial: optuna.trial.BaseTrial, spec: RunSpec) -> dict[str, Any]:
    """The judge settings of one trial: the declared space, minus the fixed settings, plus the user's instructions."""
    space = judge_class(spec.judge).space()
    params: dict[str, Any] = {}
    for p in space:
        if p.name in spec.fixed or not p.searched:  # not searched: the data decides (the kind's data defaults)
            continue
        if isinstance(p, Choice):
            options = list(p.options)
            if p.name == "instruction":
                options += [f"user-{i}" for i in range(len(spec.instructions))]
            params[p.name] = trial.suggest_categorical(p.name, options)
        elif isinstance(p, IntRange):
            params[p.name] = trial.suggest_int(p.name, p.low, p.high)
    return {**params, **spec.fixed}


def judge_for(params: dict[str, Any], spec: RunSpec, lm: JudgeLM | None, *, demo_pool: list[Example],
              pool: list[Example], label_range: tuple[float, float]):
    """The judge of a trial's parameters (the same builder serves the search and the final choice)."""
    params, text = dict(params), None
    instruction = params.get("instruction", "")
    if isinstance(instruction, str) and instruction.startswith("user-"):  # one of the user's variants
        text = spec.instructions[int(instruction.split("-")[1])]
        params["instruction"] = next(iter(judge_class(spec.judge).INSTRUCTIONS))
    return build(JudgeSpec(spec.judge, params, instruction=text, seed=spec.seed),
                 BuildContext(lm=lm, train=demo_pool, pool=pool, label_range=label_range))


def objectives(verdicts: list[Verdict], examples: list[Example], *, judge_range: tuple[float, float],
               label_range: tuple[float, float]) -> tuple[float, float, dict[str, Any]]:
    """(MAE, Spearman) of the parsed verdicts; the worst values when too many failed or nothing varies."""
    kept = [(v.score, e.judgment, e) for v, e in zip(verdicts, examples) if v.parsed]
    failure_rate = 1 - len(kept) / len(verdicts)
    worst = (label_range[1] - label_range[0], -1.0)
    info: dict[str, Any] = {"parse_failure_rate": failure_rate}
    if failure_rate > MAX_FAILURE_RATE or len(kept) < 3:
        return *worst, {**info, "note": "too many parse failures"}
    pred = rescale([k[0] for k in kept], judge_range, label_range)
    gold = np.asarray([k[1] for k in kept], dtype=float)
    mae = float(np.mean(np.abs(pred - gold)))
    groups = groups_of([k[2] for k in kept])
    rho = grouped_correlation(pred, gold, groups).value if groups else correlation(pred, gold)
    if rho is None:
        return mae, -1.0, {**info, "note": "Spearman undefined (constant scores)"}
    return mae, float(rho), info


def clearly_dominated(pred: np.ndarray, gold: np.ndarray, front: list[tuple[float, float]], *,
                      seed: int) -> bool:
    """True when a point of the front beats both bounds of this trial's 95% bootstrap intervals."""
    if not front or len(pred) < 6:
        return False
    mae_ci = bootstrap_interval(lambda a, b: float(np.mean(np.abs(a - b))), pred, gold, n_resamples=200, seed=seed)
    rho_ci = bootstrap_interval(lambda a, b: correlation(a, b), pred, gold, n_resamples=200, seed=seed)
    if mae_ci.low is None or rho_ci.high is None:
        return False
    return any(mae_ci.low > f_mae and rho_ci.high < f_rho for f_mae, f_rho in front)


class Objective:
    """The study's objective: a plain function of a trial (and a JSON-only record of its cost)."""

    def __init__(self, spec: RunSpec, lm: JudgeLM | None, splits: Splits):
        self.spec, self.lm, self.splits = spec, lm, splits

    def __call__(self, trial: optuna.Trial) -> tuple[float, float]:
        spec, s = self.spec, self.splits
        trial.set_user_attr("worker", f"{socket.gethostname()}:{os.getpid()}")  # first: a crash can be told apart
        params = suggest(trial, spec)
        judge = judge_for(params, spec, self.lm, demo_pool=s.demo_pool, pool=s.train, label_range=s.label_range)
        calls0 = self._calls()
        verdicts: list[Verdict] = []
        front = [tuple(t.values) for t in trial.study.best_trials] if trial.study.best_trials else []
        # a judge without an LM costs little and may normalize within a question: score it in one batch
        step = spec.chunk if judge.needs_lm else len(s.search)
        for start in range(0, len(s.search), step):
            chunk = s.search[start:start + step]
            verdicts.extend(judge.judge_all(chunk))
            done = s.search[:len(verdicts)]
            kept = [(v.score, e.judgment) for v, e in zip(verdicts, done) if v.parsed]
            trial.set_user_attr("items_scored", len(verdicts))
            self._record_cost(trial, verdicts, calls0)
            if len(verdicts) < len(s.search) and len(kept) >= 6:
                pred = rescale([k[0] for k in kept], judge.range_for(done), s.label_range)
                if clearly_dominated(pred, np.asarray([k[1] for k in kept]), front, seed=spec.seed):
                    trial.set_user_attr("pruned_after_items", len(verdicts))
                    raise optuna.TrialPruned(f"clearly dominated after {len(verdicts)} items")
        mae, rho, info = objectives(verdicts, s.search, judge_range=judge.range_for(s.search),
                                    label_range=s.label_range)
        for key, value in info.items():
            trial.set_user_attr(key, value)
        return mae, rho

    def _calls(self) -> int:
        return 0 if self.lm is None else self.lm.label_calls + self.lm.engine.calls

    def _record_cost(self, trial: optuna.Trial, verdicts: list[Verdict], calls0: int) -> None:
        trial.set_user_attr("lm_calls", self._calls() - calls0)
        trial.set_user_attr("tokens", int(sum(v.tokens for v in verdicts)))


def total_calls(study: optuna.Study) -> int:
    return sum(int(t.user_attrs.get("lm_calls", 0)) for t in study.get_trials(deepcopy=False))


class CallBudget:
    """Stops the study once its trials have made ``max_calls`` LM calls (answers actually computed)."""

    def __init__(self, max_calls: int | None):
        self.max_calls = max_calls

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if self.max_calls is not None and total_calls(study) >= self.max_calls:
            log.info("LM-call budget of %d reached; stopping", self.max_calls)
            study.stop()


def open_study(spec: RunSpec, storage: str, *, heartbeat: int = 10) -> optuna.Study:
    """Create the study, or resume it when it exists (same spec and same data required).

    On resume: a RUNNING trial whose process died on this machine is failed at once and queued for
    a retry with the same parameters (a trial of a worker on another host is left to the heartbeat
    check); the sampler is seeded with the run's seed plus the number of trials already in the
    study, so a resumed search does not replay the settings it already tried.

    Raises:
        ValueError: the study exists with other settings, or its data file has changed.
    """
    study = optuna.create_study(study_name=spec.name, storage=storage_for(storage, heartbeat=heartbeat),
                                load_if_exists=True,
                                directions=["minimize", "maximize"], sampler=make_sampler(spec.sampler, spec.seed))
    stored = study.user_attrs.get("spec")
    current = spec.to_dict()
    fingerprint = datasets.data_fingerprint(spec.data)
    if stored is None:
        study.set_user_attr("spec", current)
        study.set_user_attr("data_sha256", fingerprint)
    else:
        stored = {**RunSpec(**{"name": spec.name, "judge": spec.judge, "data": spec.data}).to_dict(), **stored}
        if stored != current:
            changed = sorted(k for k in current if stored.get(k) != current[k])
            raise ValueError(f"study {spec.name} exists with other settings ({', '.join(changed)}); "
                             "use another --run name or the same settings")
        recorded = study.user_attrs.get("data_sha256")
        if recorded is not None and recorded != fingerprint:
            changed = sorted(k for k in set(recorded) | set(fingerprint) if recorded.get(k) != fingerprint.get(k))
            raise ValueError(f"study {spec.name}: the data changed since its trials were scored ({', '.join(changed)} "
                             "has another SHA-256); use another --run name, or restore the file")
    fail_dead_trials(study)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)  # workers elsewhere: three missed heartbeats
        study.set_metric_names(["mae", "spearman"])
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
            study._storage.set_trial_state_values(trial._trial_id, state=optuna.trial.TrialState.FAIL)
        except (RuntimeError, optuna.exceptions.UpdateFinishedTrialError):  # another process got there first
            continue
        log.info("trial %d: its process %s is gone; failed and queued for a retry", trial.number, pid)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            retry(study, study._storage.get_trial(trial._trial_id))
        dead.append(trial.number)
    return dead


def join_study(name: str, storage: str, *, heartbeat: int = 10) -> tuple[optuna.Study, RunSpec]:
    """An existing study and its spec (for workers)."""
    try:
        stored = optuna.load_study(study_name=name, storage=storage_for(storage, heartbeat=heartbeat))
        spec = RunSpec(**stored.user_attrs["spec"])
    except KeyError:
        raise ValueError(f"study {name} in {storage} has no judgetune spec; start it with `judgetune tune`") from None
    return open_study(spec, storage, heartbeat=heartbeat), spec


def finished_trials(study: optuna.Study) -> int:
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    return len(study.get_trials(deepcopy=False, states=states))


def run_trials(study: optuna.Study, spec: RunSpec, lm: JudgeLM | None, splits: Splits) -> None:
    """Run trials until the study has ``n_trials`` finished ones (complete or pruned) or the call budget is spent.

    Several processes may run this on one study: each stops when the shared count is reached (a
    trial already running elsewhere may still finish, so a study can end up to workers-1 over).
    """
    if finished_trials(study) >= spec.n_trials:
        return
    if spec.max_calls is not None and total_calls(study) >= spec.max_calls:
        return
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    study.optimize(Objective(spec, lm, splits), callbacks=[
        optuna.study.MaxTrialsCallback(spec.n_trials, states=states), CallBudget(spec.max_calls)],
        gc_after_trial=False)


def load_run_lm(spec: RunSpec, *, timeout: float = 60.0) -> JudgeLM | None:
    """The run's LM (None for a judge without one); ``timeout`` is per attempt of a server call."""
    return load_lm(spec.lm, api_base=spec.api_base, timeout=timeout) if judge_class(spec.judge).needs_lm_with(spec.fixed) \
        else None


def pick_trial(study: optuna.Study, rule: str) -> optuna.trial.FrozenTrial:
    """The chosen trial of the Pareto front: highest Spearman (ties: lower MAE), or lowest MAE (ties: higher Spearman)."""
    front = study.best_trials
    if not front:
        raise ValueError(f"study {study.study_name} has no completed trial to choose from")
    if rule == "spearman":
        return min(front, key=lambda t: (-t.values[1], t.values[0], t.number))
    return min(front, key=lambda t: (t.values[0], -t.values[1], t.number))


def search_summary(study: optuna.Study) -> dict[str, Any]:
    trials = study.get_trials(deepcopy=False)
    by_state: dict[str, int] = {}
    for t in trials:
        by_state[t.state.name] = by_state.get(t.state.name, 0) + 1
    return {"trials": by_state, "lm_calls": total_calls(study),
            "tokens": sum(int(t.user_attrs.get("tokens", 0)) for t in trials),
            "front": [{"number": t.number, "mae": t.values[0], "spearman": t.values[1], "params": t.params}
                      for t in study.best_trials]}


def load_study(run_dir: str | Path, storage: str | None = None) -> optuna.Study:
    """The study of a finished run folder (named after the folder; in its study.db unless ``storage`` says otherwise)."""
    run_dir = Path(run_dir)
    if storage is None and not (run_dir / "study.db").is_file():
        raise ValueError(f"{run_dir}: no study.db here; expected a run folder written by `judgetune tune`")
    try:
        return optuna.load_study(study_name=run_dir.name, storage=storage_for(storage or default_storage(run_dir)))
    except KeyError:
        raise ValueError(f"{run_dir}: the storage holds no study named {run_dir.name!r}") from None


def default_storage(run_dir: Path) -> str:
    run_dir.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(run_dir / 'study.db').resolve()}"
