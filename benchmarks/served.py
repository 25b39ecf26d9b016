"""Labels read over a server beside in-process, per label position, with the embedded model behind the server.

For each label position the server offers, on ``--items`` MSRpar test pairs (seeded order of the catalog's test
split), the zero-shot rubric judge (0-5, ``scoring_mode=logprobs``) on the served model beside the same judge
in-process. Each row: ``failed`` (judgments without a score), ``agree_in_process`` (the share of items whose label
distribution matches the in-process one within 1e-3 on every label), ``max_abs_diff`` (the largest difference
between the scores of the judge frozen from this run, scored by ``judgetune score`` in a new process with a cold
answer cache, and the run's own scores; 0 when the frozen judge scores exactly as its run did) and ``s_per_item``
(wall seconds per item of the run, one request at a time).

    python benchmarks/served.py --server llama-cpp-python [--items 40]
    python benchmarks/served.py --server llama-server --binary .ci/llama.cpp/build/bin/llama-server [--items 40]

Writes ``benchmarks/results/served-<server>.json`` (``--out`` elsewhere).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import _results  # noqa: E402  (benchmarks/ is on sys.path when a benchmark runs)

from judgetune import datasets  # noqa: E402
from judgetune.config import JudgeConfig  # noqa: E402
from judgetune.judges import make_judge  # noqa: E402
from judgetune.lm import ResponseCache, load_lm  # noqa: E402
from judgetune.lm._spec import model_file, parse_lm_spec  # noqa: E402
from judgetune.testing import LlamaCppServer, LlamaServer  # noqa: E402

POSITIONS = {"llama-cpp-python": ("completions", "generated"), "llama-server": ("completions", "prefill", "generated")}
PARAMS = {"k": 0, "scoring_mode": "logprobs"}
TOLERANCE = 1e-3


def agrees(a, b) -> bool:
    """Both judged, and every label's probability within TOLERANCE."""
    return a.parsed and b.parsed and all(abs(a.distribution[k] - b.distribution.get(k, 0.0)) <= TOLERANCE
                                         for k in a.distribution)


def frozen_diff(judge, lm, verdicts, items, folder: Path) -> float | None:
    """The largest |score| difference between ``judgetune score`` of the frozen judge (a new process, a cold cache)
    and the run's scores; None when one side failed an item the other scored."""
    config = JudgeConfig.from_judge(judge, lm=lm.spec.to_dict(), calibrator=None, label_range=(0.0, 5.0))
    mine = config.calibrated(verdicts, judge, items)
    config.save(folder / "judge.json")
    data = folder / "items.jsonl"
    data.write_text("".join(json.dumps(e.to_dict()) + "\n" for e in items))
    env = {**os.environ, "JUDGETUNE_CACHE_DIR": str(folder / "cold-cache")}
    subprocess.run([sys.executable, "-m", "judgetune.cli", "score", "--config", str(folder / "judge.json"), "--data",
                    str(data), "--out", str(folder / "scored.jsonl")], env=env, check=True, capture_output=True)
    theirs = [json.loads(line)["score"] for line in (folder / "scored.jsonl").read_text().splitlines()]
    if [a is None for a in mine] != [b is None for b in theirs]:
        return None
    return max((abs(a - b) for a, b in zip(mine, theirs) if a is not None), default=0.0)


def run(server: str, binary: str | None, n: int, work: Path) -> list[dict]:
    examples = datasets.load("sts2012-msrpar", root=work / "data")
    train = [e for e in examples if e.meta["split"] == "train"]
    items = [e for e in examples if e.meta["split"] == "test"][:n]
    gguf = str(model_file(parse_lm_spec("local:smollm2")))
    local = load_lm("local:smollm2", use_cache=False)
    reference = [make_judge("rubric", local, train=train, label_range=(0, 5), params=PARAMS)(e) for e in items]
    local.close()
    launcher = (LlamaServer(gguf, work / "server.log", logits_all=True) if server == "llama-cpp-python"
                else LlamaCppServer(binary, gguf, work / "server.log"))
    rows = []
    with launcher as srv:
        for position in POSITIONS[server]:
            folder = work / position
            folder.mkdir()
            lm = load_lm(f"openai/{gguf}", api_base=srv.base_url, label_position=position,
                         cache=ResponseCache(folder / "cache"))
            judge = make_judge("rubric", lm, train=train, label_range=(0, 5), params=PARAMS)
            start = time.perf_counter()
            verdicts = [judge(e) for e in items]
            seconds = time.perf_counter() - start
            rows.append({"server": server, "label_position": position, "items": len(items),
                         "failed": sum(not v.parsed for v in verdicts),
                         "agree_in_process": sum(agrees(v, r) for v, r in zip(verdicts, reference)) / len(items),
                         "max_abs_diff": frozen_diff(judge, lm, verdicts, items, folder),
                         "s_per_item": round(seconds / len(items), 3)})
            print(json.dumps(rows[-1]), file=sys.stderr)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", required=True, choices=sorted(POSITIONS))
    parser.add_argument("--binary", help="llama-server's path (bash .ci/llama_server.sh prints it)")
    parser.add_argument("--items", type=int, default=40)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.server == "llama-server" and not args.binary:
        parser.error("--server llama-server needs --binary PATH")
    with tempfile.TemporaryDirectory() as work:
        rows = run(args.server, args.binary, args.items, Path(work))
    out = args.out or Path(__file__).parent / "results" / f"served-{args.server}.json"
    _results.write_result(out, {"rows": rows}, sys.argv, machine_note="shared with other engineers' jobs")
    print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
