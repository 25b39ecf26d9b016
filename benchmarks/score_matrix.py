"""Score matrices: a fixed set of candidate judges scored once on every item of a set.

The candidates are the kind's default (candidate 0) and settings drawn from its search space by Optuna's
random sampler (seeded; duplicates drawn again), or, with ``--candidate``, named variants of the default
(an ablation: each ``--candidate '{"direction": "source"}'`` is the default with those settings changed).
Every candidate judges every matrix item once, column by column; the raw scores (``null`` where the judge
failed, with the reason beside it) are saved after each chunk of items, so a killed run resumes where it stopped,
from the committed partial file (``meta.complete`` is false until the last column is done; ``meta.columns_done``
lists the finished columns, so a matrix may be built over several runs and committed as columns finish). A run
with more ``--candidates`` (or more ``--candidate`` variants) adds columns after the stored ones, which must be
the first of today's; a run with more ``--items`` extends every column (the new items follow the old ones).
``scored`` items (a prefix of ``items``) are done for every candidate. A file whose first candidate is an older
default (the kind's default has changed since) is refused, unless ``--as-stored``: then its stored candidates are
scored on the new items as they are, the first still the file's own default. Demos
(``k > 0``) come from a seeded pool of training items that is kept out of the matrix. Selection rules are then
evaluated from the file in seconds (``benchmarks/rules.py``), with no LM time. ``--reuse FILE`` starts a new
file's columns from another file's scores where it holds the same candidate and scored today's first items (by id;
a wider matrix of fewer items from a narrower one of more), once the first chunk scored again by today's code ranks
alike (a column that does not is judged again from its first item).

    python benchmarks/score_matrix.py --lm local:smollm2 --judge likelihood --set sts2012-msrpar \\
        [--items 900] [--per-question N] [--candidates 8] [--chunk 50] [--demo-pool 40] [--seed 0] \\
        [--fix KEY=VALUE ...] [--candidate JSON ...] [--as-stored] [--reuse FILE] [--out PATH]

Writes ``benchmarks/results/matrix-<lm>-<judge>-<set>.json``: ``meta`` (``lm``, ``judge``, ``dataset``,
``commit``, ``command``, ``complete``, ...), ``candidates`` (each with ``params``; the first is the default),
``items`` (``ids``, ``labels``, ``groups``), ``scored`` (items done for every candidate), ``scores`` and ``failures``
(one list per candidate, in item order), ``seconds`` (LM wall time per candidate).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import optuna  # noqa: E402
from _results import lm_name, meta  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)

from judgetune import datasets  # noqa: E402
from judgetune.lm import load_lm  # noqa: E402
from judgetune.stats import correlation  # noqa: E402
from judgetune.tuning import RunSpec, default_params, fit_space, judge_for, pool_seeds, settled_params, suggest  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def matrix_items(examples: list[datasets.Example], n: int | None, pool_size: int, seed: int,
                 per_question: int | None = None):
    """The demo pool (whole groups, seeded) and the matrix items (whole groups, seeded, none in the pool);
    with ``per_question``, each group first keeps that many of its answers (seeded), as ``tune --per-question``."""
    labeled = [e for e in examples if e.judgment is not None]
    if per_question is not None:
        labeled = datasets.sample_per_group(labeled, per_question, seed=seed)
    keys = sorted({e.group_key for e in labeled})
    random.Random(seed).shuffle(keys)
    by_group: dict[str, list[datasets.Example]] = {}
    for e in labeled:
        by_group.setdefault(e.group_key, []).append(e)
    pool: list[datasets.Example] = []
    items: list[datasets.Example] = []
    for key in keys:
        target = pool if len(pool) < pool_size else items
        if target is items and n is not None and len(items) >= n:
            break
        target.extend(by_group[key])
    return pool, items


def draw_candidates(spec: RunSpec, data_fixed: dict[str, Any], lm, texts: list[str], count: int,
                    seed: int, pool: list[datasets.Example], label_range: tuple[float, float]) -> list[dict[str, Any]]:
    """The default (its data defaults read from the demo ``pool``), then up to ``count - 1`` distinct settings
    drawn at random from the kind's search space."""
    settled = {**data_fixed, **settled_params(spec, lm)}
    chosen = [default_params(spec, data_fixed, lm=lm, instructions=texts, demo_pool=pool, label_range=label_range)]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    for _ in range(50 * count):
        if len(chosen) >= count:
            break
        trial = study.ask()
        params = {k: v for k, v in suggest(trial, spec, data_fixed, lm=lm, instructions=texts).items()
                  if k not in settled}
        study.tell(trial, 0.0)
        if params not in chosen:
            chosen.append(params)
    return chosen


def variant_candidates(default: dict[str, Any], variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The default, then the default with each variant's settings changed (an ablation's candidates)."""
    unknown = sorted({key for v in variants for key in v} - set(default))
    if unknown:
        sys.exit(f"--candidate: {', '.join(unknown)} not searched here; the default's settings: {', '.join(default)}")
    return [default, *({**default, **v} for v in variants)]


def drift_check(judges: list, items: list, state: dict[str, Any], columns: list[int], chunk: int) -> list[int]:
    """Before scoring more items into ``columns`` of a file: their first items (up to ``chunk``, within what every
    one of them holds) scored again by today's code must rank as stored (Spearman >= 0.95 per candidate, or the
    same scores), or the new items would not be comparable with the old. Returns the columns that do not."""
    if not columns:
        return []
    items, drifted = items[:min(chunk, min(len(state["scores"][j]) for j in columns))], []
    for j in columns:
        again = [v.score if v.parsed else None for v in judges[j].judge_all(items)]
        pairs = [(a, b) for a, b in zip(again, state["scores"][j]) if a is not None and b is not None]
        rho = correlation(*zip(*pairs)) if len(pairs) > 2 else None  # None: too few or constant
        gap = max((abs(a - b) for a, b in pairs), default=float("nan"))
        shown = "undefined" if rho is None else f"{rho:.3f}"
        print(f"{state['candidates'][j]['name']}: the first {len(items)} items again: Spearman {shown} with the "
              f"stored scores, at most {gap:.3g} apart", flush=True)
        if not gap <= 1e-6 and (rho is None or rho < 0.95):  # the same scores pass, a constant column's too
            drifted.append(j)
    return drifted


def drop_columns(state: dict[str, Any], columns: list[int], source: str) -> None:
    """Empty reused ``columns`` that today's code scores differently: they are judged again from the first item."""
    for j in columns:
        name = state["candidates"][j]["name"]
        state["scores"][j], state["failures"][j], state["seconds"][j] = [], [], 0.0
        state["meta"]["reused"].pop(name, None)
        print(f"{name}: --reuse {source} scored its first items differently from today's code; judged again from "
              "the first item", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lm", default="local:smollm2")
    parser.add_argument("--judge", default="likelihood")
    parser.add_argument("--set", dest="dataset", default="sts2012-msrpar")
    parser.add_argument("--items", type=int, default=900, help="matrix items (whole groups; default 900)")
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--per-question", type=int, default=None,
                        help="answers kept per question (grouped sets: more questions, fewer answers each)")
    parser.add_argument("--chunk", type=int, default=50, help="items per saved chunk")
    parser.add_argument("--demo-pool", type=int, default=40, help="training items kept out for demos")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fix", action="append", default=[], metavar="KEY=VALUE", help="a setting never searched")
    parser.add_argument("--candidate", action="append", type=json.loads, default=[], metavar="JSON",
                        help="a variant of the default (a JSON object of settings); replaces the random draws")
    parser.add_argument("--as-stored", action="store_true",
                        help="extend an existing file with its own stored candidates (its default may be an old one)")
    parser.add_argument("--reuse", type=Path, metavar="FILE",
                        help="another matrix of this LM, judge, set, texts, data settings and demos: each new column "
                             "whose candidate it holds starts from its scores on today's first items (checked again on "
                             "the first --chunk items), so only the rest is judged")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    out = args.out or RESULTS / f"matrix-{lm_name(args.lm)}-{args.judge}-{args.dataset}.json"
    fixed = {k: json.loads(v) for k, v in (f.split("=", 1) for f in args.fix)}

    examples, label_range = datasets.load_data(args.dataset)
    pool, items = matrix_items(examples, args.items, args.demo_pool, args.seed, args.per_question)
    spec = RunSpec(name="matrix", judge=args.judge, data=args.dataset, lm=args.lm, seed=args.seed, fixed=fixed)
    lm = load_lm(args.lm)
    data_fixed = fit_space(spec, pool)
    texts = [text for _, text in pool_seeds(spec)]
    if args.candidate:
        default = default_params(spec, data_fixed, lm=lm, instructions=texts, demo_pool=pool, label_range=label_range)
        candidates = variant_candidates(default, args.candidate)
    else:
        candidates = draw_candidates(spec, data_fixed, lm, texts, args.candidates, args.seed, pool, label_range)
    pool_ids = [e.id for e in pool]
    table = {"ids": [e.id for e in items], "labels": [e.judgment for e in items], "groups": [e.group_key for e in items]}
    state: dict[str, Any]
    if out.exists():  # resume; more --items or more candidates than before extend the file
        state = resumed(json.loads(out.read_text()), candidates, table, texts, data_fixed, pool_ids, args.as_stored)
        candidates = [c["params"] for c in state["candidates"]]
    elif args.as_stored:
        sys.exit(f"--as-stored: {out} does not exist (it extends a file with the candidates stored there)")
    else:
        state = {"meta": {**meta(sys.argv), "lm": args.lm, "judge": args.judge, "dataset": args.dataset,
                          "complete": False, "columns_done": [], "seed": args.seed,
                          "per_question": args.per_question,
                          "label_range": list(label_range), "demo_pool": pool_ids, "texts": texts,
                          "data_fixed": data_fixed},
                 "candidates": [{"name": "default" if i == 0 else f"c{i}", "params": p} for i, p in enumerate(candidates)],
                 "items": table,
                 "scored": 0, "scores": [[] for _ in candidates], "failures": [[] for _ in candidates],
                 "seconds": [0.0 for _ in candidates]}
    judges = [judge_for({**p, **data_fixed, **settled_params(spec, lm)}, spec.judge, lm, seed=spec.seed, demo_pool=pool,
                        label_range=label_range, instructions=texts) for p in candidates]
    copied = reuse(state, json.loads(args.reuse.read_text()), args.reuse.name) if args.reuse else []
    drifted = drift_check(judges, items, state, copied, args.chunk)
    drop_columns(state, drifted, args.reuse.name if args.reuse else "")
    copied = [j for j in copied if j not in drifted]
    if copied:
        save(state, out, len(items))
    if drift_check(judges, items, state, [j for j, row in enumerate(state["scores"])
                                          if 0 < len(row) < len(items) and j not in copied], args.chunk):
        sys.exit("today's code scores the stored items differently; start a new file (--out)")
    score_columns(state, judges, items, out, args.chunk)


def reuse(state: dict[str, Any], other: dict[str, Any], name: str) -> list[int]:
    """Fill each empty column of ``state`` whose candidate ``other`` (another matrix file) holds with that candidate's
    scores and failures on the longest prefix of ``state``'s items ``other`` scored, and its share of the LM seconds;
    the columns filled, recorded in ``meta.reused``. Refused unless both files share the LM, judge, set, seed,
    texts, data settings and demos."""
    same = ("lm", "judge", "dataset", "seed", "per_question", "texts", "data_fixed", "demo_pool")
    differ = [k for k in same if state["meta"].get(k) != other["meta"].get(k)]
    if differ:
        sys.exit(f"--reuse {name}: made with another {', '.join(differ)}")
    position = {item: i for i, item in enumerate(other["items"]["ids"])}
    copied = []
    for j, candidate in enumerate(state["candidates"]):
        source = next((k for k, c in enumerate(other["candidates"]) if c["params"] == candidate["params"]), None)
        if source is None or state["scores"][j]:
            continue
        prefix = []
        for item in state["items"]["ids"]:
            i = position.get(item)
            if i is None or i >= len(other["scores"][source]):
                break
            prefix.append(i)
        if not prefix:
            continue
        state["scores"][j] = [other["scores"][source][i] for i in prefix]
        state["failures"][j] = [other["failures"][source][i] for i in prefix]
        state["seconds"][j] = other["seconds"][source] * len(prefix) / len(other["scores"][source])
        state["meta"].setdefault("reused", {})[candidate["name"]] = {"file": name, "items": len(prefix)}
        copied.append(j)
    print(f"--reuse {name}: {len(copied)} column(s) start from its scores", flush=True)
    return copied


def resumed(state: dict[str, Any], candidates: list[dict[str, Any]], table: dict[str, list], texts: list[str],
            data_fixed: dict[str, Any], pool_ids: list[str], as_stored: bool) -> dict[str, Any]:
    """A stored (maybe partial) file checked against today's run: its candidates the first of today's (new ones
    become new columns), its items a prefix of today's, the same texts, data settings and demos."""
    had = len(state["items"]["ids"])
    stored = [c["params"] for c in state["candidates"]]
    if as_stored:
        candidates = stored
    if candidates[:len(stored)] != stored or state["items"]["ids"] != table["ids"][:had]:
        sys.exit("the file was made with other candidates or items; remove it or pass --out")
    kept = {k: state["meta"][k] for k in ("texts", "data_fixed") if k in state["meta"]}
    if kept != {k: json.loads(json.dumps(v)) for k, v in (("texts", texts), ("data_fixed", data_fixed))
                if k in kept} or state["meta"].get("demo_pool", pool_ids) != pool_ids:
        sys.exit("the file was made with other instruction texts, data settings or demos than today's; pass --out")
    for i, params in enumerate(candidates[len(stored):], start=len(stored)):
        state["candidates"].append({"name": f"c{i}", "params": params})
        state["scores"].append([])
        state["failures"].append([])
        state["seconds"].append(0.0)
    if len(table["ids"]) > had:
        state["items"] = table
    if len(table["ids"]) > had or len(candidates) > len(stored):
        state["meta"].update(complete=False, extended=meta(sys.argv))
    return state


def save(state: dict[str, Any], out: Path, n_items: int) -> None:
    """The file as it stands, atomically: which columns are done, how many items every column holds."""
    state["meta"]["columns_done"] = [j for j, row in enumerate(state["scores"]) if len(row) >= n_items]
    state["meta"]["complete"] = len(state["meta"]["columns_done"]) == len(state["scores"])
    state["scored"] = min(len(row) for row in state["scores"])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, separators=(",", ":")))
    tmp.replace(out)


def score_columns(state: dict[str, Any], judges: list, items: list, out: Path, chunk: int) -> None:
    """Each column not done scored on the items it lacks, chunk by chunk, the file saved after each chunk."""
    started = time.time()
    for j, judge in enumerate(judges):
        while len(state["scores"][j]) < len(items):
            part = items[len(state["scores"][j]):len(state["scores"][j]) + chunk]
            t0 = time.time()
            verdicts = judge.judge_all(part)
            state["seconds"][j] += time.time() - t0
            state["scores"][j] += [v.score if v.parsed else None for v in verdicts]
            state["failures"][j] += [None if v.parsed else (v.raw or "failed")[:200] for v in verdicts]
            save(state, out, len(items))
            print(f"{out.name}: column {state['candidates'][j]['name']} ({j + 1}/{len(judges)}): "
                  f"{len(state['scores'][j])}/{len(items)} items ({time.time() - started:.0f} s this run)", flush=True)
    save(state, out, len(items))


if __name__ == "__main__":
    main()
