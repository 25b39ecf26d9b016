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
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from judgetune.calibration import Calibrator, calibrator_from_dict
from judgetune.datasets import Example, example_from_record
from judgetune.errors import JudgetuneError
from judgetune.judges import LM_JUDGES, Judge, Verdict

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
        settings = judge.settings()
        return cls(judge=judge.kind, params=settings["params"], lm=lm, instruction=settings.get("instruction"),
                   demos=settings.get("demos", []), calibrator=calibrator.to_dict() if calibrator else None,
                   label_range=[float(label_range[0]), float(label_range[1])], fitted=settings.get("fitted"),
                   **extra)

    def to_dict(self) -> dict[str, Any]:
        return {"schema_version": self.schema_version, **{k: v for k, v in asdict(self).items()
                                                           if k != "schema_version" and not (k == "fitted" and v is None)}}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=False) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> JudgeConfig:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such judge config") from None
        except json.JSONDecodeError as err:
            raise ConfigError(f"{path}: line {err.lineno}: not JSON ({err.msg})") from None
        return cls.from_dict(data, where=str(path))

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, where: str = "config") -> JudgeConfig:
        def need(key: str, types: type | tuple, what: str) -> Any:
            if key not in data:
                raise ConfigError(f"{where}: {key}: missing (expected {what})")
            if not isinstance(data[key], types):
                raise ConfigError(f"{where}: {key}: expected {what}, found {type(data[key]).__name__}")
            return data[key]

        version = need("schema_version", int, "an integer")
        if version != SCHEMA_VERSION:
            raise ConfigError(f"{where}: schema_version: expected {SCHEMA_VERSION}, found {version} "
                              "(written by another judgetune version)")
        kind = need("judge", str, "a judge kind")
        from judgetune.judges import KINDS

        if kind not in KINDS:
            raise ConfigError(f"{where}: judge: expected one of {', '.join(KINDS)}, found {kind!r}")
        if kind in LM_JUDGES and not isinstance(data.get("lm"), dict):
            raise ConfigError(f"{where}: lm: expected an object with the LM spec for judge {kind}")
        label_range = need("label_range", list, "[low, high]")
        if len(label_range) != 2 or not all(isinstance(v, (int, float)) for v in label_range):
            raise ConfigError(f"{where}: label_range: expected [low, high], found {label_range}")
        demos_from_records(need("demos", list, "a list of examples"), where=where)
        if data.get("calibrator") is not None:
            try:
                calibrator_from_dict(data["calibrator"])
            except (KeyError, TypeError, ValueError) as err:
                raise ConfigError(f"{where}: calibrator: {err}") from None
        for key in ("metrics", "data", "versions"):
            need(key, dict, "an object")
        if kind == "hybrid" and not isinstance(data.get("fitted"), dict):
            raise ConfigError(f"{where}: fitted: expected the hybrid judge's fitted model (an object)")
        if data.get("fitted") is not None:
            if kind != "hybrid" or not isinstance(data["fitted"], dict):
                raise ConfigError(f"{where}: fitted: only a hybrid judge has a fitted model (an object)")
            from judgetune.judges import HybridModel

            try:
                HybridModel.from_dict(data["fitted"])
            except (TypeError, ValueError) as err:
                raise ConfigError(f"{where}: {err}") from None
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {unknown}")
        return cls(**{k: data[k] for k in known if k in data})

    def demo_examples(self) -> list[Example]:
        return demos_from_records(self.demos, where="config")

    def build_judge(self, lm=None, *, pool: list[Example] | None = None) -> Judge:
        """The judge this config describes, on ``lm`` (references drawn from ``pool`` where the kind needs them)."""
        from judgetune.judges import ReferencePool, build_judge

        if self.judge in ("hybrid", "refsim"):
            fitted = {"fitted": self.fitted} if self.judge == "hybrid" else {}
            return build_judge(self.judge, pool=ReferencePool(pool or []), seed=self.seed, **fitted, **self.params)
        if self.judge not in LM_JUDGES:
            return build_judge(self.judge, **self.params)
        extra: dict[str, Any] = {"demos": self.demo_examples(), "instruction_text": self.instruction,
                                 "label_range": tuple(self.label_range)}
        if self.judge in ("linkage", "pairwise"):
            extra.update(pool=ReferencePool(pool or []), seed=self.seed)
        return build_judge(self.judge, lm, **extra, **self.params)

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
        else:  # uncalibrated: the judge's range mapped linearly onto the human one
            (a, b), (lo, hi) = judge.range_for(examples), self.label_range
            mapped = lo + (values - a) * (hi - lo) / (b - a)
        for i, value in zip(kept, mapped):
            out[i] = float(value)
        return out


def score_examples(config: JudgeConfig, examples: list[Example], lm=None, *,
                   progress: bool = False) -> tuple[list[Verdict], list[float | None]]:
    """Verdicts and calibrated scores of a frozen judge on ``examples`` (references drawn from them)."""
    judge = config.build_judge(lm, pool=examples)
    verdicts = judge.judge_all(examples, progress=progress)
    return verdicts, config.calibrated(verdicts, judge, examples)


def load_config_lm(config: JudgeConfig):
    """The LM a config names (None for judges without one). A server's key comes from the environment."""
    if config.judge not in LM_JUDGES:
        return None
    from judgetune.lm import load_lm

    return load_lm(config.lm["spec"], api_base=config.lm.get("api_base"))
