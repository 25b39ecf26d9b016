"""Judge audits: does a frozen judge's score move when something that should not matter changes?

Probes (position, verbosity, distraction, stability, self-consistency; rewrites documented as not
run) give per-item paired differences; each figure comes with a bootstrap interval clustered by
group, a sign-flip test against no effect with the probes corrected together (Benjamini-Hochberg),
and the minimum detectable effect at power 0.8, so "no effect found" and "too few items to tell"
read differently. See docs/audit.md.

    >>> from judgetune import audit, config  # doctest: +SKIP
    >>> judge = config.JudgeConfig.load("runs/demo/judge.json")  # doctest: +SKIP
    >>> result = audit.audit(judge, examples, scoring.load_config_lm(judge))  # doctest: +SKIP
"""

from judgetune.audit._audit import (
    AUDIT_ITEMS,
    RELEVANT_SHARE,
    audit,
    audit_sample,
    beyond_bounds,
    check_bounds,
    format_audit,
    parse_bounds,
    reading,
)
from judgetune.audit._probes import DISTRACTION, PADDING, PROBES, Paired, Scorer
from judgetune.audit._stats import Effect, benjamini_hochberg, minimum_detectable_effect, paired_effect

__all__ = ["AUDIT_ITEMS", "DISTRACTION", "PADDING", "PROBES", "RELEVANT_SHARE", "Effect", "Paired", "Scorer", "audit",
           "audit_sample", "benjamini_hochberg", "beyond_bounds", "check_bounds", "format_audit",
           "minimum_detectable_effect", "paired_effect", "parse_bounds", "reading"]
