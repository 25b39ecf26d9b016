"""The frozen judge config: everything needed to rebuild a tuned, calibrated judge, as plain JSON.

No key, no pickle, no code: the judge kind and its settings, the LM spec (name and endpoint), the
instruction, the demos in full, the calibrator's fitted parameters, the metrics it earned with
their intervals, fingerprints of the data, and package versions. Loading validates every field
before anything is built; a loaded config scores exactly as the run that wrote it.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import logging
import math
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from judgetune.calibration import Calibrator, calibrator_from_dict
from judgetune.datasets import Example, describe, example_from_record, expected, problems_from, read_json
from judgetune.errors import API_KEY_ENVS, DataValidationError, JudgetuneError
from judgetune.judges import BuildContext, Judge, JudgeSpec, Verdict, build, judge_class

SCHEMA_VERSION = 1
PACKAGES = ("judgetune", "dspy", "optuna", "scikit-learn", "numpy", "llama_cpp_python", "sentence-transformers")


def versions() -> dict[str, str | None]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def examples_fingerprint(examples: list[Example]) -> str:
    """SHA-256 of the examples' JSON (sorted by id): which items, with which labels, a figure came from."""
    lines = sorted(json.dumps(e.to_dict(), sort_keys=True) for e in examples)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


class ConfigError(JudgetuneError):
    """A judge config file that cannot be loaded; the message names the file and the field."""


def _judge_kind(value: Any) -> str:
    from judgetune.judges import KINDS

    if value not in KINDS:
        raise expected(f"one of {', '.join(KINDS)}")
    return value


def _label_range(value: Any) -> list[float]:
    if not isinstance(value, list) or len(value) != 2 or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value):
        raise expected("[low, high]")
    if not value[0] < value[1]:
        raise expected("[low, high] with low below high (a reversed range would invert every score)")
    return [float(v) for v in value]


class LMModel(BaseModel):
    """The LM a judge runs on: its spec and endpoint, never a key."""

    model_config = ConfigDict(extra="forbid")

    spec: str
    kind: str | None = None
    model: str | None = None
    api_base: str | None = None
    reasoning: bool | None = Field(default=None, description="a reasoning model (no temperature or logprobs sent); "
                                   "null: decided from the model name")


class JudgeParams(BaseModel):
    """A judge's settings: those every LM judge has are named here; each kind adds its own."""

    model_config = ConfigDict(extra="allow")

    scoring_mode: Literal["logprobs", "sampled", "parsed"] | None = Field(
        default=None, description="how an LM judge reads its label: logprobs (the label distribution), sampled "
        "(n_samples answers at a temperature, labels parsed, add-0.5 smoothed) or parsed (one greedy answer); "
        "absent: chosen for the LM (a server is probed for top_logprobs)")
    n_samples: Annotated[int, Field(ge=1)] | None = Field(default=None, description="answers per item (sampled mode)")
    temperature: Annotated[float, Field(ge=0)] | None = Field(default=None, description="sampling temperature "
                                                                                        "(sampled mode)")


class JudgeConfigModel(BaseModel):
    """The schema of judge.json (``judgetune schema`` prints it as JSON Schema)."""

    model_config = ConfigDict(extra="forbid", title="judgetune judge config")

    schema_version: Literal[1] = Field(description="format version of this file")
    judge: Annotated[str, BeforeValidator(_judge_kind)] = Field(description="judge kind")
    params: JudgeParams = Field(description="the judge's settings (chosen by the tuner)")
    lm: LMModel | None = Field(description="the LM of an LM judge (null for judges without one)")
    instruction: str | None = Field(description="the instruction text (null when the kind has none)")
    demos: list[dict[str, Any]] = Field(description="few-shot demos in full, as data rows")
    calibrator: dict[str, Any] | None = Field(description="fitted calibrator (null: the judge's range mapped linearly)")
    label_range: Annotated[list[float], BeforeValidator(_label_range)] = Field(description="[low, high] human scale")
    metrics: dict[str, Any] = Field(default_factory=dict, description="what the judge earned, with intervals")
    data: dict[str, Any] = Field(default_factory=dict, description="fingerprints of the data it was tuned on")
    seed: Annotated[int, Field(ge=0)] = 0
    versions: dict[str, Any] = Field(default_factory=dict, description="package versions")
    created: str = ""
    fitted: dict[str, Any] | None = Field(default=None, description="a hybrid judge's fitted model")
    criterion: str | None = Field(default=None, description="what is judged, in the user's words (the instruction "
                                                            "pool started from it); null when none was given")


_KEY_FIELDS = {"api_key", "apikey", "key", "authorization", "token"}


def config_schema() -> dict[str, Any]:
    """The JSON Schema of judge.json."""
    return JudgeConfigModel.model_json_schema()


def _non_finite(value: Any, path: str = "") -> list[str]:
    """``field: expected a finite number, found NaN`` for every NaN or infinity anywhere in ``value``."""
    if isinstance(value, float) and not math.isfinite(value):
        return [f"{path or 'value'}: expected a finite number, found {describe(value)}"]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _non_finite(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _non_finite(v, f"{path}[{i}]")]
    return []


def demos_from_records(records: list[dict[str, Any]], *, where: str) -> list[Example]:
    """The demos of a config as Examples, validated like rows of a data file.

    Raises:
        ConfigError: listing every bad demo field.
    """
    problems: list[str] = []
    demos = [example_from_record(d, where=f"{where}: demos[{i}]", default_id=f"demo-{i}", problems=problems)
             for i, d in enumerate(records)]
    if problems:
        raise ConfigError("\n".join(problems))
    return demos


@dataclass
class JudgeConfig:
    judge: str
    params: dict[str, Any]
    lm: dict[str, Any] | None
    instruction: str | None
    demos: list[dict[str, Any]]
    calibrator: dict[str, Any] | None
    label_range: list[float]
    metrics: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    versions: dict[str, Any] = field(default_factory=versions)
    created: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    schema_version: int = SCHEMA_VERSION
    fitted: dict[str, Any] | None = None  # a hybrid judge's fitted model (HybridModel.to_dict); absent otherwise
    criterion: str | None = None  # what is judged, in the user's words (the instruction pool started from it)

    @classmethod
    def from_judge(cls, judge: Judge, *, lm: dict | None, calibrator: Calibrator | None,
                   label_range: tuple[float, float], **extra: Any) -> JudgeConfig:
        spec = judge.spec()
        return cls(judge=spec.kind, params=dict(spec.params), lm=lm, instruction=spec.instruction,
                   demos=[d.to_dict() for d in spec.demos or ()], calibrator=calibrator.to_dict() if calibrator else None,
                   label_range=[float(label_range[0]), float(label_range[1])],
                   fitted=None if spec.fitted is None else dict(spec.fitted), **extra)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": self.schema_version, **{k: v for k, v in asdict(self).items()
                                                           if k != "schema_version" and not (k == "fitted" and v is None)}}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=False, allow_nan=False) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> JudgeConfig:
        """Read and validate a judge.json.

        Raises:
            ConfigError: naming the file and every bad field (nothing is built from a broken config).
        """
        path = Path(path)
        if path.is_dir():
            raise ConfigError(f"{path}: expected a judge config file (judge.json), found a folder")
        try:  # the strict reader: repeated keys, deep nesting and values of the wrong JSON type refused
            data = read_json(path, model=JudgeConfigModel)
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such judge config") from None
        except DataValidationError as err:
            raise ConfigError(str(err)) from None
        return cls.from_dict(data, where=str(path))

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str = "config") -> JudgeConfig:
        """Validate a config's plain data (:class:`JudgeConfigModel`, then what only the judge kinds
        know: an LM for an LM judge, the calibrator, the demos, a hybrid's fitted model).

        Raises:
            ConfigError: every problem found, one per line, each naming the field.
        """
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a JSON object, found {describe(data)}")
        problems = [f"{where}: {p}" for p in _non_finite(data)]
        if isinstance(data.get("schema_version"), int) and data["schema_version"] != SCHEMA_VERSION:
            raise ConfigError(f"{where}: schema_version: expected {SCHEMA_VERSION}, found {data['schema_version']} "
                              "(written by another judgetune version)")
        checked = data
        if isinstance(data.get("lm"), dict) and any(k.lower() in _KEY_FIELDS for k in data["lm"]):
            problems.append(f"{where}: lm: expected no key (a key never belongs in a config file); remove it and "
                            f"set ${API_KEY_ENVS[0]} in the environment")  # the key itself is never echoed
            checked = {**data, "lm": {k: v for k, v in data["lm"].items() if k.lower() not in _KEY_FIELDS}}
        try:
            model = JudgeConfigModel.model_validate(checked)
        except ValidationError as err:
            problems += problems_from(err, where, known="a field of judge.json (`judgetune schema` prints them)")
            model = None
        if problems or model is None:
            raise ConfigError("\n".join(dict.fromkeys(problems)))
        kind = model.judge
        if judge_class(kind).needs_lm_with(model.params.model_dump(exclude_none=True)) and model.lm is None:
            raise ConfigError(f"{where}: lm: expected an object with the LM spec for judge {kind}, found nothing")
        demos_from_records(model.demos, where=where)
        if model.calibrator is not None:
            try:
                calibrator_from_dict(model.calibrator)
            except (KeyError, TypeError, ValueError) as err:
                raise ConfigError(f"{where}: calibrator: {err}") from None
        if judge_class(kind).fits and not isinstance(model.fitted, dict):
            raise ConfigError(f"{where}: fitted: expected the {kind} judge's fitted model (an object)")
        if model.fitted is not None:
            if not judge_class(kind).fits:
                raise ConfigError(f"{where}: fitted: only a judge that is fitted (hybrid) has a fitted model (an object)")
            from judgetune.judges import HybridModel

            try:
                HybridModel.from_dict(model.fitted)
            except (TypeError, ValueError) as err:
                raise ConfigError(f"{where}: {err}") from None
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})

    def demo_examples(self) -> list[Example]:
        return demos_from_records(self.demos, where="config")

    def spec(self) -> JudgeSpec:
        """The frozen judge as plain data for ``judges.build``."""
        return JudgeSpec(self.judge, dict(self.params), instruction=self.instruction,
                         demos=tuple(self.demo_examples()) if judge_class(self.judge).uses_prompt else None,
                         fitted=self.fitted, seed=self.seed)

    def build_judge(self, lm=None, *, pool: list[Example] | None = None) -> Judge:
        """The judge this config describes, on ``lm`` (references drawn from ``pool`` where the kind needs them)."""
        return build(self.spec(), BuildContext(lm=lm, pool=pool or [], label_range=tuple(self.label_range)))

    def calibrated(self, verdicts: list[Verdict], judge: Judge, examples: list[Example]) -> list[float | None]:
        """Scores on the human scale: the calibrator's map of each parsed raw score (None for a failure)."""
        raw = [v.score for v in verdicts]
        kept = [i for i, r in enumerate(raw) if r is not None]
        out: list[float | None] = [None] * len(raw)
        if not kept:
            return out
        values = np.asarray([raw[i] for i in kept], dtype=float)
        if self.calibrator is not None:
            mapped = calibrator_from_dict(self.calibrator).predict(values)
            _warn_if_pinned(mapped, values, self.label_range)
        else:  # uncalibrated: the judge's range mapped linearly onto the human one
            (a, b), (lo, hi) = judge.range_for(examples), self.label_range
            mapped = lo + (values - a) * (hi - lo) / (b - a)
        for i, value in zip(kept, mapped):
            out[i] = float(value)
        return out


def _warn_if_pinned(mapped: np.ndarray, raw: np.ndarray, label_range: list[float]) -> None:
    """Warn when a calibrator sends every item (two or more) to one end of the scale: its outputs lie off the
    scale for them (a hand-edited or foreign calibrator), and every item would silently get that end."""
    for end, name in ((label_range[1], "top"), (label_range[0], "bottom")):
        if len(raw) > 1 and np.all(mapped == end):
            logging.getLogger(__name__).warning(
                "the calibrator maps all %d items (raw scores %g to %g) to the %s of the scale, %g: its outputs "
                "lie off the scale for them; check the calibrator in the judge config", len(raw), raw.min(), raw.max(),
                name, end)


def score_examples(config: JudgeConfig, examples: list[Example], lm=None, *,
                   progress: bool = False) -> tuple[list[Verdict], list[float | None]]:
    """Verdicts and calibrated scores of a frozen judge on ``examples`` (references drawn from them)."""
    judge = config.build_judge(lm, pool=examples)
    verdicts = judge.judge_all(examples, progress=progress)
    return verdicts, config.calibrated(verdicts, judge, examples)


def load_config_lm(config: JudgeConfig, *, timeout: float = 60.0):
    """The LM a config names (None for judges without one). A server's key comes from the environment;
    ``timeout`` is per attempt of a server call."""
    if not judge_class(config.judge).needs_lm_with(config.params):
        return None
    from judgetune.lm import load_lm

    return load_lm(config.lm["spec"], api_base=config.lm.get("api_base"), timeout=timeout,
                   reasoning=config.lm.get("reasoning"))
