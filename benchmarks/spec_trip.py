"""The run spec's trip through ``tune``: which modules a ``RunSpec`` passes through, and how often it
comes back to a module it had left.

A small real run (the embedding judge on MSRpar, 2 trials, 40 search and 40 dev items: enough for the nested
gate) under ``sys.setprofile``: every call into a judgetune function whose arguments or locals hold the spec
object is one step; consecutive steps in one module are one visit. A visit to a module visited before (not the
one just left) is a return. No LM.

    python benchmarks/spec_trip.py
"""

from __future__ import annotations

import sys
import tempfile

from judgetune.tuning import RunSpec, tune


def visits(spec: RunSpec) -> list[tuple[str, str]]:
    """(module, function) of each visit, in order."""
    seen: list[tuple[str, str]] = []

    def profile(frame, event, arg) -> None:
        module = frame.f_globals.get("__name__", "")
        if event != "call" or not module.startswith("judgetune"):
            return
        if any(value is spec for value in frame.f_locals.values()) and (not seen or seen[-1][0] != module):
            seen.append((module, frame.f_code.co_name))

    with tempfile.TemporaryDirectory() as runs:
        sys.setprofile(profile)
        try:
            tune(spec, runs_dir=runs, progress=False)
        finally:
            sys.setprofile(None)
    return seen


def main() -> None:
    spec = RunSpec(name="trip", judge="embedding", data="sts2012-msrpar", n_trials=2, search_items=40, dev_items=40,
                   test_items=20)
    trip = visits(spec)
    returns: dict[str, int] = {}
    for i, (module, _) in enumerate(trip):
        if any(m == module for m, _ in trip[:i]):
            returns[module] = returns.get(module, 0) + 1
    for module, function in trip:
        print(f"  {module}.{function}")
    print(f"{len({m for m, _ in trip})} modules, {sum(returns.values())} returns to a module left before: {returns}")


if __name__ == "__main__":
    main()
