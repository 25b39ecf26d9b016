"""Stage 2, splits and folds: train / dev / test by group (seeded), the search items, the demo pool,
and the settings the data decides before the first trial. Folds inside these splits come from one
helper, ``judgetune.datasets.group_folds`` (scikit-learn's ``GroupKFold``), shared by the search
objective, the calibrator and selection."""

from __future__ import annotations

import inspect
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from judgetune import datasets
from judgetune.datasets import Example, limit_by_group, sample_per_group
from judgetune.judges import apply_protocol, judge_class
from judgetune.stats import FOLDS
from judgetune.tuning._spec import MIN_GATE_GROUPS, RunSpec

log = logging.getLogger(__name__)
MIN_SELECTION_GROUPS = 5  # fewer questions than this: grouped folds hold out one or two questions at a time
RARE_LABEL_ITEMS = 20  # --gate on over items: a binary label's value held by fewer confirming items makes its t loose


@dataclass
class Splits:
    search: list[Example]
    demo_pool: list[Example]
    train: list[Example]
    dev: list[Example]
    test: list[Example]
    label_range: tuple[float, float]
    data_fixed: dict[str, Any] = field(default_factory=dict)  # settings the data decides (see ``fit_space``)
    confirming_pool: list[Example] = field(default_factory=list)  # the demo pool's items selection also scores

    @property
    def selection(self) -> list[Example]:
        """Every labeled non-test item selection scores the candidates on: the search items (which chose the
        candidates), then the demo pool's (each judged by a candidate whose demos and fit come from the pool's other
        folds) and dev. Every one of them takes part in the gate; all but the search items also confirm."""
        return [*self.search, *self.confirming_pool, *self.dev]

    @property
    def calibration(self) -> list[Example]:
        """The items the frozen judge's calibrator is fitted on: search and dev (a pool item may be a demo of the
        frozen judge itself)."""
        return [*self.search, *self.dev]


def fit_space(spec: RunSpec, train: list[Example]) -> dict[str, Any]:
    """The settings of the judge's space that cannot change the result on this data (a signal that
    needs references on reference-free data, an encoder that is not installed), fixed before the
    first trial; what is left out and why is logged once here, never per trial. The user's
    ``fixed`` settings take precedence."""
    kind = judge_class(spec.judge)
    decide = getattr(kind, "left_out", None)
    takes_protocol = decide is not None and "protocol" in inspect.signature(decide).parameters
    decided = {} if decide is None else decide(train, protocol=spec.protocol) if takes_protocol else decide(train)
    unsearched = () if spec.stack else getattr(kind, "STACKED", ())  # the LM's features: off, and not searched
    left = {k: v for k, v in decided.items() if k not in spec.fixed and k not in unsearched}
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
    ``per_question``, each question keeps that many of its answers (seeded) first. Under a protocol
    (``linkage``), each split's questions draw their references from their own labeled answers, which
    then leave the candidates, so no item is scored against a label of another candidate."""
    scale = None if spec.scale is None else datasets.Scale(*spec.scale)
    examples, label_range = datasets.load_data(spec.data, scale=scale, fields=spec.fields, label=spec.label)
    examples = [e for e in examples if e.judgment is not None]
    splits = datasets.split_examples(examples, seed=spec.seed)
    if spec.scale is None and str(spec.data) not in datasets.CATALOG:  # the labels' range, the test rows unseen
        seen = [e.judgment for name in ("train", "dev") for e in splits[name]]
        label_range = (float(min(seen)), float(max(seen))) if seen and min(seen) < max(seen) else label_range
    if spec.per_question is not None:  # many questions with a few answers each, rather than few whole questions
        splits = {name: sample_per_group(items, spec.per_question, seed=spec.seed) for name, items in splits.items()}
    if spec.protocol is not None:
        grades = sorted({float(e.label) for e in examples if e.label is not None}, reverse=True)
        splits = {name: apply_protocol(items, spec.protocol, per_grade=spec.per_grade, seed=spec.seed,
                                       grades=grades).candidates for name, items in splits.items()}
    search = limit_by_group(splits["train"], spec.search_items, seed=spec.seed)
    search_groups = {e.group_key for e in search}
    demo_pool = [e for e in splits["train"] if e.group_key not in search_groups]
    demo_pool = limit_by_group(demo_pool, spec.fit_items, seed=spec.seed)  # a fit on 5,749 STS-B pairs encodes 11k texts
    dev = limit_by_group(splits["dev"], spec.dev_items, seed=spec.seed)
    test = limit_by_group(splits["test"], spec.test_items, seed=spec.seed)
    if len(search) < 4 or len(dev) < 4 or len(test) < 2:
        raise ValueError(f"{spec.data}: too few labeled items (search {len(search)}, dev {len(dev)}, test {len(test)}; "
                         "tuning needs at least 4, 4 and 2: label more rows, or, if the file holds more, raise "
                         "--search-items, --dev-items or --test-items)")
    confirming = _confirming_pool(spec, search, demo_pool, dev)
    tested = [*confirming, *dev]
    _warn_few_questions(spec, [*search, *tested], tested)
    _warn_rare_label(spec, [*search, *tested], tested)
    return Splits(search, demo_pool, splits["train"], dev, test, label_range, fit_space(spec, splits["train"]),
                  confirming)


def _confirming_pool(spec: RunSpec, search: list[Example], demo_pool: list[Example],
                     dev: list[Example]) -> list[Example]:
    """The demo pool's items the gate also scores: every one, as far as ``spec.gate_bound`` leaves room beside the
    search and dev items (whole groups, seeded). The run says in one line why the gate scores more items than a
    user's ``dev_items`` asked for, and in one line how many labeled items the bound leaves out."""
    if len(demo_pool) < 2:  # the pool's items are judged cross-fitted, on the pool's other folds: two at least
        return []
    room = max(0, spec.gate_bound - len(search) - len(dev))
    confirming = limit_by_group(demo_pool, room, seed=spec.seed) if room else []
    bound = (f"--gate-items {spec.gate_items}" if spec.gate_items is not None
             else f"--gate-items at its default, every labeled non-test row up to {spec.gate_bound}")
    if spec.dev_items is not None and confirming:
        log.warning("%s: --dev-items %d: the gate also confirms on %d of the demo pool's items (training rows the "
                    "search did not score), since the rows it tests on decide its power; %s bounds them, and losers "
                    "stop being judged early", spec.name, spec.dev_items, len(confirming),
                    "--gate-items N" if spec.gate_items is None else bound)
    if len(confirming) < len(demo_pool):
        log.warning("%s: %s: the gate scores %d of the %d labeled non-test items kept; the demo pool's other %d are "
                    "left out to bound the gate's judgments (raise --gate-items to use them)", spec.name, bound,
                    len(search) + len(confirming) + len(dev), len(search) + len(demo_pool) + len(dev),
                    len(demo_pool) - len(confirming))
    return confirming


def _warn_few_questions(spec: RunSpec, selection: list[Example], confirming: list[Example]) -> None:
    """One warning when grouped selection items hold few questions: the calibrator and the early stop
    then learn from one or two questions, and on new questions can do worse than the median
    (measured: TREC-DL-NF embedding, 56 selection items from 2 questions, test MAE 1.153 vs the
    constant's 0.830; with ``--per-question 6``, 10 questions, 0.778 vs 0.875); and the gate has little
    power with few questions to test on: both gates test on the confirming items (the demo pool's and dev),
    the nested gate on none below ``FOLDS`` questions, the one-challenger gate below ``MIN_GATE_GROUPS``."""
    keys = datasets.groups_of(selection)
    if keys is None:
        return
    questions = len(set(keys))
    tested = len({e.group_key for e in confirming})
    if spec.pooled:  # the gate ranks items, not questions: only the calibrator's questions count
        few, gate = questions < MIN_SELECTION_GROUPS, "ranks the items pooled (--pooled)"
    else:
        least = FOLDS if spec.gate == "nested" else MIN_GATE_GROUPS
        few = min(questions, tested) < MIN_SELECTION_GROUPS
        gate = ("tests on the confirming questions (pool and dev) and "
                + (f"makes no test with fewer than {least} (the default ships)" if tested < least
                   else "can hardly tell judges apart with so few"))
    if not few:
        if not spec.pooled:
            _warn_few_ranked(spec, selection, confirming, questions)
        return
    hint = ("keep fewer answers per question (--per-question N) to see more questions" if spec.per_question is None
            else "raise --search-items / --dev-items / --gate-items")
    log.warning("%s: the %d selection items come from only %d question(s), the %d confirming items (pool and dev) "
                "from %d: the calibrator learns from few questions and may not carry to others, and the gate %s; %s",
                spec.data, len(selection), questions, len(confirming), tested, gate, hint)


def _warn_rare_label(spec: RunSpec, selection: list[Example], confirming: list[Example]) -> None:
    """One warning when ``--gate on`` tests over items (ungrouped or ``--pooled`` data) and one value of a binary
    label is rare among the confirming items: the paired t then rests on those few items and can pass more often than
    its 5% (SummaC's claims pooled, about 15 inconsistent among 200 confirming rows: shuffled labels passed in 6.75%
    of 400 draws with the grading model's rubric judge and 3.0% with the embedded model's, the nested gate 2.0% and
    1.75%; benchmarks/results/replay-qwen1.5b-rubric-summac-polytope-pooled-families.json,
    replay-smollm2-rubric-summac-polytope-wide-pooled-families.json).
    The grouping is the selection's, as the gate's."""
    if spec.gate != "on" or (datasets.groups_of(selection) is not None and not spec.pooled):
        return
    counts = Counter(e.judgment for e in confirming if e.judgment is not None)
    if len(counts) != 2:
        return
    value, held = min(counts.items(), key=lambda kv: (kv[1], kv[0]))
    if held < RARE_LABEL_ITEMS:
        log.warning("%s: only %d of the %d confirming items have the label %g: --gate on's paired t over items rests "
                    "on those few and can pass more often than its 5%% (docs/tuning.md, --pooled); the nested gate "
                    "(--gate nested, the default) holds its level there", spec.data, held, sum(counts.values()),
                    value)


def _ranked_questions(items: list[Example]) -> int:
    """The questions whose items hold more than one label value: the only ones a per-question Spearman ranks."""
    values: dict[str, set[float]] = {}
    for e in items:
        values.setdefault(e.group_key, set()).add(e.judgment)
    return sum(len(v) > 1 for v in values.values())


def _warn_few_ranked(spec: RunSpec, selection: list[Example], confirming: list[Example], questions: int) -> None:
    """One warning when most questions hold one label value each (a binary label, most answers of a question
    alike): the search and the gate rank answers within a question, so they learn from the few questions left
    (SummaC polytope, whose groups are documents: 27 consistent claims in 403, most documents all one label).
    The gate's count is of the confirming questions (pool and dev), the ones it tests on."""
    ranked = _ranked_questions(selection)
    tested = _ranked_questions(confirming)
    refused = tested < (FOLDS if spec.gate == "nested" else MIN_GATE_GROUPS)
    if ranked >= MIN_SELECTION_GROUPS and 2 * ranked >= questions and not refused:
        return
    log.warning("%s: of the %d questions of the selection items, only %d hold more than one label value (%d of those "
                "the gate tests on): figures rank answers within a question, so the search and the gate learn from "
                "those alone, and the gate %s; if the groups are clusters (documents) rather than questions whose "
                "answers are ranked, --pooled (pooled=True) ranks all items together and keeps the groups for the "
                "splits", spec.data, questions, ranked, tested,
                "makes no test (the default ships)" if refused else "can hardly tell judges apart")
