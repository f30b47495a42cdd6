"""Harness-trial throughput of the embedded model: today's engine path against everything on, in one run.

The starter tasks x K attempts, agent `harness`, temperature 0 with a fixed seed, `-n N`, run twice
in fresh workspaces:

- **before**: the engine as it was before issue 8 (`--baseline ref:COMMIT`, default the last commit
  before it: its `rsi` package is exported from git and its server started), or this checkout's
  server with the prefix cache off and one request at a time (`--baseline off`); the harness config
  without the stop rule;
- **after**: this checkout's server as `rsi model serve` sizes itself, the stop rule on.

Prints trials per hour for each and their ratio (target >= 3), the prefix-cache hit share (cached /
prompt tokens over all calls) next to its bound (the share of each prompt the trial itself sent
before: prompt + completion of the previous turn; a first turn counts as all new), completion tokens
per turn and pass@1 of both runs. Needs Docker, the base image and the embedded model.

    python benchmarks/harness_throughput.py                 # 16 tasks x 2, -n 2 (about 30 min on 2 cores)
    python benchmarks/harness_throughput.py --tasks 6       # a reduced task set
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _records import Recorder  # noqa: E402

from rsi.loop.context import WorkspaceContext  # noqa: E402
from rsi.loop.init import init_workspace  # noqa: E402
from rsi.loop.run import RunRequest, run_job  # noqa: E402
from rsi.models.client import ChatClient  # noqa: E402
from rsi.store.paths import Workspace  # noqa: E402

BASELINE_REF = "bb4a936"  # main before issue 8: HF generate, http.server, no prefix cache
TARGET = 3.0


@dataclass
class RunFigures:
    label: str
    wall: float
    trials: int
    passed: int
    calls: int
    prompt: int
    completion: int
    cached: int
    bound: int
    errors: dict[str, int]

    @property
    def per_hour(self) -> float:
        return self.trials / self.wall * 3600

    @property
    def pass1(self) -> float:
        return self.passed / self.trials if self.trials else 0.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_server(port: int, pythonpath: str, args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=pythonpath, RSI_MODEL_PORT=str(port))
    for var in ("RSI_MODEL_MAX_BATCH", "RSI_MODEL_PREFIX_CACHE_MB", "RSI_MODEL_KERNELS", "RSI_MODEL_THREADS"):
        env.pop(var, None)
    cmd = [sys.executable, "-m", "rsi.cli.model", "serve", "--port", str(port), *args]
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                cwd=tempfile.gettempdir())
    with ChatClient(f"http://127.0.0.1:{port}/v1", max_attempts=1) as probe:
        deadline = time.monotonic() + 600
        while not probe.healthy():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"model server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.5)
    return proc


def _stop_server(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, 15)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, 9)


def _config(ws: Path, *, stop: bool, seed: int) -> Path:
    raw = yaml.safe_load((ROOT / "harness_configs" / "default.yaml").read_text())
    raw["name"] = "bench-stop" if stop else "bench-nostop"
    raw["sampling"]["temperature"] = 0.0
    raw["sampling"]["seed"] = seed
    if not stop:
        raw["sampling"].pop("stop", None)
    path = ws / "harness_configs" / f"{raw['name']}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _per_call(trial_dir: Path) -> list[tuple[int, int, int]]:
    """(prompt, completion, cached) tokens of each model call of one trial, from its trajectory."""
    path = trial_dir / "trajectory.json"
    if not path.is_file():
        return []
    steps = json.loads(path.read_text()).get("steps") or []
    out = []
    for s in steps:
        m = s.get("metrics") or {}
        if s.get("source") == "agent" and m:
            out.append((int(m.get("prompt_tokens") or 0), int(m.get("completion_tokens") or 0),
                        int(m.get("cached_tokens") or 0)))
    return out


def run_arm(label: str, work: Path, tasks: list[Path], *, server_path: str, server_args: list[str], stop: bool,
            attempts: int, concurrency: int, seed: int) -> RunFigures:
    ws = work / label
    init_workspace(ws, starter_tasks=False)
    cfg = _config(ws, stop=stop, seed=seed)
    port = _free_port()
    proc = _start_server(port, server_path, server_args, work / f"{label}-server.log")
    os.environ["RSI_MODEL_PORT"] = str(port)  # the job's ensure_server finds this server and uses it
    try:
        ctx = WorkspaceContext(Workspace(ws))
        req = RunRequest(paths=tasks, agent="harness", attempts=attempts, concurrency=concurrency, configs=[cfg])
        t0 = time.perf_counter()
        out = run_job(ctx, req)
        wall = time.perf_counter() - t0
    finally:
        _stop_server(proc)
    calls = prompt = completion = cached = bound = 0
    errors: dict[str, int] = {}
    for t in out.trials:
        if t.error_type:
            errors[t.error_type] = errors.get(t.error_type, 0) + 1
        prev = 0
        for p, c, k in _per_call(Path(t.trial_dir)):
            calls, prompt, completion, cached = calls + 1, prompt + p, completion + c, cached + k
            bound += min(p, prev)
            prev = p + c
    return RunFigures(label, wall, len(out.trials), sum(1 for t in out.trials if t.passed), calls, prompt,
                      completion, cached, bound, errors)


def _baseline_tree(ref: str, work: Path) -> str:
    """The `rsi` package as of `ref`, exported to a folder (for PYTHONPATH)."""
    dest = work / f"rsi-{ref}"
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "rsi"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return str(dest)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=0, help="only the first N starter tasks (default: all)")
    ap.add_argument("-k", "--attempts", type=int, default=2)
    ap.add_argument("-n", "--concurrency", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--baseline", default=f"ref:{BASELINE_REF}",
                    help="ref:COMMIT (that commit's server) or off (this server: cache, batching and speculation off)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary workspaces")
    args = ap.parse_args()

    tasks = sorted(p for p in (ROOT / "tasks").iterdir() if (p / "task.toml").is_file())
    if args.tasks:
        tasks = tasks[: args.tasks]
    work = Path(tempfile.mkdtemp(prefix="rsi-harness-throughput-"))
    try:
        if args.baseline.startswith("ref:"):
            before_path, before_args = _baseline_tree(args.baseline[4:], work), []
        elif args.baseline == "off":
            before_path, before_args = str(ROOT), ["--prefix-cache-mb", "0", "--max-batch", "1", "--speculate", "0"]
        else:
            raise SystemExit("--baseline: ref:COMMIT or off")
        common = dict(attempts=args.attempts, concurrency=args.concurrency, seed=args.seed)
        before = run_arm("before", work, tasks, server_path=before_path, server_args=before_args, stop=False,
                         **common)  # type: ignore[arg-type]
        after = run_arm("after", work, tasks, server_path=str(ROOT), server_args=[], stop=True,
                        **common)  # type: ignore[arg-type]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"workspaces kept in {work}")
    print(f"tasks {len(tasks)} x {args.attempts} attempts, -n {args.concurrency}, temperature 0, seed {args.seed}; "
          f"before = {args.baseline}")
    for r in (before, after):
        turns = r.completion / r.calls if r.calls else 0.0
        print(f"{r.label}: {r.trials} trials in {r.wall:.0f} s = {r.per_hour:.0f} trials/h, pass@1 {r.pass1:.3f}, "
              f"{r.calls} calls, {turns:.1f} completion tokens/turn, {r.prompt} prompt tokens"
              + (f", errors {r.errors}" if r.errors else ""))
    ratio = after.per_hour / before.per_hour if before.per_hour else 0.0
    print(f"throughput ratio after/before: {ratio:.2f}x (target >= {TARGET:.0f}x)")
    share = after.cached / after.prompt if after.prompt else 0.0
    bound = after.bound / after.prompt if after.prompt else 0.0
    print(f"prefix-cache hit share: {share:.3f} (cached {after.cached} / prompt {after.prompt} tokens); "
          f"within-trial bound {bound:.3f} (first turns counted as all new, so the cross-trial shared head can "
          "lift the share above it)")
    print(f"pass@1: before {before.pass1:.3f}, after {after.pass1:.3f}")
    rec = Recorder("harness_throughput", "Harness trials per hour (real model, Docker)",
                   context=f"{len(tasks)} starter tasks x {args.attempts} attempts, -n {args.concurrency}, "
                           f"temperature 0; before = {args.baseline}, run in the same process.")
    rec.add("trials_per_hour", "trials per hour, rsi's own loop", after.per_hour, "trials/h",
            compare={"before": before.per_hour})
    rec.add("throughput_ratio", "throughput after / before", ratio, "x", target=f">= {TARGET:g}")
    rec.add("prefix_cache_share", "prefix-cache hit share", share, note=f"within-trial bound {bound:.3f}")
    rec.add("pass_at_1", "pass@1", after.pass1, compare={"before": before.pass1})
    rec.write()
    return 0 if ratio >= TARGET and after.pass1 >= before.pass1 else 1


if __name__ == "__main__":
    sys.exit(main())
