"""Throughput of the embedded judge model on a 1-5 rubric over MSRpar pairs.

Items per second on the same prompts for: (a) dspy.Predict generating and parsing the score, (a')
the same with the answer marker prefilled, (b) label distributions with every prompt evaluated from
scratch, (c) with the KV cache of the shared prefix (instruction + 4 demos) reused, one item at a time,
(d) batched: several items per llama.cpp decode over that prefix (``local_label_distributions``),
(d') the same reached the way ``judge_all`` reaches it (threads whose label reads are coalesced),
and (s) sampled: n answers at a temperature, labels parsed, their empirical distribution.

The limit is the model's peak prompt-evaluation rate on this machine (the best tokens/s of one decode
of 64, 128, 256 or 512 new tokens after the cached shared prefix) over the tokens each item adds
after that prefix. All paths and the limit
run in interleaved rounds (each round: the same items through every path, in a rotated order, each
path warmed on another item first), so machine noise hits them alike; figures are medians over rounds.
Also: 16 requests against a server with 50 ms latency, one at a time vs 16 threads.

``--grouped``: grouped data instead, the SummaC-Polytope articles that carry 8 or more
summaries (8 each), ``--sources`` articles per round. Items per second of the likelihood judge
(``instruction=summary, direction=answer, k=0, chat``; the article is its source) and of the rubric judge
(defaults, the article as its reference) with source reuse (the engine's prefix tree, items dispatched
article by article: ``reuse``) and without (today's path: only the prefix common to a batch reused, items
in the catalog's order, where articles interleave: ``plain``), beside the unique-token limit: the peak
prompt rate (as above, measured mid-round) over the unique tokens per item (the nodes of the prefix tree
of every token sequence the judge scored). The headline keys are the likelihood judge's. Rounds interleave
reuse and plain (alternating which runs first) so that machine load hits both alike.

    python benchmarks/lm_throughput.py [--quick] [--rounds R] [--per-round N] [--json] [--out PATH]
    python benchmarks/lm_throughput.py --grouped [--rounds R] [--sources S] [--json] [--out PATH]
    python benchmarks/lm_throughput.py --grouped --server [--sources S] [--per-round N] [--json] [--out PATH]

``--models SPEC [SPEC ...]``: per model, the peak prompt-evaluation rate (as above, tokens/s and tokens per
CPU-second) and the generation rate (tokens/s of a 96-token greedy answer), median of 3 tries each:
``python benchmarks/lm_throughput.py --models local:smollm2 local:qwen1.5b --json``.

``--grouped --server``: the rubric judge over llama-cpp-python's server, ``--per-round`` summaries of each of
``--sources`` articles, sent article by article (judgetune's order) vs in the catalog's order, two rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)
import dspy  # noqa: E402

from judgetune import datasets  # noqa: E402
from judgetune.judges import make_judge  # noqa: E402
from judgetune.lm import OpenAICompatibleClient, load_lm, parse_lm_spec, run_items  # noqa: E402
from judgetune.lm._adapter import PrefillChatAdapter  # noqa: E402
from judgetune.lm._labels import local_label_distribution, local_label_distributions  # noqa: E402
from judgetune.stats import bootstrap_interval, correlation  # noqa: E402

INSTRUCTION = ("You judge how close in meaning two sentences are. Reply with one score from 1 to 5: "
               "1 means unrelated, 3 means they share the main point but differ in details, 5 means they say "
               "exactly the same thing.")
LABELS = ["1", "2", "3", "4", "5"]
PREFIX = "Score: "
PEAK_SIZES = (64, 128, 256, 512)  # decode sizes (new tokens) over which the peak evaluation rate is taken
SAMPLES, TEMPERATURE, SMOOTHING = 10, 1.0, 0.5  # sampled mode: answers per item, temperature, add-k counts


def to_five(label: float) -> int:
    return int(round(1 + label * 4 / 5))


def pair_text(example) -> str:
    return f"Sentence 1: {example.references[0].text}\nSentence 2: {example.answer}"


def rubric_messages(demos, example) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": INSTRUCTION}]
    for demo in demos:
        messages += [{"role": "user", "content": pair_text(demo)},
                     {"role": "assistant", "content": f"Score: {to_five(demo.label)}"}]
    return messages + [{"role": "user", "content": pair_text(example)}]


def demos_and_items(n: int):
    pairs = datasets.load("sts2012-msrpar")
    train = [e for e in pairs if e.meta["split"] == "train"]
    demos = [min(train, key=lambda e, t=t: abs(e.label - t)) for t in (0.5, 2.0, 3.5, 5.0)]  # one per score band
    return demos, [e for e in pairs if e.meta["split"] == "test"][:n]


class Rate(dspy.Signature):
    __doc__ = INSTRUCTION
    sentence1: str = dspy.InputField()
    sentence2: str = dspy.InputField()
    score: int = dspy.OutputField(desc="1 to 5")


def predict_path(lm, demos, *, prefill: bool):
    """(a) / (a'): dspy.Predict writing the score, with DSPy's ChatAdapter (answers capped at 64 tokens)
    or with the answer marker prefilled and a stop at the line end. Returns per item: parsed or not."""
    program = dspy.Predict(Rate)
    program.demos = [dspy.Example(sentence1=d.references[0].text, sentence2=d.answer, score=to_five(d.label))
                     for d in demos]
    adapter = PrefillChatAdapter() if prefill else dspy.ChatAdapter(use_json_adapter_fallback=False)
    config = {"max_tokens": 8, "stop": ["\n", "[["]} if prefill else {"max_tokens": 64}

    def run(items) -> list[bool]:
        parsed = []
        with dspy.context(lm=lm.dspy_lm, adapter=adapter):
            for e in items:
                try:
                    program(sentence1=e.references[0].text, sentence2=e.answer, config=config)
                    parsed.append(True)
                except Exception:  # noqa: BLE001 - a parse failure counts, it does not stop the benchmark
                    parsed.append(False)
        return parsed

    return run


def expected(dist) -> float:
    return dist.expected([float(label) for label in LABELS])


def label_path(model, demos, *, reuse: bool):
    """(b) / (c): one label distribution at a time, from scratch or on the cached prefix; expected scores."""
    def run(items) -> list[float]:
        model.reuse_prefix = reuse
        try:
            return [expected(local_label_distribution(model, rubric_messages(demos, e), LABELS, prefix=PREFIX))
                    for e in items]
        finally:
            model.reuse_prefix = True

    return run


def batched_path(model, demos):
    """(d): all of a round's items in one call, several per decode over the cached prefix."""
    def run(items) -> list[float]:
        return [expected(d) for d in local_label_distributions(model, [(rubric_messages(demos, e), LABELS, PREFIX)
                                                                       for e in items])]

    return run


def coalesced_path(lm, demos):
    """(d'): each item's label read from its own thread (``JudgeLM.run(..., batched=True)``, as ``judge_all``)."""
    def run(items) -> list[float]:
        outcomes = lm.run(lambda e: lm.label_distribution(rubric_messages(demos, e), LABELS, prefix=PREFIX), items,
                          batched=True)
        return [expected(o.value) for o in outcomes]

    return run


def sampled_path(model, demos):
    """(s): SAMPLES answers per item at TEMPERATURE (seeded), the first character parsed as a label, the
    smoothed empirical distribution's expected value (None when no answer parsed)."""
    def run(items) -> list[float | None]:
        out = []
        for e in items:
            tokens = model.tokenize(model.render(rubric_messages(demos, e), PREFIX))
            counts = dict.fromkeys(LABELS, 0)
            for j in range(SAMPLES):
                _, _, text = model.generate(tokens, max_tokens=2, temperature=TEMPERATURE, stop=("\n",),
                                            seed=1000 * hash_id(e.id) + j)
                answer = text.decode("utf-8", "replace").strip()[:1]
                if answer in counts:
                    counts[answer] += 1
            if not any(counts.values()):
                out.append(None)
                continue
            weights = {label: c + SMOOTHING for label, c in counts.items()}
            out.append(sum(float(label) * w for label, w in weights.items()) / sum(weights.values()))
        return out

    return run


def hash_id(text: str) -> int:
    return sum(ord(c) * (i + 1) for i, c in enumerate(text)) % 100_000


def peak_rate(model, prefix: list[int], tokens: list[int], *, cpu: bool = False) -> float | tuple[float, float]:
    """The model's peak prompt-evaluation rate where the items' tokens run: the most tokens/s of one decode
    of PEAK_SIZES[k] new tokens after the cached shared ``prefix``, over the sizes (with ``cpu``, also the
    most tokens per CPU-second of this process, which a loaded machine inflates less)."""
    llm = model._llm
    model.next_logprobs(prefix)  # the prefix in the KV cache (not timed)
    best, best_cpu = 0.0, 0.0
    for size in PEAK_SIZES:
        llm._ctx.kv_cache_seq_rm(-1, len(prefix), -1)
        llm.n_tokens = len(prefix)
        start, start_cpu = time.perf_counter(), time.process_time()
        llm.eval(tokens[:size])
        best = max(best, size / (time.perf_counter() - start))
        best_cpu = max(best_cpu, size / max(time.process_time() - start_cpu, 1e-9))
    llm.n_tokens = 0  # leave no stale cache for later users
    return (best, best_cpu) if cpu else best


def remote_speedup(requests: int = 16, latency: float = 0.05) -> tuple[float, float]:
    """Seconds for ``requests`` calls one at a time and 16 at a time, against a server in another process."""
    server = subprocess.Popen([sys.executable, "-m", "judgetune.testing.fault_server", "--latency", str(latency)],
                              stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().strip()
        client = OpenAICompatibleClient(parse_lm_spec("openai/bench", api_base=url))
        ask = lambda i: client.complete([{"role": "user", "content": f"q{i}"}], max_tokens=1)  # noqa: E731
        run_items(ask, range(requests), concurrency=16)  # warm the connection pool
        timings = []
        for concurrency in (1, 16):
            start = time.perf_counter()
            outcomes = run_items(ask, range(requests), concurrency=concurrency)
            timings.append(time.perf_counter() - start)
            assert all(o.ok for o in outcomes)
        return timings[0], timings[1]
    finally:
        server.terminate()
        server.wait()



GROUPED_DATA, PER_SOURCE = "summac-polytope", 8
LIKELIHOOD = {"instruction": "summary", "direction": "answer", "k": 0, "chat": True, "normalization": "mean"}


def grouped_sets(rounds: int, sources: int) -> list[list]:
    """Per round, ``sources`` articles with their first PER_SOURCE summaries, in the catalog's order."""
    examples = datasets.load(GROUPED_DATA)
    by_article = defaultdict(list)
    for e in examples:
        by_article[e.context[0]].append(e)
    articles = [a for a in by_article if len(by_article[a]) >= PER_SOURCE][:rounds * sources]
    if len(articles) < rounds * sources:
        raise SystemExit(f"{GROUPED_DATA} has {len(articles)} articles with {PER_SOURCE} summaries or more; "
                         f"asked for {rounds} x {sources}")
    sets = []
    for r in range(rounds):
        chosen = {a: by_article[a][:PER_SOURCE] for a in articles[r * sources:(r + 1) * sources]}
        picked = {id(e) for group in chosen.values() for e in group}
        sets.append([e for e in examples if id(e) in picked])  # the catalog's order: articles interleave
    return sets


def unique_tokens(sequences: list[list[int]]) -> int:
    """The nodes of the prefix tree of ``sequences``: what evaluating each shared prefix once costs."""
    ordered = sorted(sequences)
    return sum(len(s) - len(os.path.commonprefix([s, p])) for s, p in zip(ordered, [[], *ordered]))


def scored_sequences(lm) -> list[list[int]]:
    """The token sequences the transcript's calls ran: prompt + target[:-1] (likelihood), prompt + the longest
    label but its last token (label reads)."""
    model, out = lm.model, []
    for entry in lm.transcript:
        if entry["op"] == "targets":
            out += [model.tokenize(p) + model.tokenize(t, special=False)[:-1] for p, t in entry["pairs"]]
        elif entry["op"] == "labels":
            prompt = model.tokenize(model.render(entry["messages"], entry["prefix"]))
            longest = max((model.tokenize(label, special=False) for label in entry["labels"]), key=len)
            out.append(prompt + longest[:-1])
    return out


def grouped_case(rounds: int, sources: int) -> dict:
    lm = load_lm("local:smollm2", use_cache=False)
    model = lm.model
    sets = grouped_sets(rounds, sources)
    judges = {"likelihood": (make_judge("likelihood", lm, train=[], label_range=(0.0, 1.0), params=LIKELIHOOD),
                             lambda e: e),
              "rubric": (make_judge("rubric", lm, train=[], label_range=(0.0, 1.0)),
                         lambda e: replace(e, references=(datasets.Reference(e.context[0]),)))}
    rates: dict[str, list[float]] = defaultdict(list)
    scores: dict[str, list] = defaultdict(list)
    unique, peaks, loads = defaultdict(list), [], []
    for judge, view in judges.values():  # warm up: the scoring context is made on first use
        judge.judge_all([view(sets[0][0])])
    for r, items in enumerate(sets):
        loads.append(os.getloadavg()[0])
        for name, (judge, view) in judges.items():
            shown = [view(e) for e in items]
            for path in (("reuse", "plain") if r % 2 == 0 else ("plain", "reuse")):
                model.share_sources = path == "reuse"
                # today's path: items in the catalog's order, not dispatched article by article
                batch = shown if path == "reuse" else [replace(e, group=None) for e in shown]
                lm.transcript = []
                start, start_cpu = time.perf_counter(), time.process_time()
                verdicts = judge.judge_all(batch)
                rates[f"{name}_{path}"].append(len(batch) / (time.perf_counter() - start))
                rates[f"{name}_{path}_cpu"].append(len(batch) / (time.process_time() - start_cpu))
                scores[f"{name}_{path}"] += [v.score for v in verdicts]
                if path == "reuse":
                    sequences = scored_sequences(lm)
                    unique[name].append(unique_tokens(sequences) / len(batch))
            model.share_sources = True
            lm.transcript = None
            if name == "likelihood":  # the peak rate, measured mid-round
                prompt = model.tokenize(judge.prompt(items[0].context[0], "answer"))
                filler = [t for e in items for t in model.tokenize(e.answer, special=False)]
                while len(filler) < max(PEAK_SIZES):
                    filler += filler
                peaks.append(peak_rate(model, prompt, filler, cpu=True))
        loads.append(os.getloadavg()[0])
    lm.close()
    result: dict = {"grouped_data": GROUPED_DATA, "grouped_items": sum(map(len, sets)), "grouped_rounds": rounds,
                    "grouped_sources_per_round": sources, "grouped_items_per_source": PER_SOURCE,
                    "grouped_peak_tokens_per_s": statistics.median(p for p, _ in peaks),
                    "grouped_peak_tokens_per_cpu_s": statistics.median(c for _, c in peaks),
                    "grouped_load_average": [min(loads), max(loads)]}
    for name in judges:
        limit = [peak / u for (peak, _), u in zip(peaks, unique[name])]
        limit_cpu = [peak / u for (_, peak), u in zip(peaks, unique[name])]
        reuse, plain = rates[f"{name}_reuse"], rates[f"{name}_plain"]
        reuse_cpu, plain_cpu = rates[f"{name}_reuse_cpu"], rates[f"{name}_plain_cpu"]
        result.update({
            f"grouped_{name}_reuse_items_per_s": statistics.median(reuse),
            f"grouped_{name}_plain_items_per_s": statistics.median(plain),
            f"grouped_{name}_limit_items_per_s": statistics.median(limit),
            f"grouped_{name}_unique_tokens_per_item": statistics.median(unique[name]),
            f"grouped_{name}_reuse_vs_plain": statistics.median(a / b for a, b in zip(reuse, plain)),
            f"grouped_{name}_reuse_vs_limit": statistics.median(a / b for a, b in zip(reuse, limit)),
            # the same ratios in CPU time of this process (less inflated by other processes' load)
            f"grouped_{name}_reuse_vs_plain_cpu": statistics.median(a / b for a, b in zip(reuse_cpu, plain_cpu)),
            f"grouped_{name}_reuse_vs_limit_cpu": statistics.median(a / b for a, b in zip(reuse_cpu, limit_cpu)),
            f"grouped_{name}_max_abs_score_diff": max(abs(a - b) for a, b in zip(scores[f"{name}_reuse"],
                                                                                  scores[f"{name}_plain"])),
            f"grouped_{name}_spread": {"reuse": [min(reuse), max(reuse)], "plain": [min(plain), max(plain)]}})
    result.update({f"grouped_{key}": result[f"grouped_likelihood_{key}"] for key in
                   ("reuse_items_per_s", "plain_items_per_s", "limit_items_per_s")})
    return result


def server_grouped_case(sources: int, per_source: int) -> dict:
    """The rubric judge over llama-cpp-python's server (``python -m llama_cpp.server``, one request at a time):
    items per second with the items of one article sent one after another (judgetune's order) and in the
    catalog's order (articles interleaved), alternating which goes first; and the cached tokens the server
    reports (None: it reports none)."""
    from judgetune.evaluation import cost_per_item
    from judgetune.lm._spec import model_file
    from judgetune.testing import LlamaServer

    items = grouped_sets(1, sources)[0]
    by_article = defaultdict(list)
    for e in items:
        by_article[e.context[0]].append(e)
    keep = {id(e) for group in by_article.values() for e in group[:per_source]}
    items = [replace(e, references=(datasets.Reference(e.context[0]),)) for e in items if id(e) in keep]
    rates, cached = defaultdict(list), {}
    with LlamaServer(model_file(parse_lm_spec("local:smollm2")), "/tmp/lm_throughput_server.log", n_ctx=4096,
                     logits_all=True) as server:
        lm = load_lm(f"openai/{server.model}", api_base=server.base_url, use_cache=False, concurrency=1)
        judge = make_judge("rubric", lm, train=[], label_range=(0.0, 1.0))
        judge.judge_all(items[:1])  # warm up
        for r in range(2):
            for path in (("grouped", "interleaved") if r == 0 else ("interleaved", "grouped")):
                batch = items if path == "grouped" else [replace(e, group=None) for e in items]
                start = time.perf_counter()
                verdicts = judge.judge_all(batch)
                rates[path].append(len(batch) / (time.perf_counter() - start))
                cached[path] = cost_per_item(verdicts, 1.0)["cached_tokens_per_item"]
    return {"server_items": len(items), "server_grouped_items_per_s": statistics.median(rates["grouped"]),
            "server_interleaved_items_per_s": statistics.median(rates["interleaved"]),
            "server_grouped_vs_interleaved": statistics.median(a / b for a, b in zip(rates["grouped"],
                                                                                     rates["interleaved"])),
            "server_cached_tokens_per_item": cached["grouped"], "server": "llama-cpp-python server, 1 slot"}


def print_grouped(result: dict) -> None:
    print(f"{result['grouped_items']} {result['grouped_data']} summaries, {result['grouped_items_per_source']} per "
          f"article, {result['grouped_sources_per_round']} articles per round, {result['grouped_rounds']} interleaved "
          f"rounds; SmolLM2-135M Q4_1 on llama.cpp, 2 threads; load average {result['grouped_load_average'][0]:.1f}-"
          f"{result['grouped_load_average'][1]:.1f} (a shared machine); medians over rounds")
    print(f"peak prompt rate {result['grouped_peak_tokens_per_s']:.0f} tokens/s "
          f"({result['grouped_peak_tokens_per_cpu_s']:.0f} tokens per CPU-second)")
    for name in ("likelihood", "rubric"):
        g = lambda key, name=name: result[f"grouped_{name}_{key}"]  # noqa: E731
        print(f"{name:10s} reuse {g('reuse_items_per_s'):6.2f} items/s, plain (today) {g('plain_items_per_s'):6.2f}, "
              f"limit {g('limit_items_per_s'):6.2f} ({g('unique_tokens_per_item'):.0f} unique tokens per item): "
              f"reuse = {g('reuse_vs_plain'):.1f}x plain, {g('reuse_vs_limit'):.2f}x the limit (in CPU time "
              f"{g('reuse_vs_plain_cpu'):.1f}x, {g('reuse_vs_limit_cpu'):.2f}x); "
              f"max |score difference| {g('max_abs_score_diff'):.2g}")


STARTED = _results.meta(sys.argv) if __name__ == "__main__" else {}  # the commit and load when the run began


def emit(result: dict, args: argparse.Namespace) -> None:
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump({"meta": STARTED, **result}, f, indent=1)
            f.write("\n")
    if args.json:
        print(json.dumps(result))

def model_rates(spec: str, tries: int = 3) -> dict:
    """Peak prompt-evaluation and generation rates of one in-process model on the rubric prompts."""
    demos, pool = demos_and_items(8)
    lm = load_lm(spec, use_cache=False)
    model = lm.model
    prompts = [model.tokenize(model.render(rubric_messages(demos, e), PREFIX)) for e in pool]
    shared = min(len(os.path.commonprefix([prompts[0], p])) for p in prompts[1:])
    tokens = [t for p in prompts for t in p[shared:]][:max(PEAK_SIZES)]
    prompt, prompt_cpu, generation = [], [], []
    story = [{"role": "user", "content": "Write a long, detailed story about a lighthouse keeper and a storm."}]
    for i in range(tries):
        wall, cpu = peak_rate(model, prompts[0][:shared], tokens, cpu=True)
        prompt.append(wall)
        prompt_cpu.append(cpu)
        start = time.perf_counter()
        answer = lm.generate([{**story[0], "content": f"{story[0]['content']} ({i})"}], max_tokens=96)
        generation.append(answer.usage.get("completion_tokens", 0) / (time.perf_counter() - start))
    lm.close()
    return {"lm": spec, "prompt_tokens_per_s": statistics.median(prompt),
            "prompt_tokens_per_cpu_s": statistics.median(prompt_cpu),
            "generation_tokens_per_s": statistics.median(generation), "tries": tries,
            "threads": model.n_threads, "load": os.getloadavg()[0]}


PATHS = ("predict", "prefill_predict", "label", "prefix", "batched", "coalesced", "sampled")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="5 rounds of 8 pairs instead of 6 rounds of 20")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 6, --quick 5)")
    parser.add_argument("--per-round", type=int, help="pairs per round (default 20, --quick 8)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--out", help="also write the result, with its meta header, to this JSON file")
    parser.add_argument("--grouped", action="store_true", help="the grouped-data case only (source reuse)")
    parser.add_argument("--sources", type=int, default=2, help="--grouped: articles per round (default 2)")
    parser.add_argument("--server", action="store_true",
                        help="--grouped: the rubric judge over llama-cpp-python's server instead, grouped vs interleaved")
    parser.add_argument("--models", nargs="+", metavar="SPEC", help="only the prompt and generation rates of these models")
    args = parser.parse_args()
    if args.models:
        result = {"models": [model_rates(spec) for spec in args.models]}
        emit(result, args)
        if not args.json:
            for row in result["models"]:
                print(f"{row['lm']:<18} prompt {row['prompt_tokens_per_s']:7.1f} tok/s "
                      f"({row['prompt_tokens_per_cpu_s']:.1f} per CPU-s)  "
                      f"generation {row['generation_tokens_per_s']:6.1f} tok/s")
        return
    if args.grouped and args.server:
        result = server_grouped_case(args.sources, args.per_round or 4)
        emit(result, args)
        if not args.json:
            print(json.dumps(result, indent=1))
        return
    if args.grouped:
        result = grouped_case(args.rounds or (2 if args.quick else 4), args.sources)
        emit(result, args)
        if not args.json:
            print_grouped(result)
        return
    rounds, per_round = (5, 8) if args.quick else (6, 20)
    rounds, per_round = args.rounds or rounds, args.per_round or per_round
    demos, pool = demos_and_items(rounds * per_round + 1)
    warm, items = pool[0], pool[1:]
    lm = load_lm("local:smollm2", use_cache=False)
    model = lm.model
    prompts = [model.tokenize(model.render(rubric_messages(demos, e), PREFIX)) for e in items]
    shared = min(len(os.path.commonprefix([prompts[0], p])) for p in prompts[1:])
    unique = sum(len(p) - shared for p in prompts) / len(prompts)
    peak_tokens = [t for p in prompts for t in p[shared:]][:max(PEAK_SIZES)]
    run = {"predict": predict_path(lm, demos, prefill=False), "prefill_predict": predict_path(lm, demos, prefill=True),
           "label": label_path(model, demos, reuse=False), "prefix": label_path(model, demos, reuse=True),
           "batched": batched_path(model, demos), "coalesced": coalesced_path(lm, demos),
           "sampled": sampled_path(model, demos)}
    rates: dict[str, list[float]] = {name: [] for name in (*PATHS, "limit")}
    peaks: list[float] = []
    results: dict[str, list] = {name: [] for name in PATHS}
    loads = []
    for r in range(rounds):
        chunk = items[r * per_round:(r + 1) * per_round]
        order = list(PATHS[r % len(PATHS):] + PATHS[:r % len(PATHS)])
        for name in order:
            run[name]([warm])  # its prefix cached, as in steady state
            start = time.perf_counter()
            results[name] += run[name](chunk)
            rates[name].append(len(chunk) / (time.perf_counter() - start))
            if name == order[len(order) // 2]:  # the limit, measured mid-round
                peaks.append(peak_rate(model, prompts[0][:shared], peak_tokens))
                rates["limit"].append(peaks[-1] / unique)
        loads.append(os.getloadavg()[0])
    med = {name: statistics.median(values) for name, values in rates.items()}
    ratio = lambda a, b: statistics.median(x / y for x, y in zip(rates[a], rates[b]))  # noqa: E731
    exact = max(abs(a - b) for a, b in zip(results["batched"], results["prefix"]))
    pairs = [(s, p) for s, p in zip(results["sampled"], results["prefix"]) if s is not None]
    spearman = correlation([s for s, _ in pairs], [p for _, p in pairs])
    interval = bootstrap_interval(lambda a, b: correlation(a, b), [s for s, _ in pairs], [p for _, p in pairs])
    result = {"items": len(items), "rounds": rounds,
              "predict_items_per_s": med["predict"],
              "predict_parse_failure_rate": 1 - sum(results["predict"]) / len(items),
              "prefill_predict_items_per_s": med["prefill_predict"],
              "prefill_predict_parse_failure_rate": 1 - sum(results["prefill_predict"]) / len(items),
              "label_items_per_s": med["label"], "prefix_items_per_s": med["prefix"],
              "batched_items_per_s": med["batched"], "coalesced_items_per_s": med["coalesced"],
              "sampled_items_per_s": med["sampled"], "sampled_n": SAMPLES, "sampled_temperature": TEMPERATURE,
              "sampled_failures": len(items) - len(pairs),
              "sampled_vs_logprobs_spearman": spearman,
              "sampled_vs_logprobs_spearman_ci": [interval.low, interval.high],
              "batched_vs_prefix_max_abs_diff": exact,
              "forward_tokens_per_s": statistics.median(peaks), "unique_tokens_per_item": unique,
              "limit_items_per_s": med["limit"], "prompt_tokens": len(prompts[0]), "shared_prefix_tokens": shared,
              "prefix_vs_predict": ratio("prefix", "predict"), "prefix_vs_limit": ratio("prefix", "limit"),
              "batched_vs_predict": ratio("batched", "predict"), "batched_vs_limit": ratio("batched", "limit"),
              "coalesced_vs_limit": ratio("coalesced", "limit"), "sampled_vs_prefix": ratio("sampled", "prefix"),
              "load_average": [min(loads), max(loads)],
              "spread": {name: [min(v), max(v)] for name, v in rates.items()}}
    serial, parallel = remote_speedup()
    result.update(remote_16_serial_s=serial, remote_16_concurrent_s=parallel, remote_speedup_16=serial / parallel)
    emit(result, args)
    if args.json:
        return
    spread = result["spread"]
    line = lambda label, name: print(f"{label:40s} {med[name]:6.2f} items/s  "  # noqa: E731
                                     f"(rounds {spread[name][0]:.2f}-{spread[name][1]:.2f})")
    print(f"{len(items)} MSRpar test pairs in {rounds} interleaved rounds; 1-5 rubric with 4 demos "
          f"({result['prompt_tokens']} prompt tokens, {shared} shared, {unique:.1f} unique per item); "
          f"SmolLM2-135M Q4_1 on llama.cpp, 2 threads; load average {min(loads):.1f}-{max(loads):.1f} "
          f"(a shared machine); medians over rounds")
    line("(a) dspy.Predict, ChatAdapter", "predict")
    print(f"    parse failures {result['predict_parse_failure_rate']:.0%}")
    line("(a') dspy.Predict, marker prefilled", "prefill_predict")
    print(f"    parse failures {result['prefill_predict_parse_failure_rate']:.0%}")
    line("(b) labels, from scratch", "label")
    line("(c) labels, prefix reused, one at a time", "prefix")
    line("(d) labels, batched", "batched")
    line("(d') labels, threads coalesced (judge_all)", "coalesced")
    line(f"(s) sampled, n={SAMPLES} at T={TEMPERATURE}", "sampled")
    line("limit", "limit")
    print(f"limit: peak {result['forward_tokens_per_s']:.0f} tokens/s (best of decodes of {PEAK_SIZES} tokens "
          f"after the cached prefix) / "
          f"{unique:.1f} unique tokens per item")
    print(f"(d) = {result['batched_vs_limit']:.2f}x the limit, {result['batched_vs_predict']:.1f}x (a); "
          f"(d') = {result['coalesced_vs_limit']:.2f}x the limit; (c) = {result['prefix_vs_limit']:.2f}x the limit, "
          f"{result['prefix_vs_predict']:.1f}x (a)  (medians of per-round ratios)")
    print(f"(d) vs (c) expected scores: max |difference| {exact:.2g}")
    agreement = "undefined (constant scores)" if spearman is None else (
        f"{spearman:.2f} [{interval.low:.2f}, {interval.high:.2f}] (95% bootstrap)")
    print(f"(s) costs {1 / result['sampled_vs_prefix']:.1f}x (c) per item; Spearman with (c)'s expected score "
          f"{agreement} on {len(pairs)} items ({result['sampled_failures']} with no parsed answer)")
    print(f"remote, 16 requests at 50 ms: {serial:.3f} s one at a time, {parallel:.3f} s 16 at a time "
          f"= {result['remote_speedup_16']:.1f}x")


if __name__ == "__main__":
    main()
