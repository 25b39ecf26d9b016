"""Stage 1, the spec: everything one tuning run needs, stored as the study's user attributes, so
``worker`` processes on other machines join the same study from the storage URL alone."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from judgetune.datasets import unwritable
from judgetune.judges import PROTOCOLS, judge_class

SAMPLERS = ("tpe", "nsga2", "random")
PICK_RULES = ("spearman", "mae")
GATES = ("on", "nested", "off")
GATE_ITEMS_CAP = 2000  # gate_items=None: every labeled non-test item, up to this many (see ``gate_bound``)
ALSO_AUTO = ("hybrid", "embedding")  # also=None: these families' defaults join an LM judge's challengers
RESCORE, RESCORE_ITEMS = 4, 60  # rescore=None: one challenger per 60 confirming items, at least 4 (``rescore_for``)
MIN_GATE_GROUPS = 3  # dev questions: fewer, and the gate refuses (a t interval over 2 differences says little)
RUN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a run is the folder runs/NAME
_RUN_NAME = RUN_NAME


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
    rescore: int | None = None  # the strongest trials by their search figures that selection scores beside the
    # default; None: by the confirming items (``rescore_for``)
    gate_items: int | None = None  # the most labeled non-test items selection scores each candidate on (search, the
    # demo pool's, dev; the pool's are sampled to fit, whole groups, seeded); None: every one, up to GATE_ITEMS_CAP
    fields: dict[str, str] = field(default_factory=dict)  # Example field -> the data file's column
    label: str | None = None  # the data file's column holding the human score (None: label / preference)
    gate: str = "nested"  # "nested" (default): every labeled item chooses and confirms (nested cross-validation of
    # the choice); "on": a challenger replaces the default only on a reliable dev gain; "off": the old dev pick
    audit_max: dict[str, float] = field(default_factory=dict)  # audit probe -> largest |effect| a challenger may show
    protocol: str | None = None  # None: every item scored alone; "group" / "linkage": see judges.apply_protocol
    per_grade: int = 1  # linkage: references drawn per grade for each question
    stack: bool = False  # hybrid: the search may add the LM's features beside the signals (the judge's STACKED
    # settings); the signal-only hybrid stays the default the gate tests a stacked judge against
    panel: bool = False  # selection adds one more candidate: the panel of every candidate scored (each standardized
    # by its search-item scores, averaged), gated like any other and frozen with its members
    also: list[str] | None = None  # other judge families whose default judges join the gate's challengers (scored
    # on the same selection items; only the nested gate may ship one, in the default's place); None: ``ALSO_AUTO``
    # beside a judge that needs an LM under the nested gate, those the data supports (``also_families``)
    screen: bool = True  # the nested gate screens the challengers on the first confirming items (``_racing``);
    # False: every challenger is judged on every confirming item (futility looks only): more power, more judgments
    pooled: bool = False  # the search's and the gate's Spearman over all items together, not within each question:
    # for groups that are clusters (a document's claims) rather than questions whose answers are ranked; the groups
    # still keep items together in the splits, the calibrator's and the gate's folds, and the paired tests' units

    def __post_init__(self) -> None:
        if not _RUN_NAME.fullmatch(self.name) or ".." in self.name:
            raise ValueError(f"run name {self.name!r}: expected a plain name (letters, digits, '.', '_', '-'; "
                             "no path, no '..'): a run lives in runs/NAME/")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {SAMPLERS}, got {self.sampler!r}")
        if self.gate not in GATES:
            raise ValueError(f"gate must be one of {GATES}, got {self.gate!r}")
        if self.protocol not in (None, *PROTOCOLS):
            raise ValueError(f"protocol must be one of {PROTOCOLS} or None, got {self.protocol!r}")
        if self.stack and not judge_class(self.judge).STACKED:
            raise ValueError(f"stack: the {self.judge} judge has no LM features to add beside its own; stack "
                             "the hybrid judge (--judge hybrid --stack)")
        if self.panel and self.protocol is not None:
            raise ValueError(f"panel: a panel's members score each item alone; it cannot be tuned under the "
                             f"{self.protocol} protocol")
        if self.also:
            for kind in self.also:
                judge_class(kind)  # an unknown family: the registry's error names the known ones
            if self.judge in self.also or len(set(self.also)) < len(self.also):
                raise ValueError(f"also: expected judge families other than --judge {self.judge}, each once, got "
                                 f"{', '.join(self.also)}")
            if self.gate != "nested":
                raise ValueError("also: another family's judge replaces the default only through the nested gate; "
                                 "use --gate nested (the default)")
        if self.panel and self.gate == "off":
            raise ValueError("panel: a panel enters selection through the gate; use --gate nested or on")
        if self.per_grade < 1:
            raise ValueError(f"per_grade must be >= 1, got {self.per_grade}")
        if self.pick not in PICK_RULES:
            raise ValueError(f"pick must be one of {PICK_RULES}, got {self.pick!r}")
        if self.search_items < 4 or self.chunk < 1 or self.n_trials < 1:
            raise ValueError("search_items must be >= 4, chunk and n_trials >= 1")
        if self.fit_items is not None and self.fit_items < 4:
            raise ValueError(f"fit_items must be >= 4 (or None for all), got {self.fit_items}")
        if self.gate_items is not None and self.gate_items < 1:
            raise ValueError(f"gate_items must be >= 1 (or None for every item up to {GATE_ITEMS_CAP}), "
                             f"got {self.gate_items}")
        if self.proposals < 0 or self.rounds < 1 or self.demo_draws < 1 or (self.rescore or 1) < 1:
            raise ValueError("proposals must be >= 0; rounds, demo_draws and rescore >= 1")
        bad_text = unwritable(asdict(self))  # a lone surrogate (a non-UTF-8 byte in an option or a file name)
        if bad_text:  # would fail when judge.json is written, after the whole run
            raise ValueError(bad_text[0] + ("; rename the file (judge.json records its name as text)"
                                            if bad_text[0].startswith("data:") else ""))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def also_auto(self) -> bool:
        """Whether the other families are the automatic ones (``also`` left out), not the user's."""
        return self.also is None

    def also_families(self) -> list[str]:
        """The other families whose default judges join the challengers: ``also``, or when it is left out
        ``ALSO_AUTO`` (the cheap ones: no LM, fitted in seconds) beside a judge that needs an LM, under the nested
        gate. On paraphrase data the family matters more than the prompt: at 300 rows another family's default ships
        in the LM judge's place in 88-100% of replayed draws for +0.15 to +0.33 Spearman on new data
        (docs/tuning.md, the replay at the defaults)."""
        if self.also is not None:
            return list(self.also)
        if self.gate != "nested" or not judge_class(self.judge).needs_lm_with(self.fixed):
            return []
        return [kind for kind in ALSO_AUTO if kind != self.judge]

    def rescore_for(self, confirming: int) -> int:
        """The challengers selection scores beside the default: ``rescore``, or by default one per ``RESCORE_ITEMS``
        confirming items, at least ``RESCORE`` and at most every trial but one. Many confirming items pay for
        more challengers: the gate's screen then picks among them on more items, and a candidate truly +0.10
        Spearman better ships far more often (benchmarks/results/gate_power.json)."""
        if self.rescore is not None:
            return self.rescore
        return max(RESCORE, min(self.n_trials - 1, confirming // RESCORE_ITEMS))

    @property
    def gate_bound(self) -> int:
        """The most labeled non-test items the gate scores: ``gate_items``, or ``GATE_ITEMS_CAP`` when it is None.
        Below the cap every labeled row counts. Past it, each row costs a judgment per candidate still judged, the
        gate's jackknife over single items grows with the square of the items (one planted choice took 2 s of CPU
        at 2,000 items, 31 s at 6,000), and power grows slowly: the candidates are chosen on the search items (a
        candidate truly +0.10 Spearman better shipped in 30% of 40 planted draws at 1,600 confirming items, 35% at
        3,200)."""
        return GATE_ITEMS_CAP if self.gate_items is None else self.gate_items
