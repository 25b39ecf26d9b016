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
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from judgetune._files import make_folder, write_text
from judgetune.calibration import Calibrator, calibrator_from_dict
from judgetune.datasets import Example, describe, example_from_record, problems_from, read_json, unwritable
from judgetune.errors import API_KEY_ENVS, DataValidationError, JudgetuneError, shown
from judgetune.judges import (
    KINDS,
    BuildContext,
    Judge,
    JudgeSpec,
    Verdict,
    build,
    check_params,
    check_settings,
    judge_class,
)
from judgetune.lm import EndpointError, check_endpoint, run_record

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


class TemplateModel(BaseModel):
    """The identity of a chat template: where it came from and the SHA-256 of its Jinja text."""

    model_config = ConfigDict(extra="forbid", strict=True)

    source: str = Field(description="local:NAME, a GGUF path, or text (Jinja text given as such)")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class LMModel(BaseModel):
    """The LM a judge runs on: its spec and endpoint, never a key."""

    model_config = ConfigDict(extra="forbid", strict=True)

    spec: str
    kind: str | None = None
    model: str | None = None
    api_base: str | None = None
    reasoning: bool | None = Field(default=None, description="a reasoning model (no temperature or logprobs sent); "
                                   "null: decided from the model name")
    label_position: Literal["completions", "prefill", "generated"] | None = Field(
        default=None, description="over a server, where the judge read its labels when tuned, and so where it reads "
        "them when scoring (docs/served-models.md); absent or null: where the server's probe finds")
    chat_template: TemplateModel | None = Field(default=None, description="the chat template the prompt was "
                                                "rendered with for label_position completions: {source, sha256}")


_KEY_FIELDS = {"api_key", "apikey", "key", "authorization", "token"}


def config_schema() -> dict[str, Any]:
    """The JSON Schema of judge.json; ``schema_version`` is required, as ``JudgeConfig.load`` requires it (its
    default serves configs built in Python)."""
    schema = JudgeConfig.model_json_schema()
    schema["required"] = ["schema_version", *(name for name in schema["required"] if name != "schema_version")]
    return schema


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



def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class JudgeConfig(BaseModel):
    """judge.json: a frozen judge (``judgetune schema`` prints this model as JSON Schema).

    Types are strict: a value of the wrong JSON type is refused, never coerced. What only the judge
    kinds know (settings against the kind's declared ones, the LM an LM judge needs, the demos, the
    calibrator, a fitted judge's state) is checked by :meth:`from_dict`, which :meth:`load` uses.
    """

    model_config = ConfigDict(extra="forbid", strict=True, title="judgetune judge config")

    schema_version: Literal[1] = Field(default=SCHEMA_VERSION, description="format version of this file")
    judge: str = Field(description="judge kind (one of the registered kinds)")
    params: dict[str, Any] = Field(description="the judge's settings (chosen by the tuner); only the kind's own")
    lm: dict[str, Any] | None = Field(description="the LM of an LM judge (null for judges without one): "
                                      "{spec, kind, model, api_base, reasoning}, never a key")
    instruction: str | None = Field(description="the instruction text (null when the kind has none)")
    demos: list[dict[str, Any]] = Field(description="few-shot demos in full, as data rows")
    calibrator: dict[str, Any] | None = Field(description="fitted calibrator (null: the judge's range mapped linearly)")
    label_range: list[float] = Field(min_length=2, max_length=2, description="[low, high] human scale")
    metrics: dict[str, Any] = Field(default_factory=dict, description="what the judge earned, with intervals")
    data: dict[str, Any] = Field(default_factory=dict, description="fingerprints of the data it was tuned on")
    seed: Annotated[int, Field(ge=0)] = 0
    versions: dict[str, Any] = Field(default_factory=versions, description="package versions")
    created: str = Field(default_factory=_now)
    fitted: dict[str, Any] | None = Field(default=None, description="a fitted judge's learned state (hybrid: its "
                                          "model and BM25 corpus statistics; bm25: corpus statistics)")
    criterion: str | None = Field(default=None, description="what is judged, in the user's words (the instruction "
                                                            "pool started from it); null when none was given")
    protocol: Literal["group", "linkage"] | None = Field(
        default=None, description="the protocol its figures were produced under (null: every item scored alone "
        "from the judge's state and the item; group/linkage: see docs/judges.md)")
    reproduce: dict[str, Any] = Field(default_factory=dict, description="what reproducing its figures needs: "
                                      "engine, threads, items decoded side by side, llama.cpp version, machine")

    @classmethod
    def from_judge(cls, judge: Judge, *, lm: dict | None, calibrator: Calibrator | None,
                   label_range: tuple[float, float], **extra: Any) -> JudgeConfig:
        spec = judge.spec()
        extra.setdefault("reproduce", run_record(getattr(judge, "lm", None)))
        record = getattr(getattr(judge, "lm", None), "label_record", None)
        if lm is not None and callable(record):  # over a server: where the judge read its labels
            lm = {**lm, **record()}
        if judge.needs_groups:
            extra.setdefault("protocol", "group")  # the only way such a judge could have been scored
        return cls(judge=spec.kind, params=dict(spec.params), lm=lm, instruction=spec.instruction,
                   demos=[d.to_dict() for d in spec.demos or ()], calibrator=calibrator.to_dict() if calibrator else None,
                   label_range=[float(label_range[0]), float(label_range[1])],
                   fitted=None if spec.fitted is None else dict(spec.fitted), **extra)

    def to_dict(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        if data["fitted"] is None:
            del data["fitted"]
        return data

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        make_folder(path.parent)
        return write_text(path, json.dumps(self.to_dict(), indent=2, sort_keys=False, allow_nan=False) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> JudgeConfig:
        """Read and validate a judge.json.

        Raises:
            ConfigError: naming the file and every bad field (nothing is built from a broken config).
        """
        path = Path(path)
        return cls.from_dict(read_config_json(path), where=shown(path))

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str = "config") -> JudgeConfig:
        """Validate a config's plain data: the model's strict types, then what only the judge kinds know
        (settings by name and value, an LM for an LM judge, the calibrator, the demos, a fitted state).

        Raises:
            ConfigError: every problem found, one per line, each naming the field.
        """
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a JSON object, found {describe(data)}")
        problems = [f"{where}: {p}" for p in (*_non_finite(data), *unwritable(data))]
        if isinstance(data.get("schema_version"), int) and data["schema_version"] != SCHEMA_VERSION:
            raise ConfigError(f"{where}: schema_version: expected {SCHEMA_VERSION}, found {data['schema_version']} "
                              "(written by another judgetune version)")
        if "schema_version" not in data:
            problems.append(f"{where}: schema_version: missing (expected {SCHEMA_VERSION})")
        elif type(data["schema_version"]) is not int:  # Literal[1] alone lets true and 1.0 through (they equal 1)
            found = "null" if data["schema_version"] is None else describe(data["schema_version"])
            problems.append(f"{where}: schema_version: expected the integer {SCHEMA_VERSION}, found {found}")
        checked = data
        if isinstance(data.get("lm"), dict) and any(k.lower() in _KEY_FIELDS for k in data["lm"]):
            problems.append(f"{where}: lm: expected no key (a key never belongs in a config file); remove it and "
                            f"set ${API_KEY_ENVS[0]} in the environment")  # the key itself is never echoed
            checked = {**data, "lm": {k: v for k, v in data["lm"].items() if k.lower() not in _KEY_FIELDS}}
        try:
            config = cls.model_validate(checked)
        except ValidationError as err:
            said = {_field(p, where) for p in problems}  # a field already refused above is said once
            problems += [p for p in problems_from(err, where, known="a field of judge.json (`judgetune schema` prints "
                                                                     "them)") if _field(p, where) not in said]
            config = None
        if config is not None:
            problems += config.kind_problems(where)
        if problems or config is None:
            raise ConfigError("\n".join(dict.fromkeys(problems)))
        return config

    def kind_problems(self, where: str = "config") -> list[str]:
        """What is wrong with this config for its judge kind, one line per problem (``where: field: ...``)."""
        if self.judge not in KINDS:
            return [f"{where}: judge: expected one of {', '.join(KINDS)}, found {describe(self.judge)}"]
        problems: list[str] = []
        if self.lm is not None:
            try:
                record = LMModel.model_validate(self.lm)
                if (record.label_position == "completions") != (record.chat_template is not None):
                    problems.append("lm.chat_template: expected the template's {source, sha256} with label_position "
                                    "completions, and only then")
                if isinstance(self.lm.get("api_base"), str):
                    check_endpoint(self.lm["api_base"])  # http(s), never a link-local or metadata address
            except EndpointError as err:
                problems.append(f"lm.api_base: {err}")
            except ValidationError as err:
                problems += [p.replace(f"{where}: ", f"{where}: lm.", 1) for p in problems_from(
                    err, where, known="an LM field (spec, kind, model, api_base, reasoning, label_position, "
                                      "chat_template)")]
        low, high = self.label_range
        if not low < high:
            problems.append("label_range: expected [low, high] with low below high (a reversed range would invert "
                            "every score)")
        cls = judge_class(self.judge)
        unknown = check_settings(self.judge, self.params)
        problems += unknown
        if not unknown:
            try:
                check_params(cls.space_for(self.params), self.params, judge=self.judge)
            except ValueError as err:
                problems.append(f"params: {err}")
        if self.needs_lm() and self.lm is None:
            problems.append(f"lm: expected an object with the LM spec for judge {self.judge}, found nothing")
        try:
            demos_from_records(self.demos, where=where)
        except ConfigError as err:
            problems += str(err).splitlines()
        if self.calibrator is not None:
            problems += _calibrator_problems(self.calibrator, self.label_range)
        if cls.fits and not isinstance(self.fitted, dict):
            problems.append(f"fitted: expected the {self.judge} judge's fitted state (an object)")
        elif self.fitted is not None and not cls.fits:
            problems.append(f"fitted: only a judge that is fitted (hybrid, bm25) has a fitted state, not {self.judge}")
        elif self.fitted is not None:
            try:
                cls.check_fitted(self.fitted)
            except (TypeError, ValueError, KeyError) as err:
                problems += [line if line.startswith("fitted") else f"fitted: {line}" for line in str(err).splitlines()]
        return [p if p.startswith(f"{where}: ") else f"{where}: {p}" for p in problems]

    def needs_lm(self) -> bool:
        """Whether the judge this config describes needs an LM (its settings, or a panel's members, say so)."""
        with_fitted = {**self.params, **({"fitted": self.fitted} if self.fitted is not None else {})}
        return judge_class(self.judge).needs_lm_with(with_fitted)

    def demo_examples(self) -> list[Example]:
        return demos_from_records(self.demos, where="config")

    def spec(self) -> JudgeSpec:
        """The frozen judge as plain data for ``judges.build``."""
        return JudgeSpec(self.judge, dict(self.params), instruction=self.instruction,
                         demos=tuple(self.demo_examples()) if judge_class(self.judge).uses_prompt else None,
                         fitted=self.fitted, seed=self.seed)

    def build_judge(self, lm=None, *, where: str = "judge.json") -> Judge:
        """The judge this config describes, on ``lm``: its frozen state alone (what an item is scored against is
        what it carries, see ``judges.apply_protocol``). Over a server, ``lm`` reads labels where the judge read
        them when tuned (``lm.label_position``), checked now.

        Raises:
            LabelPositionError: the server does not offer that label position (one line; ``where`` names the file).
        """
        self.freeze_label_position(lm, where=where)
        return build(self.spec(), BuildContext(lm=lm, label_range=(self.label_range[0], self.label_range[1])))

    def freeze_label_position(self, lm: Any, *, where: str = "judge.json") -> None:
        """Over a server, have ``lm`` read labels where the judge read them when tuned (``lm.label_position``), and
        check now that the server offers it; nothing for a judge.json that records none, or an in-process LM.

        Raises:
            LabelPositionError: the server does not offer that label position (one line; ``where`` names the file).
        """
        position = (self.lm or {}).get("label_position")
        if position is not None and hasattr(lm, "freeze_label_position"):
            lm.freeze_label_position(position, self.lm.get("chat_template"), where=where)

    def calibrated(self, verdicts: list[Verdict], judge: Judge, examples: list[Example]) -> list[float | None]:
        """Scores on the human scale: the calibrator's map of each parsed raw score (None for a failure);
        uncalibrated, each item's range (the judge's, for that item alone) mapped linearly onto the human one."""
        out: list[float | None] = [None] * len(verdicts)
        kept = [i for i, v in enumerate(verdicts) if v.score is not None]
        if not kept:
            return out
        values = np.asarray([verdicts[i].score for i in kept], dtype=float)
        if self.calibrator is not None:
            calibrator = calibrator_from_dict(self.calibrator)
            mapped = calibrator.predict(values)
            if not calibrator.is_flat() and calibrator.off_scale(values).all():  # a flat map: one score by design
                _warn_if_pinned(mapped, values, self.label_range)
        else:
            (lo, hi) = self.label_range
            mapped = []
            for i, value in zip(kept, values):
                a, b = judge.range_for([examples[i]])
                mapped.append(min(hi, max(lo, lo + (value - a) * (hi - lo) / (b - a))))  # a raw score past its range
        for i, value in zip(kept, mapped):
            out[i] = float(value)
        return out


def _calibrator_problems(calibrator: dict[str, Any], label_range: list[float]) -> list[str]:
    """What is wrong with a judge.json's calibrator: its own fields, and a scale other than the judge's."""
    try:
        calibrator_from_dict(calibrator)
    except (KeyError, TypeError, ValueError) as err:
        return [f"calibrator: {err}"]
    own = [float(v) for v in calibrator["label_range"]]
    if own != [float(v) for v in label_range]:
        return [f"calibrator.label_range: expected the judge's label_range [{label_range[0]:g}, {label_range[1]:g}], "
                f"found [{own[0]:g}, {own[1]:g}] (its scores would lie off the judge's scale)"]
    return []


def _field(problem: str, where: str) -> str:
    """The field a ``where: field: ...`` problem line names."""
    return problem.removeprefix(f"{where}: ").split(":", 1)[0]


def _warn_if_pinned(mapped: np.ndarray, raw: np.ndarray, label_range: list[float]) -> None:
    """Warn when a calibrator's map lies off the scale for every item (two or more), so that each is clipped to
    the same end: a hand-edited or foreign calibrator, or items far beyond the raw scores it was fitted on. (An
    isotonic map's last knot at an end is on the scale: items beyond it get that end by design.)"""
    for end, name in ((label_range[1], "top"), (label_range[0], "bottom")):
        if len(raw) > 1 and np.all(mapped == end):
            logging.getLogger(__name__).warning(
                "the calibrator maps all %d items (raw scores %g to %g) off the scale, clipped to its %s, %g: check "
                "the calibrator in the judge config, unless these items lie far beyond those it was fitted on",
                len(raw), raw.min(), raw.max(), name, end)


def read_config_json(path: Path) -> Any:
    """The parsed JSON of a judge config file.

    Raises:
        ConfigError: a folder, a missing file, undecodable bytes or text that is not JSON.
    """
    if path.is_dir():
        raise ConfigError(f"{shown(path)}: expected a judge config file (judge.json), found a folder")
    try:  # the strict reader: repeated keys, deep nesting and values of the wrong JSON type refused
        return read_json(path, model=JudgeConfig)
    except FileNotFoundError:
        raise ConfigError(f"{shown(path)}: no such judge config") from None
    except DataValidationError as err:
        raise ConfigError(str(DataValidationError(err.problems, within="the judge config"))) from None


JudgeConfigModel = JudgeConfig  # the one schema, under its former name
