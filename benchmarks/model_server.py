"""Embedded model server throughput: one stream vs four concurrent streams.

Prints tokens/s of a single greedy stream (the baseline), aggregate tokens/s of 4 concurrent
requests, and their ratio, all measured in this run. Starts the embedded server itself on a free
port with `--max-batch` (default: the concurrency, so concurrent greedy requests share a forward
pass; the server's own default of 1 serialises them, giving a ratio of about 1) unless
`--endpoint URL` points at a running one.

    python benchmarks/model_server.py [--endpoint http://127.0.0.1:8765/v1] [--max-tokens 128]
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

from rsi.models.client import ChatClient
from rsi.models.embedded import DEFAULT_MODEL_ID, EMBEDDED_ENDPOINT, ensure_server

PROMPT = [{"role": "user", "content": "Write a short story about a robot who learns to paint."}]
TARGET_SINGLE = 30.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(client: ChatClient, model: str, max_tokens: int, n: int) -> tuple[int, float]:
    """(completion tokens, wall seconds) of n identical greedy requests sent at once."""

    def one(_: int) -> int:
        return client.chat(model, PROMPT, max_tokens=max_tokens, temperature=0.0).usage.completion_tokens

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n) as pool:
        tokens = sum(pool.map(one, range(n)))
    return tokens, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", default=None, help="a running server's base URL (default: start one)")
    ap.add_argument("--model", default=DEFAULT_MODEL_ID)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=2, help="best of N for each figure")
    ap.add_argument("--max-batch", type=int, default=None, help="server batch size (default: concurrency)")
    args = ap.parse_args()

    with ExitStack() as stack:
        if args.endpoint:
            base = args.endpoint
        else:
            os.environ["RSI_MODEL_PORT"] = str(_free_port())
            os.environ["RSI_MODEL_MAX_BATCH"] = str(args.max_batch or args.concurrency)
            base, _ = stack.enter_context(ensure_server(EMBEDDED_ENDPOINT))
        client = stack.enter_context(ChatClient(base, timeout=600))
        _run(client, args.model, 8, 1)  # warm-up
        single = max(
            t / s for t, s in (_run(client, args.model, args.max_tokens, 1) for _ in range(args.repeats))
        )
        conc = max(
            t / s
            for t, s in (
                _run(client, args.model, args.max_tokens, args.concurrency) for _ in range(args.repeats)
            )
        )
    print(f"single stream: {single:.1f} tokens/s (target >= {TARGET_SINGLE:.0f})")
    batch = "" if args.endpoint else f", server max batch {args.max_batch or args.concurrency}"
    print(f"{args.concurrency} concurrent: {conc:.1f} tokens/s aggregate{batch}")
    print(f"ratio concurrent/single: {conc / single:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
