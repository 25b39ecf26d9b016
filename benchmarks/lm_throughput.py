"""Throughput of the embedded judge model on a 1-5 rubric over MSRpar pairs (issue 3's benchmark).

Items per second for (a) dspy.Predict generating and parsing the score, (b) label_distribution
with every prompt evaluated from scratch, (c) label_distribution reusing the KV cache of the shared
prefix (instruction + 4 demos); and the model's limit: its forward-pass tokens per second over the
prompt tokens unique to each item. Also: 16 requests against a server with 50 ms latency, one at a
time vs 16 threads.

    python benchmarks/lm_throughput.py [--quick] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import dspy  # noqa: E402

from judgetune import datasets  # noqa: E402
from judgetune.lm import OpenAICompatibleClient, load_lm, parse_lm_spec, run_items  # noqa: E402
from judgetune.lm._adapter import PrefillChatAdapter  # noqa: E402
from judgetune.lm._labels import local_label_distribution  # noqa: E402

INSTRUCTION = ("You judge how close in meaning two sentences are. Reply with one score from 1 to 5: "
               "1 means unrelated, 3 means they share the main point but differ in details, 5 means they say "
               "exactly the same thing.")
LABELS = ["1", "2", "3", "4", "5"]


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


def predict_rate(lm, demos, items, *, prefill: bool) -> tuple[float, float]:
    """(a): items/s and parse-failure rate of dspy.Predict writing the score: with DSPy's ChatAdapter
    (answers capped at 64 tokens), or with the answer marker prefilled and a stop at the line end."""

    class Rate(dspy.Signature):
        __doc__ = INSTRUCTION
        sentence1: str = dspy.InputField()
        sentence2: str = dspy.InputField()
        score: int = dspy.OutputField(desc="1 to 5")

    program = dspy.Predict(Rate)
    program.demos = [dspy.Example(sentence1=d.references[0].text, sentence2=d.answer, score=to_five(d.label))
                     for d in demos]
    failures = 0
    start = time.perf_counter()
    adapter = PrefillChatAdapter() if prefill else dspy.ChatAdapter(use_json_adapter_fallback=False)
    config = {"max_tokens": 8, "stop": ["\n", "[["]} if prefill else {"max_tokens": 64}
    with dspy.context(lm=lm.dspy_lm, adapter=adapter):
        for e in items:
            try:
                program(sentence1=e.references[0].text, sentence2=e.answer, config=config)
            except Exception:  # noqa: BLE001 - a parse failure counts, it does not stop the benchmark
                failures += 1
    return len(items) / (time.perf_counter() - start), failures / len(items)


def label_rate(model, demos, items, *, reuse: bool) -> float:
    """(b) / (c): items/s of label_distribution on the same rubric prompt."""
    model.reuse_prefix = reuse
    start = time.perf_counter()
    for e in items:
        local_label_distribution(model, rubric_messages(demos, e), LABELS, prefix="Score: ")
    model.reuse_prefix = True
    return len(items) / (time.perf_counter() - start)


def model_limit(model, demos, items) -> tuple[float, float, float]:
    """Forward-pass tokens/s on the tokens each item adds after the cached prefix, and items/s that allows."""
    prompts = [model.tokenize(model.render(rubric_messages(demos, e), "Score: ")) for e in items]
    shared = min(len(os.path.commonprefix([prompts[0], p])) for p in prompts[1:])
    llm = model._llm
    model.next_logprobs(prompts[0][: shared + 1])  # the shared prefix, cached
    spent, tokens = 0.0, 0
    for p in prompts:
        llm._ctx.kv_cache_seq_rm(-1, shared, -1)
        llm.n_tokens = shared
        start = time.perf_counter()
        llm.eval(p[shared:])
        spent += time.perf_counter() - start
        tokens += len(p) - shared
    llm.n_tokens = 0  # leave no stale cache for later users
    per_second = tokens / spent
    unique = tokens / len(prompts)
    return per_second, unique, per_second / unique


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="40 pairs instead of 200")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    demos, items = demos_and_items(40 if args.quick else 200)
    lm = load_lm("local:smollm2", use_cache=False)
    tokens_per_s, unique, limit = model_limit(lm.model, demos, items)
    result = {"items": len(items)}
    result["predict_items_per_s"], result["predict_parse_failure_rate"] = predict_rate(lm, demos, items, prefill=False)
    result["prefill_predict_items_per_s"], result["prefill_predict_parse_failure_rate"] = predict_rate(
        lm, demos, items, prefill=True)
    result["label_items_per_s"] = label_rate(lm.model, demos, items, reuse=False)
    result["prefix_items_per_s"] = label_rate(lm.model, demos, items, reuse=True)
    result.update(forward_tokens_per_s=tokens_per_s, unique_tokens_per_item=unique, limit_items_per_s=limit,
                  prompt_tokens=len(lm.model.tokenize(lm.model.render(rubric_messages(demos, items[0]), "Score: "))))
    result["prefix_vs_predict"] = result["prefix_items_per_s"] / result["predict_items_per_s"]
    result["prefix_vs_limit"] = result["prefix_items_per_s"] / limit
    serial, parallel = remote_speedup()
    result.update(remote_16_serial_s=serial, remote_16_concurrent_s=parallel, remote_speedup_16=serial / parallel)
    if args.json:
        print(json.dumps(result))
        return
    print(f"{len(items)} MSRpar test pairs, 1-5 rubric with 4 demos ({result['prompt_tokens']} prompt tokens, "
          f"{unique:.1f} unique per item), SmolLM2-135M Q4_1 on llama.cpp, 2 threads")
    print(f"(a) dspy.Predict, ChatAdapter        {result['predict_items_per_s']:8.2f} items/s "
          f"(parse failures {result['predict_parse_failure_rate']:.0%})")
    print(f"(a') dspy.Predict, marker prefilled  {result['prefill_predict_items_per_s']:8.2f} items/s "
          f"(parse failures {result['prefill_predict_parse_failure_rate']:.0%})")
    print(f"(b) label_distribution, no reuse     {result['label_items_per_s']:8.2f} items/s")
    print(f"(c) label_distribution, prefix reuse {result['prefix_items_per_s']:8.2f} items/s "
          f"= {result['prefix_vs_predict']:.1f}x (a), {result['prefix_vs_limit']:.2f}x the limit")
    print(f"model limit: {tokens_per_s:.0f} forward tokens/s / {unique:.1f} unique tokens = {limit:.2f} items/s")
    print(f"remote, 16 requests at 50 ms: {serial:.3f} s one at a time, {parallel:.3f} s 16 at a time "
          f"= {result['remote_speedup_16']:.1f}x")


if __name__ == "__main__":
    main()
