"""The embedded server's two engines side by side in one run: torch (transformers + PEFT) and llama (llama.cpp).

Each engine in its own server process, one after the other, same machine, same requests:

- **decode, one stream**: greedy, a chat prompt, 128 new tokens (tokens/s of the completion);
- **decode, four streams**: four such requests at once, the server sized with `--max-batch 4` (aggregate tokens/s);
- **prefill**: a ~1,000-token prompt never seen before, one new token (prompt tokens/s);
- **harness trials**: the starter tasks x K attempts with agent `harness`, temperature 0, `-n 2`, in Docker
  (trials per hour, pass@1), each engine's server as `rsi model serve --engine KIND` sizes itself;
- **log-prob agreement**: every token of a few agent transcripts scored teacher-forced by both engines (echo
  logprobs of a text completion), on the base and, with `--adapter DIR`, through a PEFT LoRA: mean and max
  absolute difference (nats). Group advantages and the PG ratio read served log-probs, so this says what
  serving from llama.cpp does to the training side.

    python benchmarks/engines.py                      # 8 starter tasks x 2 (about 25 min on 2 cores)
    python benchmarks/engines.py --tasks 0            # no harness arm (the engine figures only, ~3 min)

Target (issue 47): harness trials per hour at least 2x the torch engine's, pass@1 not lower beyond noise.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _records import Recorder  # noqa: E402
from harness_throughput import _free_port, _start_server, _stop_server, run_arm  # noqa: E402

from rsi.models.embedded import DEFAULT_MODEL_ID  # noqa: E402

TARGET = 2.0
ASK = [{"role": "user", "content": "Write a short story about a lighthouse keeper who finds a map."}]
TRANSCRIPTS = [
    "<|im_start|>system\nYou are a shell agent working in a Linux sandbox. Each turn, reply with exactly one bash "
    "command in a ```bash block.<|im_end|>\n<|im_start|>user\nTask: Count the lines of /app/notes.txt and write the "
    "number to /app/count.txt.<|im_end|>\n<|im_start|>assistant\n```bash\nwc -l < /app/notes.txt > /app/count.txt\n"
    "```<|im_end|>\n<|im_start|>user\n[exit code 0]<|im_end|>\n<|im_start|>assistant\nDONE<|im_end|>",
    "<|im_start|>user\nSort the words in /app/words.txt and save them to /app/sorted.txt, then print the first one."
    "<|im_end|>\n<|im_start|>assistant\n```bash\nsort /app/words.txt > /app/sorted.txt && head -n 1 /app/sorted.txt\n"
    "```<|im_end|>",
    "<|im_start|>user\nWhat is the capital of France? Answer in one word.<|im_end|>\n<|im_start|>assistant\nParis"
    "<|im_end|>",
]


def _chat(base: str, messages: list[dict[str, Any]], max_tokens: int, **kw: Any) -> dict[str, Any]:
    r = httpx.post(f"{base}/chat/completions", json={"model": kw.pop("model", DEFAULT_MODEL_ID),
                                                      "messages": messages, "max_tokens": max_tokens,
                                                      "temperature": 0, **kw}, timeout=900)
    r.raise_for_status()
    return dict(r.json())


def _echo(base: str, model: str) -> list[float]:
    out: list[float] = []
    for text in TRANSCRIPTS:
        r = httpx.post(f"{base}/completions", json={"model": model, "prompt": text, "max_tokens": 1, "echo": True,
                                                    "logprobs": 0, "temperature": 0}, timeout=900)
        r.raise_for_status()
        lps = r.json()["choices"][0]["logprobs"]["token_logprobs"]
        out += [float(x) for x in lps[1:len(lps) - 1]]  # the prompt's tokens after the first (not the new one)
    return out


def engine_figures(kind: str, work: Path, adapter: Path | None) -> dict[str, Any]:
    port = _free_port()
    proc = _start_server(port, str(ROOT), ["--engine", kind, "--max-batch", "4"], work / f"{kind}-server.log")
    base = f"http://127.0.0.1:{port}/v1"
    try:
        _chat(base, ASK, 8)  # warm
        t0 = time.perf_counter()
        one = _chat(base, ASK, 128)
        single = one["usage"]["completion_tokens"] / (time.perf_counter() - t0)
        asks = [[{"role": "user", "content": f"{ASK[0]['content']} Version {i}."}] for i in range(4)]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(4) as pool:
            res = list(pool.map(lambda m: _chat(base, m, 128), asks))
        four = sum(r["usage"]["completion_tokens"] for r in res) / (time.perf_counter() - t0)
        long = [{"role": "user", "content": " ".join(f"item{i} is {i * 7 % 13}" for i in range(160))
                 + " Which item is largest?"}]
        t0 = time.perf_counter()
        pre = _chat(base, long, 1)
        prefill = (pre["usage"]["prompt_tokens"] - pre["usage"].get("prompt_tokens_details", {}).get(
            "cached_tokens", 0)) / (time.perf_counter() - t0)
        lp = {"base": _echo(base, DEFAULT_MODEL_ID)}
        if adapter is not None:
            httpx.post(f"{base}/load_lora_adapter", json={"lora_name": "bench", "lora_path": str(adapter)},
                       timeout=300).raise_for_status()
            lp["adapter"] = _echo(base, "bench")
        text = one["choices"][0]["message"]["content"]
    finally:
        _stop_server(proc)
    return {"single": single, "four": four, "prefill": prefill, "logprobs": lp, "text": text,
            "ids": one["choices"][0].get("token_ids")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=8, help="starter tasks in the harness arm (0: no harness arm)")
    ap.add_argument("-k", "--attempts", type=int, default=2)
    ap.add_argument("-n", "--concurrency", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--adapter", type=Path, help="a PEFT LoRA directory for the log-prob agreement through an adapter")
    ap.add_argument("--record", action="store_true", help="write benchmarks/records/engines.json")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rsi-engines-"))
    figs: dict[str, dict[str, Any]] = {}
    arms: dict[str, Any] = {}
    try:
        for kind in ("torch", "llama"):
            figs[kind] = engine_figures(kind, work, args.adapter)
            print(f"{kind}: decode {figs[kind]['single']:.1f} tokens/s one stream, {figs[kind]['four']:.1f} in four; "
                  f"prefill {figs[kind]['prefill']:.0f} tokens/s", flush=True)
        if args.tasks:
            tasks = sorted(p for p in (ROOT / "tasks").iterdir() if (p / "task.toml").is_file())[: args.tasks]
            for kind in ("torch", "llama"):
                arms[kind] = run_arm(kind, work, tasks, server_path=str(ROOT), server_args=["--engine", kind],
                                     stop=True, attempts=args.attempts, concurrency=args.concurrency, seed=args.seed)
                a = arms[kind]
                print(f"{kind}: {a.trials} trials in {a.wall:.0f} s = {a.per_hour:.0f} trials/h, pass@1 {a.pass1:.3f}"
                      + (f", errors {a.errors}" if a.errors else ""), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    t, ll = figs["torch"], figs["llama"]
    rec = Recorder("engines", "Embedded engines side by side: torch vs llama.cpp",
                   context=f"one run, each engine in its own server; harness arm: {args.tasks} starter tasks x "
                           f"{args.attempts}, -n {args.concurrency}, temperature 0, seed {args.seed}")
    rec.add("decode_single", "decode tokens/s, one stream (llama)", ll["single"], "tokens/s",
            compare={"torch": t["single"]})
    rec.add("decode_four", "decode tokens/s, four streams (llama)", ll["four"], "tokens/s",
            compare={"torch": t["four"]})
    rec.add("prefill", "prefill tokens/s (llama)", ll["prefill"], "tokens/s", compare={"torch": t["prefill"]})
    for part in t["logprobs"]:
        a, b = t["logprobs"][part], ll["logprobs"][part]
        diffs = [abs(x - y) for x, y in zip(a, b, strict=True)]
        mean, worst = sum(diffs) / len(diffs), max(diffs)
        print(f"log-prob agreement ({part}, {len(diffs)} tokens): mean |d| {mean:.4f}, max {worst:.4f} nats")
        rec.add(f"logprob_diff_{part}", f"served log-prob |llama - torch|, mean ({part})", mean, "nats",
                note=f"max {worst:.4f} over {len(diffs)} teacher-forced tokens")
    ratio = 0.0
    if arms:
        ratio = arms["llama"].per_hour / arms["torch"].per_hour if arms["torch"].per_hour else 0.0
        print(f"harness trials per hour llama / torch: {ratio:.2f}x (target >= {TARGET:g}x); pass@1 "
              f"{arms['torch'].pass1:.3f} -> {arms['llama'].pass1:.3f}")
        rec.add("trials_per_hour", "harness trials per hour (llama)", arms["llama"].per_hour, "trials/h",
                compare={"torch": arms["torch"].per_hour})
        rec.add("trials_ratio", "harness trials per hour, llama / torch", ratio, "x", target=f">= {TARGET:g}")
        rec.add("pass_at_1", "pass@1 (llama)", arms["llama"].pass1, compare={"torch": arms["torch"].pass1})
    if args.record:
        rec.write()
    return 0 if not arms or ratio >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
