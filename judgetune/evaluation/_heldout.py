"""The items a frozen judge never saw: its own split, not the caller's.

A tuned judge records the seed its data was split with (``data.split_seed`` in judge.json) and the
SHA-256 of its data files. Evaluating or comparing it on another seed's "test" split would score it
on its own calibration items (measured on a 400-row CSV: of 300 "test" items of seed 0, 164 were the
fit items of a judge tuned with seed 3), so the split is the judge's own; a different seed asked for
is refused, and data other than the judge's is said in a warning (its tuning items may be among them).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from typing import Any

from judgetune import datasets
from judgetune.errors import JudgetuneError, shown

log = logging.getLogger(__name__)


def tuned_seed(config: Any) -> int | None:
    """The seed the judge's data was split with when it was tuned (None: not a tuned judge)."""
    data = getattr(config, "data", None) or {}
    seed = data.get("split_seed")
    return None if seed is None else int(seed)


def heldout_seed(configs: Sequence[Any], seed: int | None, split: str | None) -> int:
    """The split seed to score ``configs`` on: their tuning seed (all must share it), or ``seed`` (default 0)
    for judges that were not tuned.

    Raises:
        JudgetuneError: ``seed`` differs from a judge's tuning seed, or the judges were tuned on different splits.
    """
    recorded = {tuned_seed(c) for c in configs} - {None}
    if not recorded or split is None:
        return 0 if seed is None else seed
    if len(recorded) > 1:
        raise JudgetuneError(f"these judges were tuned on different splits (seeds {sorted(recorded)}): no {split} split "
                             "is held out from all of them; compare them on data none of them was tuned on (split all)")
    own = recorded.pop()
    if seed is not None and seed != own:
        raise JudgetuneError(f"the judge was tuned on the split of seed {own}: the {split} split of seed {seed} holds "
                             f"items it was tuned and calibrated on; leave the seed out (it uses {own})")
    return own


def warn_other_data(configs: Sequence[Any], data: str) -> str | None:
    """A loud warning (``warnings.warn`` and the log) when ``data`` is not the data a judge was tuned on:
    its split then says nothing about which items the judge saw. Returns the message, or None."""
    try:
        current = set(datasets.data_fingerprint(data).values())
    except JudgetuneError:
        return None
    other = [c for c in configs if tuned_seed(c) is not None and (c.data.get("files") or {})
             and set(c.data["files"].values()) != current]
    if not other:
        return None
    message = (f"{shown(data)} is not the data the judge was tuned on (its files had other SHA-256): the split cannot keep "
               "its tuning and calibration items out; a figure on them would be optimistic")
    warnings.warn(message, UserWarning, stacklevel=3)
    log.warning("%s", message)
    return message
