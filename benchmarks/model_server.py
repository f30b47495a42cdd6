"""Embedded model server throughput: single-stream tokens/s before and after issue 8, 4 concurrent streams,
and (with --kernels) int8 kernels against fp32.

Starts each server itself on a free port, as `rsi model serve` does, unless `--endpoint URL` points
at a running one:

- **before**: the server as of `--baseline-ref` (default: the last commit before issue 8; its `rsi`
  package is exported from git), `--max-batch` as given;
- **after**: this checkout's server, `--max-batch` as given (default: the concurrency, so concurrent
  greedy requests share a forward pass; the server's own default is half the cores).

Prints single-stream tokens/s of both and their ratio, aggregate tokens/s of `--concurrency`
concurrent requests on the after server, and their ratio to its single stream. `--kernels` adds, in
this process, tokens/s of the `default` and `int8` kernels (both float32 activations in, greedy) and
their token agreement on a fixed prompt set: tokens of the int8 answer that match fp32 before the
first difference, over all fp32 tokens, and how many answers are identical.

    python benchmarks/model_server.py [--max-tokens 128] [--kernels] [--endpoint http://127.0.0.1:8765/v1]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _records import Recorder  # noqa: E402

from rsi.models.client import ChatClient  # noqa: E402
from rsi.models.embedded import DEFAULT_MODEL_ID  # noqa: E402

PROMPT = [{"role": "user", "content": "Write a short story about a robot who learns to paint."}]
AGREEMENT_PROMPTS = [
    "Write a short story about a robot who learns to paint.",
    "List three uses of the ls command.",
    "Task: count the words in /app/story.txt and write the number to /app/words.txt",
    "What is 2+2?",
    "Explain what a Dockerfile is.",
    "Task: Write the number of lines in /app/data.csv to /app/count.txt.",
]
BASELINE_REF = "bb4a936"
TARGET_SINGLE = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(pythonpath: str, args: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=pythonpath)
    cmd = [sys.executable, "-m", "rsi.cli.model", "serve", "--port", str(port), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True, cwd=tempfile.gettempdir())
    base = f"http://127.0.0.1:{port}/v1"
    with ChatClient(base, max_attempts=1) as probe:
        deadline = time.monotonic() + 600
        while not probe.healthy():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"server {' '.join(cmd)} did not start")
            time.sleep(0.5)
    return proc, base


def _stop(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, 15)
    proc.wait(timeout=30)


def _run(client: ChatClient, model: str, max_tokens: int, n: int) -> tuple[int, float]:
    """(completion tokens, wall seconds) of n identical greedy requests sent at once."""

    def one(_: int) -> int:
        return client.chat(model, PROMPT, max_tokens=max_tokens, temperature=0.0).usage.completion_tokens

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n) as pool:
        tokens = sum(pool.map(one, range(n)))
    return tokens, time.perf_counter() - t0


def _best(base: str, model: str, max_tokens: int, n: int, repeats: int) -> float:
    with ChatClient(base, timeout=600) as client:
        _run(client, model, 8, 1)  # warm-up
        return max(t / s for t, s in (_run(client, model, max_tokens, n) for _ in range(repeats)))


def _kernels(max_tokens: int) -> tuple[float, str]:
    import torch

    from rsi.models.server.engine import Engine, GenRequest
    from rsi.models.sizing import size_server

    answers: dict[str, list[list[int]]] = {}
    for kernels in ("default", "int8"):
        eng = Engine(dtype=torch.float32, sizing=size_server(kernels=kernels, max_batch=1, prefix_cache_mb=0))
        tokens, t0, outs = 0, time.perf_counter(), []
        for q in AGREEMENT_PROMPTS:
            res = eng.generate(GenRequest(model=eng.model_id, messages=[{"role": "user", "content": q}],
                                          max_tokens=max_tokens))
            outs.append(res.completion_ids)
            tokens += res.completion_tokens
        rate = tokens / (time.perf_counter() - t0)
        eng.close()
        answers[kernels] = outs
        print(f"kernels {kernels}: {rate:.1f} tokens/s single stream (float32, greedy, prompt set of "
              f"{len(AGREEMENT_PROMPTS)})")
    ref, q8 = answers["default"], answers["int8"]
    agree = sum(next((i for i, (a, b) in enumerate(zip(x, y, strict=False)) if a != b), min(len(x), len(y)))
                for x, y in zip(q8, ref, strict=True))
    total = sum(len(y) for y in ref)
    same = sum(x == y for x, y in zip(q8, ref, strict=True))
    print(f"int8 token agreement with fp32: {agree}/{total} = {agree / total:.3f} (tokens before the first "
          f"difference); identical answers {same}/{len(ref)}")
    return agree / total, f"identical answers {same}/{len(ref)}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", default=None, help="only measure a running server at this base URL")
    ap.add_argument("--model", default=DEFAULT_MODEL_ID)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2, help="best of N for each figure")
    ap.add_argument("--max-batch", type=int, default=None, help="server batch size (default: concurrency)")
    ap.add_argument("--baseline-ref", default=BASELINE_REF, help="git commit of the 'before' server")
    ap.add_argument("--kernels", action="store_true", help="also compare int8 kernels with fp32 in-process")
    args = ap.parse_args()

    if args.endpoint:
        single = _best(args.endpoint, args.model, args.max_tokens, 1, args.repeats)
        conc = _best(args.endpoint, args.model, args.max_tokens, args.concurrency, args.repeats)
        print(f"single stream: {single:.1f} tokens/s (target >= {TARGET_SINGLE:.0f})")
        print(f"{args.concurrency} concurrent: {conc:.1f} tokens/s aggregate; ratio {conc / single:.2f}x")
        return 0

    rec = Recorder("model_server", "Embedded model server throughput",
                   context=f"SmolLM2-135M, greedy, {args.max_tokens} tokens per answer, best of {args.repeats}; the "
                           f"'before' server is commit {args.baseline_ref}'s, started from a git archive in the same "
                           "run.")
    batch = ["--max-batch", str(args.max_batch or args.concurrency)]
    with tempfile.TemporaryDirectory(prefix="rsi-model-bench-") as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline_ref, "rsi"], check=True,
                                 capture_output=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        proc, base = _start(tmp, batch)
        try:
            before = _best(base, args.model, args.max_tokens, 1, args.repeats)
        finally:
            _stop(proc)
    proc, base = _start(str(ROOT), batch)
    try:
        after = _best(base, args.model, args.max_tokens, 1, args.repeats)
        conc = _best(base, args.model, args.max_tokens, args.concurrency, args.repeats)
    finally:
        _stop(proc)
    print(f"single stream before ({args.baseline_ref}): {before:.1f} tokens/s")
    print(f"single stream after: {after:.1f} tokens/s (target >= {TARGET_SINGLE:.0f}); ratio {after / before:.2f}x")
    print(f"{args.concurrency} concurrent (after, max batch {batch[1]}): {conc:.1f} tokens/s aggregate; "
          f"ratio concurrent/single {conc / after:.2f}x")
    rec.add("single_stream", "single stream tokens/s", after, "tokens/s", target=f">= {TARGET_SINGLE:g}",
            compare={f"before ({args.baseline_ref})": before})
    rec.add("concurrent_over_single", f"{args.concurrency} concurrent streams over one (aggregate tokens/s)",
            conc / after, "x", note=f"{conc:.1f} tokens/s aggregate")
    if args.kernels:
        agreement, same = _kernels(args.max_tokens)
        rec.add("int8_agreement", "int8 kernels: token agreement with fp32", agreement, note=same)
    rec.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
