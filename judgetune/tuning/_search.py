"""The tuner: an Optuna study over a judge's declared search space, against human labels.

Each trial builds a judge from the trial's parameters (an instruction of the study's pool by id,
k demos and which seeded draw of them, reasoning and the judge's own knobs) and scores a seeded
sample of the training split ("search items"; demos are drawn from the rest of the training
split, so no item is its own demo). Objectives: MAE of the raw scores after a cross-fitted
calibrator of the kind that will ship (minimize) and Spearman (maximize; per group, averaged,
where the data has groups). Items are scored in chunks; after each chunk a trial whose bootstrap
interval is clear of a point of the Pareto front on both objectives stops (pruned). With
proposals on, the search runs in rounds: a proposer LM adds instructions to the pool before each
(see ``_proposals``), and each new one is tried first with the best settings found so far.

The run's full spec lives in the study's user attributes, so ``worker`` processes on other
machines join the same study from the storage URL alone. Trials hold only JSON.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from judgetune import datasets
from judgetune.datasets import Example, groups_of, limit_by_group, sample_per_group
from judgetune.errors import JudgetuneError
from judgetune.judges import BuildContext, Choice, IntRange, JudgeSpec, Verdict, build, judge_class, pick_demos
from judgetune.lm import JudgeLM, load_lm, resolve_scoring_mode
from judgetune.stats import bootstrap_interval, correlation, grouped_correlation
from judgetune.tuning._pool import InstructionPool, seed_instructions
from judgetune.tuning._proposals import Miss, ProposalTask, propose_round, shown_fields
from judgetune.tuning._selection import cross_fitted

log = logging.getLogger(__name__)
SAMPLERS = ("tpe", "nsga2", "random")
PICK_RULES = ("spearman", "mae")
_RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
STARTUP_TRIALS = 5  # random trials before TPE models the results (Optuna's default 10 is most of a small budget)
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
    fit_items: int | None = None  # training items (seeded, question by question) fitted judges fit on, demos come from
    fixed: dict[str, Any] = field(default_factory=dict)
    instructions: list[str] = field(default_factory=list)  # the user's own instruction variants
    pick: str = "spearman"
    scale: list[float] | None = None  # the human scale the user stated ([low, high]); None: the labels' range
    criterion: str | None = None  # what is judged (and what each score level means), in the user's words
    proposer: str | None = None  # LM spec of the proposer (default: the judge's LM)
    proposals: int = 0  # candidate instructions asked for per round (0: no proposals)
    rounds: int = 2  # proposal rounds; the trials are shared out between them
    demo_draws: int = 8  # seeded demo draws searched (the ``demo_seed`` knob)
    rescore: int = 4  # Pareto-front candidates re-scored on dev before one is picked
    fields: dict[str, str] = field(default_factory=dict)  # Example field -> the data file's column
    label: str | None = None  # the data file's column holding the human score (None: label / preference)

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
        if self.fit_items is not None and self.fit_items < 4:
            raise ValueError(f"fit_items must be >= 4 (or None for all), got {self.fit_items}")
        if self.proposals < 0 or self.rounds < 1 or self.demo_draws < 1 or self.rescore < 1:
            raise ValueError("proposals must be >= 0; rounds, demo_draws and rescore >= 1")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=STARTUP_TRIALS)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed)
    return optuna.samplers.RandomSampler(seed=seed)


def storage_for(url: str, *, heartbeat: int = 10) -> optuna.storages.RDBStorage:
    """An RDB storage (SQLite file or PostgreSQL URL). A trial whose process died stops beating; three
    heartbeats later it is marked failed and retried once with the same parameters."""
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna since 2.8; we rely on them
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        try:
            return optuna.storages.RDBStorage(
                url, heartbeat_interval=heartbeat, grace_period=3 * heartbeat,
                heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1))
        except (ArgumentError, ImportError) as err:
            raise ValueError(f"storage {url!r}: expected an SQLAlchemy URL such as sqlite:///runs/NAME/study.db or "
                             f"postgresql://HOST/DB ({err})") from None
        except SQLAlchemyError as err:  # not a database file, a server that refuses us, ...
            raise ValueError(f"storage {url!r}: cannot be opened as an Optuna storage "
                             f"({str(err.orig) if getattr(err, 'orig', None) else err})") from None


@dataclass
class Splits:
    search: list[Example]
    demo_pool: list[Example]
    train: list[Example]
    dev: list[Example]
    test: list[Example]
    label_range: tuple[float, float]
    data_fixed: dict[str, Any] = field(default_factory=dict)  # settings the data decides (see ``fit_space``)


def fit_space(spec: RunSpec, train: list[Example]) -> dict[str, Any]:
    """The settings of the judge's space that cannot change the result on this data (a signal that
    needs references on reference-free data, an encoder that is not installed), fixed before the
    first trial; what is left out and why is logged once here, never per trial. The user's
    ``fixed`` settings take precedence."""
    kind = judge_class(spec.judge)
    decide = getattr(kind, "left_out", None)
    left = {k: v for k, v in (decide(train) if decide else {}).items() if k not in spec.fixed}
    by_reason: dict[tuple[str, str], list[str]] = {}
    for name, (value, why) in left.items():  # a switch turned off is left out; any other knob is fixed
        by_reason.setdefault(("left out", why) if value is False else ("fixed", why), []).append(
            name if value is False else f"{name}={value}")
    if by_reason:
        log.warning("%s search space fitted to the data: %s", spec.judge,
                    "; ".join(f"{verb} {', '.join(names)} ({why})" for (verb, why), names in by_reason.items()))
    return {name: value for name, (value, _) in left.items()}


def prepare_splits(spec: RunSpec) -> Splits:
    """train / dev / test by group (seeded); the search items a seeded sample of train groups. With
    ``per_question``, each question keeps that many of its answers (seeded) first."""
    scale = None if spec.scale is None else datasets.Scale(*spec.scale)
    examples, label_range = datasets.load_data(spec.data, scale=scale, fields=spec.fields, label=spec.label)
    examples = [e for e in examples if e.judgment is not None]
    splits = datasets.split_examples(examples, seed=spec.seed)
    if spec.per_question is not None:  # many questions with a few answers each, rather than few whole questions
        splits = {name: sample_per_group(items, spec.per_question, seed=spec.seed) for name, items in splits.items()}
    search = limit_by_group(splits["train"], spec.search_items, seed=spec.seed)
    search_groups = {e.group_key for e in search}
    demo_pool = [e for e in splits["train"] if e.group_key not in search_groups]
    demo_pool = limit_by_group(demo_pool, spec.fit_items, seed=spec.seed)  # a fit on 5,749 STS-B pairs encodes 11k texts
    dev = limit_by_group(splits["dev"], spec.dev_items, seed=spec.seed)
    test = limit_by_group(splits["test"], spec.test_items, seed=spec.seed)
    if len(search) < 4 or len(dev) < 4 or len(test) < 2:
        raise ValueError(f"{spec.data}: too few labeled items (search {len(search)}, dev {len(dev)}, test {len(test)})")
    return Splits(search, demo_pool, splits["train"], dev, test, label_range, fit_space(spec, splits["train"]))


def settled_params(spec: RunSpec, lm: JudgeLM | None) -> dict[str, Any]:
    """The settings a run never searches: the user's fixed ones and, for an LM judge, its scoring mode
    (unset: the LM's best, see ``resolve_scoring_mode``; a reasoning model's temperature is its own)."""
    settled = dict(spec.fixed)
    cls = judge_class(spec.judge)
    # only the label-reading LM judges have a scoring mode (the likelihood judge reads target log-probs)
    if lm is not None and cls.needs_lm and "scoring_mode" in {p.name for p in cls.space_for(settled)}:
        settled["scoring_mode"] = resolve_scoring_mode(lm, settled.get("scoring_mode"))
        if settled["scoring_mode"] == "sampled" and lm.spec.is_reasoning:
            settled.setdefault("temperature", 1.0)  # not sent: a reasoning model samples at its own
    return settled


def suggest(trial: optuna.trial.BaseTrial, spec: RunSpec, data_fixed: dict[str, Any] | None = None, *,
            lm: JudgeLM | None = None, instructions: Sequence[str] = ()) -> dict[str, Any]:
    """The judge settings of one trial: the declared space minus the settled settings (the user's, the
    scoring mode, and ``data_fixed``, those the data decides). With an instruction pool, ``instruction``
    is an id into it; with demos, ``demo_seed`` says which seeded draw of them."""
    settled = {**(data_fixed or {}), **settled_params(spec, lm)}
    space = judge_class(spec.judge).space_for(settled)
    params: dict[str, Any] = {}
    for p in space:
        if p.name in settled or not p.searched:  # not searched: settled, or the data decides (data defaults)
            continue
        if p.name == "instruction" and instructions:
            params[p.name] = trial.suggest_int(p.name, 0, len(instructions) - 1)
        elif isinstance(p, Choice):
            params[p.name] = trial.suggest_categorical(p.name, list(p.options))
        elif isinstance(p, IntRange):
            params[p.name] = trial.suggest_int(p.name, p.low, p.high)
    if "k" in {p.name for p in space} and "demo_seed" not in spec.fixed and {**params, **settled}.get("k"):
        params["demo_seed"] = trial.suggest_int("demo_seed", 0, spec.demo_draws - 1)
    return {**params, **settled}


def judge_for(params: dict[str, Any], spec: RunSpec, lm: JudgeLM | None, *, demo_pool: list[Example],
              pool: list[Example], label_range: tuple[float, float], instructions: Sequence[str] = ()):
    """The judge of a trial's parameters (the same builder serves the search and the final choice):
    an integer ``instruction`` is an id into ``instructions`` (the pool), ``demo_seed`` draws the demos."""
    params, text, demos = dict(params), None, None
    instruction = params.get("instruction")
    if isinstance(instruction, int) and not isinstance(instruction, bool):
        text = instructions[instruction]
        params["instruction"] = next(iter(judge_class(spec.judge).INSTRUCTIONS))
    if "demo_seed" in params:
        demos = tuple(pick_demos(demo_pool, params.get("k", 0), seed=params.pop("demo_seed")))
    return build(JudgeSpec(spec.judge, params, instruction=text, demos=demos, seed=spec.seed),
                 BuildContext(lm=lm, train=demo_pool, pool=pool, label_range=label_range))


def prompted(kind: str) -> bool:
    """Whether judges of ``kind`` take an instruction from a pool (LM judges with named instructions)."""
    cls = judge_class(kind)
    return cls.uses_prompt and bool(getattr(cls, "INSTRUCTIONS", None))


def pool_seeds(spec: RunSpec) -> list[tuple[str, str]]:
    """The instruction pool's first candidates for this run (none for a judge without an instruction)."""
    if not prompted(spec.judge):
        return []
    generic = judge_class(spec.judge).INSTRUCTIONS
    return seed_instructions(spec.criterion, generic, spec.instructions, next(iter(generic.values())))


def objectives(verdicts: list[Verdict], examples: list[Example], *, label_range: tuple[float, float],
               seed: int = 0) -> tuple[float, float, dict[str, Any]]:
    """(MAE, Spearman) of the parsed verdicts: MAE of the cross-fitted calibrated scores, Spearman of
    the raw ones; the worst values when too many failed or nothing varies."""
    kept = [(v.score, e.judgment, e) for v, e in zip(verdicts, examples) if v.parsed]
    failure_rate = 1 - len(kept) / len(verdicts)
    worst = (label_range[1] - label_range[0], -1.0)
    info: dict[str, Any] = {"parse_failure_rate": failure_rate}
    if failure_rate > MAX_FAILURE_RATE or len(kept) < 4:
        return *worst, {**info, "note": "too many parse failures"}
    raw = np.asarray([k[0] for k in kept], dtype=float)
    gold = np.asarray([k[1] for k in kept], dtype=float)
    pred, kind = cross_fitted(raw, gold, label_range=label_range, seed=seed)
    mae = float(np.mean(np.abs(pred - gold)))
    info["calibrator"] = kind
    groups = groups_of([k[2] for k in kept])
    rho = grouped_correlation(raw, gold, groups).value if groups else correlation(raw, gold)
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
        instructions = InstructionPool(trial.study).texts()
        params = suggest(trial, spec, s.data_fixed, lm=self.lm, instructions=instructions)
        try:
            judge = judge_for(params, spec, self.lm, demo_pool=s.demo_pool, pool=s.train, label_range=s.label_range,
                              instructions=instructions)
        except JudgetuneError as err:  # settings that give no judge on this data (e.g. every signal switched off)
            trial.set_user_attr("note", str(err))
            raise optuna.TrialPruned(str(err)) from None
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
                gold = np.asarray([k[1] for k in kept], dtype=float)
                pred, _ = cross_fitted([k[0] for k in kept], gold, label_range=s.label_range, seed=spec.seed)
                if clearly_dominated(pred, gold, front, seed=spec.seed):
                    trial.set_user_attr("pruned_after_items", len(verdicts))
                    raise optuna.TrialPruned(f"clearly dominated after {len(verdicts)} items")
        mae, rho, info = objectives(verdicts, s.search, label_range=s.label_range, seed=spec.seed)
        for key, value in info.items():
            trial.set_user_attr(key, value)
        trial.set_user_attr("raw_scores", [v.score for v in verdicts])  # for reflection on the best trial's misses
        return mae, rho

    def _calls(self) -> int:
        return lm_calls(self.lm)

    def _record_cost(self, trial: optuna.Trial, verdicts: list[Verdict], calls0: int) -> None:
        trial.set_user_attr("lm_calls", self._calls() - calls0)
        trial.set_user_attr("tokens", int(sum(v.tokens for v in verdicts)))


def lm_calls(lm) -> int:
    """Answers ``lm`` actually computed so far (cache misses)."""
    return 0 if lm is None else lm.label_calls + lm.engine.calls


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
        changed = sorted(k for k in current if stored.get(k) != current[k] and k != "n_trials")
        if changed:  # more (or fewer) --trials on the same study and data: allowed, the study is extended
            raise ValueError(f"study {spec.name} exists with other settings ({', '.join(changed)}); "
                             "use another --run name or the same settings")
        recorded = study.user_attrs.get("data_sha256")
        if recorded is not None and recorded != fingerprint:
            changed = sorted(k for k in set(recorded) | set(fingerprint) if recorded.get(k) != fingerprint.get(k))
            raise ValueError(f"study {spec.name}: the data changed since its trials were scored ({', '.join(changed)} "
                             "has another SHA-256); use another --run name, or restore the file")
        if stored.get("n_trials") != current["n_trials"]:
            study.set_user_attr("spec", current)  # workers joining later run to the new count
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


def run_trials(study: optuna.Study, spec: RunSpec, lm: JudgeLM | None, splits: Splits, *,
               proposer: JudgeLM | None = None) -> None:
    """Run trials until the study has ``n_trials`` finished ones (complete or pruned) or the call budget is spent.

    Several processes may run this on one study: each stops when the shared count is reached (a
    trial already running elsewhere may still finish, so a study can end up to workers-1 over).
    Only a process given a ``proposer`` (the one running ``tune``) writes proposal rounds; with
    proposals on, round R's proposals are written once ``n_trials * R / rounds`` trials are done.
    """
    pool = InstructionPool(study)
    pool.seed(pool_seeds(spec))
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
        study.optimize(Objective(spec, lm, splits), callbacks=[
            optuna.study.MaxTrialsCallback(target, states=states), CallBudget(spec.max_calls)],
            gc_after_trial=False)


def proposal_task(spec: RunSpec, splits: Splits) -> ProposalTask:
    """What the proposer is told about this run's judge."""
    fields = ["question"] if any(e.question for e in splits.search) else []
    fields += ["references ranked best first"] if spec.judge == "linkage" else (
        ["reference"] if any(e.references for e in splits.search) else [])
    low, high = splits.label_range
    answer = ("the position the answer takes among the references" if spec.judge == "linkage"
              else f"a score from {low:g} (worst) to {high:g} (best)")
    return ProposalTask(spec.criterion, (*fields, "answer"), answer)


def best_misses(trial: optuna.trial.FrozenTrial, splits: Splits, *, count: int = 3, seed: int = 0) -> list[Miss]:
    """The search items where ``trial``'s cross-fitted calibrated scores were furthest from the human ones."""
    raw = trial.user_attrs.get("raw_scores") or []
    kept = [(r, e) for r, e in zip(raw, splits.search) if r is not None]
    if len(kept) < 4:
        return []
    gold = np.asarray([e.judgment for _, e in kept], dtype=float)
    pred, _ = cross_fitted([r for r, _ in kept], gold, label_range=splits.label_range, seed=seed)
    worst = np.argsort(-np.abs(pred - gold), kind="stable")[:count]
    return [Miss(shown_fields(kept[i][1]), float(gold[i]), float(pred[i])) for i in worst]


def proposal_round(study: optuna.Study, spec: RunSpec, splits: Splits, proposer: JudgeLM, r: int) -> dict[str, Any]:
    """Round ``r``: candidates grounded on the criterion and training examples, and from round 1 on the
    current best's misses; each accepted one is queued as a trial with the best trial's other settings."""
    pool = InstructionPool(study)
    best = None
    if r > 0:
        complete = [t for t in study.best_trials if "instruction" in t.params]
        best = min(complete, key=lambda t: (-t.values[1], t.values[0], t.number)) if complete else None
    current = pool.texts()[best.params["instruction"]] if best is not None else None
    calls0 = lm_calls(proposer)
    record = propose_round(pool, proposer, round=r, n=spec.proposals, task=proposal_task(spec, splits),
                           examples=splits.demo_pool, current=current,
                           misses=best_misses(best, splits, seed=spec.seed) if best is not None else (),
                           seed=spec.seed)
    record.update(lm_calls=lm_calls(proposer) - calls0, based_on_trial=best.number if best is not None else None)
    pool.record_round(record)
    if best is not None:  # as many as the trials left allow (a queued trial past the budget would never run)
        for new_id in record["accepted"][:max(0, spec.n_trials - finished_trials(study))]:
            study.enqueue_trial({**best.params, "instruction": new_id}, skip_if_exists=True)
    log.info("proposal round %d: %d accepted, refused %s", r, len(record["accepted"]), record["refused_counts"])
    return record


def load_run_lm(spec: RunSpec, *, timeout: float = 60.0) -> JudgeLM | None:
    """The run's LM (None for a judge without one); ``timeout`` is per attempt of a server call."""
    return load_lm(spec.lm, api_base=spec.api_base, timeout=timeout) if judge_class(spec.judge).needs_lm_with(spec.fixed) \
        else None


def load_proposer(spec: RunSpec, lm: JudgeLM | None) -> JudgeLM | None:
    """The proposer LM: the judge's own unless ``spec.proposer`` names another (None: no proposals)."""
    if not spec.proposals or not prompted(spec.judge):
        return None
    if spec.proposer is None or spec.proposer == spec.lm:
        return lm
    return load_lm(spec.proposer, api_base=spec.api_base)


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
    if storage is not None:
        require_existing_storage(storage)
    try:
        return optuna.load_study(study_name=run_dir.name, storage=storage_for(storage or default_storage(run_dir)))
    except KeyError:
        raise ValueError(f"{run_dir}: the storage holds no study named {run_dir.name!r}") from None


def default_storage(run_dir: Path) -> str:
    run_dir.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{(run_dir / 'study.db').resolve()}"
