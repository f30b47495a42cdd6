"""The recording gateway's cost, and an external harness's throughput beside rsi's own loop (issue 39).

Figures (each measured side by side in the same run):
- `gateway_added_ms_stub`: median added latency per call on loopback, gateway vs a direct call, against a stub
  endpoint that answers at once with a realistic completion body (prompt/completion token ids and log-probs):
  the gateway's own cost with no model noise. Calls alternate direct / through the gateway. Target <= 5 ms.
- `gateway_added_ms_model` (with --model): the same against the embedded SmolLM2 server, max_tokens 1.
- `trials_per_hour_external` / `trials_per_hour_builtin` and their ratio (with --trials): `rsi run` of the same
  tasks with `--harness mini-swe` (mini-swe-agent through the gateway) and `--harness default` (rsi's own loop),
  in Docker on the embedded model, one after the other in one fresh workspace; turns and tokens per trial beside
  them, since a harness that stops sooner runs more trials an hour.

    python benchmarks/gateway.py                      # the stub latency only (seconds)
    python benchmarks/gateway.py --model --trials     # all figures (Docker, the embedded model; minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _records import Recorder  # noqa: E402

from rsi.models.gateway import Gateway, SessionPolicy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODEL = "SmolLM2-135M-Instruct"


def _messages(turns: int = 3) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": "You are a shell agent. " * 20},
            {"role": "user", "content": "Task: write hello to /app/hello.txt. " * 10}]
    for i in range(turns):
        msgs += [{"role": "assistant", "content": f"```bash\necho step {i} > /app/x.txt\n```"},
                 {"role": "user", "content": "output line\n" * 40 + "[exit code 0]"}]
    return msgs


class _Stub(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    body = b""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        return

    def setup(self) -> None:
        super().setup()
        import socket

        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


def _stub_body() -> bytes:
    n_prompt, n_out = 600, 40
    return json.dumps({
        "id": "x", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "```bash\nls -la /app\n```"},
                     "finish_reason": "stop", "stop_reason": None, "token_ids": list(range(n_out)),
                     "logprobs": {"content": [{"token": "t", "logprob": -0.5, "bytes": [116], "top_logprobs": []}]
                                  * n_out}}],
        "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out},
        "prompt_token_ids": list(range(n_prompt))}).encode()


def side_by_side(direct_url: str, n: int, body: dict[str, Any]) -> tuple[list[float], list[float]]:
    """Alternate a direct call and one through a fresh gateway session; seconds per call, each."""
    direct: list[float] = []
    via: list[float] = []
    with Gateway() as gw, httpx.Client(timeout=300) as client:
        sess = gw.open_session(direct_url, SessionPolicy(model=MODEL, max_tokens=body.get("max_tokens") or 256))
        for url in (direct_url, sess.base_url):  # warm both connections
            client.post(f"{url}/chat/completions", json=body)
        for i in range(n):
            order = [(direct_url, direct), (sess.base_url, via)]
            for url, out in order if i % 2 == 0 else order[::-1]:
                t = time.perf_counter()
                r = client.post(f"{url}/chat/completions", json=body)
                out.append(time.perf_counter() - t)
                assert r.status_code == 200, r.text[:300]
    return direct, via


def _ms(x: float) -> float:
    return round(x * 1000, 3)


def stub_latency(rec: Recorder, n: int) -> None:
    _Stub.body = _stub_body()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
        body = {"model": MODEL, "messages": _messages(), "max_tokens": 192, "temperature": 0.7}
        direct, via = side_by_side(url, n, body)
    finally:
        srv.shutdown()
    d, g = statistics.median(direct), statistics.median(via)
    rec.add("direct_ms_stub", "direct call to a stub endpoint, median", _ms(d), "ms", echo=True)
    rec.add("gateway_ms_stub", "the same call through the gateway, median", _ms(g), "ms", echo=True)
    rec.add("gateway_added_ms_stub", "gateway's added latency per call (stub endpoint, loopback), median",
            _ms(g - d), "ms", target="<= 5", echo=True,
            note=f"{n} calls each, alternating; p90 added "
                 f"{_ms(statistics.quantiles(via, n=10)[-1] - statistics.quantiles(direct, n=10)[-1])} ms; "
                 f"request {len(json.dumps(body))} B, response {len(_Stub.body)} B")


def model_latency(rec: Recorder, n: int, port: int) -> None:
    url = f"http://127.0.0.1:{port}/v1"
    body = {"model": MODEL, "messages": _messages(1), "max_tokens": 1, "temperature": 0.0,
            "return_token_ids": True, "logprobs": True}
    direct, via = side_by_side(url, n, body)
    d, g = statistics.median(direct), statistics.median(via)
    rec.add("direct_ms_model", "direct call to the embedded server (max_tokens 1), median", _ms(d), "ms", echo=True)
    rec.add("gateway_added_ms_model", "gateway's added latency per call (embedded server), median", _ms(g - d),
            "ms", target="<= 5", echo=True, note=f"{n} calls each, alternating; model time dominates the noise")


def _serve(port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rsi.cli.model", "serve", "--port", str(port)],
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"model server exited: {log.read_text()[-2000:]}")
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit("model server did not start")


def throughput(rec: Recorder, port: int, tasks: list[str], k: int, n: int) -> None:
    env = dict(os.environ, RSI_MODEL_PORT=str(port), HF_HUB_OFFLINE="1")
    with tempfile.TemporaryDirectory(prefix="rsi-gw-bench-") as tmp:
        ws = Path(tmp) / "ws"
        subprocess.run([sys.executable, "-m", "rsi", "init", str(ws)], env=env, check=True, capture_output=True)
        out: dict[str, dict[str, float]] = {}
        for harness in ("default", "mini-swe"):  # rsi's own loop first, then the external harness
            t = time.monotonic()
            r = subprocess.run([sys.executable, "-m", "rsi", "-w", str(ws), "run",
                                *[str(ws / "tasks" / x) for x in tasks], "--harness", harness, "-k", str(k),
                                "-n", str(n), "--json"], env=env, capture_output=True, text=True, timeout=3600)
            wall = time.monotonic() - t
            if r.returncode != 0:
                raise SystemExit(f"rsi run --harness {harness} failed: {r.stderr[-2000:]}")
            job = json.loads(r.stdout)["job"]
            with sqlite3.connect(ws / ".rsi" / "rsi.db") as db:
                rows = db.execute("SELECT turns, prompt_tokens + completion_tokens, passed, t_agent FROM trials "
                                  "WHERE job_id = ?", (job,)).fetchall()
            out[harness] = {"trials": len(rows), "wall": wall, "per_hour": len(rows) / wall * 3600,
                            "turns": statistics.mean(r[0] for r in rows), "tokens": statistics.mean(r[1] for r in rows),
                            "passed": sum(r[2] for r in rows), "agent_sec": statistics.mean(r[3] for r in rows)}
    b, e = out["default"], out["mini-swe"]
    for key, row in (("builtin", b), ("external", e)):
        rec.add(f"trials_per_hour_{key}", f"trials/hour, {'rsi loop (default)' if key == 'builtin' else 'mini-swe'}",
                round(row["per_hour"], 1), "trials/h", echo=True,
                note=f"{row['trials']} trials in {row['wall']:.0f} s; {row['turns']:.1f} turns, "
                     f"{row['tokens']:.0f} tokens, {row['agent_sec']:.1f} s agent time per trial; "
                     f"{row['passed']} passed")
    rec.add("trials_per_hour_ratio", "trials/hour, external / builtin", round(e["per_hour"] / b["per_hour"], 3), "x",
            echo=True, note=f"tasks {', '.join(tasks)}, k={k}, {n} at a time")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=400, help="calls each way against the stub")
    ap.add_argument("--model", action="store_true", help="also measure against the embedded server")
    ap.add_argument("--model-calls", type=int, default=40)
    ap.add_argument("--trials", action="store_true", help="also measure trials/hour, external vs builtin")
    ap.add_argument("--tasks", default="hello-file,append-line,count-lines,csv-sum")
    ap.add_argument("-k", type=int, default=2)
    ap.add_argument("-n", type=int, default=2)
    ap.add_argument("--port", type=int, default=8791)
    args = ap.parse_args()
    rec = Recorder("gateway", "Recording gateway: added latency; external harness throughput",
                   context="loopback; one process per side; calls alternate direct / through the gateway")
    stub_latency(rec, args.calls)
    if args.model or args.trials:
        proc = _serve(args.port, Path(tempfile.gettempdir()) / "rsi-gw-bench-serve.log")
        try:
            if args.model:
                model_latency(rec, args.model_calls, args.port)
            if args.trials:
                throughput(rec, args.port, args.tasks.split(","), args.k, args.n)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    path = rec.write()
    if path is not None:
        print(f"record: {path}")


if __name__ == "__main__":
    main()
