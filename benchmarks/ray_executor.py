"""The `ray` executor against `local`, side by side in one run on the same tasks (issue 27).

- `ray_trial_overhead_ratio` (target <= 1.3): the wall time per trial of a job of trivial oracle
  trials (the solution echoes into /app, the test reads it) on a Ray cluster with one worker node of
  one slot, over the same job with the `local` executor at `-n 1`. Both run through `run_job` (the
  code path of `rsi run`), images already built on both daemons; local and ray jobs alternate, and
  the figure is the median of the per-round ratios.
- `ray_two_node_throughput` (target >= 1.8): the wall time of a job of sleep-bound trials (the
  solution sleeps) on one worker node of one slot, over the same job once a second worker node (own
  dockerd, one slot) has joined.

The cluster is started here as the integration tests start it (tests/raycluster.py: `ray start`
head and workers, each worker with its own dockerd, bridge and data root) and stopped afterwards.
Needs root, Docker, the base image and `pip install -e '.[cluster]'`.

    python benchmarks/ray_executor.py [--trials N] [--rounds R] [--sleep S] [--verbose]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _records import Recorder  # noqa: E402

from rsi.core.settings import ExecutorSettings  # noqa: E402
from rsi.loop.context import WorkspaceContext  # noqa: E402
from rsi.loop.init import init_workspace  # noqa: E402
from rsi.loop.run import RunRequest, run_job  # noqa: E402
from rsi.sandbox.base_image import resolve_base_image  # noqa: E402
from tests.raycluster import RayCluster  # noqa: E402
from tests.taskgen import make_tasks  # noqa: E402

OVERHEAD_TARGET = 1.3
THROUGHPUT_TARGET = 1.8


def _job(root: Path, tasks: list[Path], executor: str, address: str | None) -> float:
    """Seconds per trial of one job of `tasks` on `executor` (a fresh context: a fresh store handle)."""
    ctx = WorkspaceContext.open(root)
    ctx.settings = ctx.settings.model_copy(update={"executor": ExecutorSettings(name=executor, address=address)})
    t0 = time.monotonic()
    out = run_job(ctx, RunRequest(paths=tasks, agent="oracle", concurrency=1, executor=executor))
    wall = time.monotonic() - t0
    bad = [t.id for t in out.trials if not t.passed]
    ctx.store.close()
    if out.interrupted or bad:
        raise SystemExit(f"{executor} job {out.job.id} did not pass: {out.reason or bad}")
    return wall / len(out.trials)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=4, help="trials per job")
    ap.add_argument("--rounds", type=int, default=3, help="alternating local/ray rounds for the overhead")
    ap.add_argument("--sleep", type=float, default=5.0, help="seconds the sleep-bound solution sleeps")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="rsi-bench-ray-"))
    root = tmp / "ws"
    init_workspace(root, starter_tasks=False)
    contract = root / "contracts" / "hcp-1.0.yaml"
    contract.write_text(contract.read_text().replace("suites: [suites/starter]", "suites: []"))
    trivial = make_tasks(tmp / "trivial", args.trials, prefix="o")
    sleepy = make_tasks(tmp / "sleepy", 2 * args.trials, prefix="z",
                        solve=f'sleep {args.sleep}; echo ok > "${{SANDBOX_ROOT:-}}/app/out.txt"\n')
    cluster = RayCluster(workers=2)
    rec = Recorder("ray_executor", "Ray executor: overhead and two-node throughput",
                   context="A local Ray cluster (head + worker nodes, each with its own dockerd) against the local "
                           "executor, on trivial oracle tasks (overhead) and sleep-bound ones (throughput).")
    ok = True
    try:
        t = time.monotonic()
        cluster.start(resolve_base_image(None), workers=1)
        print(f"# cluster up in {time.monotonic() - t:.0f}s (head + 1 worker node, 1 slot)", flush=True)
        _job(root, trivial[:1], "local", None)  # warm: the env image on both daemons
        _job(root, trivial[:1], "ray", cluster.address)
        ratios, local_s, ray_s = [], [], []
        for r in range(args.rounds):
            order = ["local", "ray"] if r % 2 == 0 else ["ray", "local"]
            got = {ex: _job(root, trivial, ex, cluster.address if ex == "ray" else None) for ex in order}
            local_s.append(got["local"])
            ray_s.append(got["ray"])
            ratios.append(got["ray"] / got["local"])
            if args.verbose:
                print(f"#   round {r + 1}: local {got['local']:.2f}s/trial, ray {got['ray']:.2f}s/trial", flush=True)
        overhead = statistics.median(ratios)
        ok &= overhead <= OVERHEAD_TARGET
        print(f"ray_trial_overhead_ratio {overhead:.2f} (target <= {OVERHEAD_TARGET}; per trial: ray "
              f"{statistics.median(ray_s):.2f}s, local {statistics.median(local_s):.2f}s, median of {args.rounds} "
              f"rounds of {args.trials} trivial oracle trials)", flush=True)
        rec.add("ray_trial_overhead_ratio", "per-trial time, ray over local", overhead, "x",
                target=f"<= {OVERHEAD_TARGET}", note=f"median of {args.rounds} rounds of {args.trials} trials")

        one = _job(root, sleepy, "ray", cluster.address) * len(sleepy)
        cluster.start_worker(cluster.workers[1])
        from rsi.exec.ray_exec import slot_count

        deadline = time.monotonic() + 60
        while slot_count() < 2 and time.monotonic() < deadline:
            time.sleep(0.5)
        _job(root, trivial[:1], "ray", cluster.address)  # warm the second daemon's env image
        two = _job(root, sleepy, "ray", cluster.address) * len(sleepy)
        speedup = one / two
        ok &= speedup >= THROUGHPUT_TARGET
        print(f"ray_two_node_throughput {speedup:.2f} (target >= {THROUGHPUT_TARGET}; {len(sleepy)} trials sleeping "
              f"{args.sleep:g}s: one node {one:.1f}s, two nodes {two:.1f}s)", flush=True)
        rec.add("ray_two_node_throughput", "throughput, two worker nodes over one", speedup, "x",
                target=f">= {THROUGHPUT_TARGET}", note=f"{len(sleepy)} trials sleeping {args.sleep:g} s")
    finally:
        import ray

        if ray.is_initialized():
            ray.shutdown()
        cluster.stop()
    rec.write()
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
