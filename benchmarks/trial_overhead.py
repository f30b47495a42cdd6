"""P1, P2, P6, P7 — what rsi's trial machinery costs on top of Docker itself.

- P1 trial overhead: median wall time of one oracle trial of a trivial task run through rsi's
  Python API (`rsi.exec.trial.run_trial`, in-process: no Python start-up, image already built),
  divided by the median of the same container operations done with the raw `docker` CLI (run,
  cp solution + exec solve.sh, commit, run from the snapshot, cp tests + exec test.sh, cp reward
  out, rm -f both, rmi snapshot). rsi and raw runs alternate so machine noise hits both alike.
- P2 concurrency: throughput of a job at `-n 4` over the same job at `-n 1`; the task's solution
  sleeps 3 s and the job runs it K=8 times (`rsi.loop.run.run_job`, the code path of `rsi run`).
- P7 a fresh environment's first trial: median wall time of an oracle trial whose environment is new (a file
  of unique content copied in, so its image does not exist yet: what every discover candidate costs), with the
  build-free path (the base image, the files put in, one commit) over the same trials with `docker build`.
  Alternated, same task shape; also prints each path's median image seconds (`timings.build`).
- P6 image reuse: how many environment images the second oracle run of the starter tasks builds
  (counted by wrapping the provider's `ensure_image`, and cross-checked against the image ids of
  the tasks' tags before and after the run).

Everything runs in a temporary workspace, so the repository's own `.rsi/` is never touched.
Needs a Docker daemon and the base image (`rsi sandbox build-base`). Prints one line per figure;
each ratio is against a baseline measured in the same run.

    python benchmarks/trial_overhead.py [--quick] [--only P1,P2,P6,P7] [--verbose]
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _records import Recorder  # noqa: E402

from rsi.core.arm import Arm, TrialSpec, make_trial_id  # noqa: E402
from rsi.core.trial import TrialResult  # noqa: E402
from rsi.exec.trial import TrialEnv, run_trial, sandbox_spec  # noqa: E402
from rsi.harness.builtin import load_agents  # noqa: E402
from rsi.loop.context import WorkspaceContext  # noqa: E402
from rsi.loop.init import init_workspace  # noqa: E402
from rsi.loop.run import RunRequest, run_job  # noqa: E402
from rsi.sandbox.base import ImageRef, SandboxProvider  # noqa: E402
from rsi.sandbox.base_image import resolve_base_image  # noqa: E402
from rsi.sandbox.docker import env_image_tag  # noqa: E402
from rsi.sandbox.registry import get_provider  # noqa: E402
from rsi.store.files import load_task  # noqa: E402
from rsi.store.paths import Workspace  # noqa: E402

P1_TARGET = 1.15
REC = Recorder("trial_overhead", "P1/P2/P6 trial overhead, concurrency, image reuse")  # replaced in main()
P2_TARGET = 3.5
P6_TARGET = 0
PHASES = ("build", "start", "agent", "snapshot", "verify")

TASK_TOML = """version = "1.0"

[metadata]
author_name = "rsi-bench"
difficulty = "easy"
category = "benchmark"

[metadata.rsi]
family = "bench"
difficulty = 1
split = "train"

[agent]
timeout_sec = 120.0

[verifier]
timeout_sec = 60.0

[environment]
build_timeout_sec = 300.0
cpus = 1
memory_mb = 512
network_mode = "none"
"""

DOCKERFILE = """ARG BASE_IMAGE=rsi-base:bookworm
FROM ${BASE_IMAGE}
WORKDIR /app
"""

TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /app/out.txt 2>/dev/null)" = "done" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


def make_task(parent: Path, name: str, sleep_s: float = 0.0) -> Path:
    """A trivial Harbor task: the solution (after an optional sleep) echoes into /app; the test checks it."""
    d = parent / name
    for sub in ("environment", "solution", "tests"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "task.toml").write_text(TASK_TOML)
    (d / "instruction.md").write_text("Write the word `done` into /app/out.txt.\n")
    (d / "environment" / "Dockerfile").write_text(DOCKERFILE)
    pause = f"sleep {sleep_s:g}\n" if sleep_s else ""
    (d / "solution" / "solve.sh").write_text(f"#!/bin/bash\nset -e\n{pause}echo done > /app/out.txt\n")
    (d / "tests" / "test.sh").write_text(TEST_SH)
    return d


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


# ---------------------------------------------------------------- P1


@dataclass
class Bench:
    """A temporary workspace, the docker provider and a TrialEnv for in-process oracle trials."""

    root: Path
    ctx: WorkspaceContext
    provider: SandboxProvider
    env: TrialEnv
    image_built: list[bool] = field(default_factory=list)

    @classmethod
    def open(cls, root: Path, *, starter_tasks: bool = False) -> Bench:
        init_workspace(root, starter_tasks=starter_tasks)
        ctx = WorkspaceContext(Workspace(root))
        load_agents()
        provider = get_provider("docker")
        provider.ping()
        base = resolve_base_image(ctx.settings.sandbox.base_image)
        base_id = getattr(provider, "image_id", lambda _t: None)(base)
        if base_id is None:
            raise SystemExit(f"base image {base} is missing; build it with `rsi sandbox build-base`")
        env = TrialEnv(provider=provider, contract=ctx.contract, base_image=base, base_image_id=base_id)
        bench = cls(root, ctx, provider, env)
        bench.count_builds(provider)
        return bench

    def count_builds(self, provider: SandboxProvider) -> None:
        """Record `ImageRef.built` of every `ensure_image` call on this provider instance."""
        inner = provider.ensure_image

        def counted(*args: Any, **kwargs: Any) -> ImageRef:
            ref = inner(*args, **kwargs)
            self.image_built.append(ref.built)
            return ref

        provider.ensure_image = counted  # type: ignore[method-assign]


def rsi_trial(bench: Bench, task_dir: Path, i: int) -> tuple[float, TrialResult]:
    """One oracle trial through `run_trial`; (wall seconds around the call, its result)."""
    job = f"bench-p1-{secrets.token_hex(3)}"
    spec = _spec(bench, task_dir, job, i)
    t = time.perf_counter()
    result = run_trial(spec, bench.env)
    return time.perf_counter() - t, result


ORACLE = Arm(agent="oracle", generation="gen-0000")


def _spec(bench: Bench, task_dir: Path, job: str, i: int) -> TrialSpec:
    task = load_task(task_dir)
    return TrialSpec(
        trial_id=make_trial_id(job, task.name, ORACLE, i + 1), job_id=job, task_name=task.name,
        task_digest=task.digest, task_path=task.path, arm=ORACLE, attempt=i + 1,
        trial_dir=str(bench.root / ".rsi" / "jobs" / job / f"{task.name}.{i}"),
    )


def docker(*args: str, check: bool = True) -> str:
    res = subprocess.run(["docker", *args], capture_output=True, text=True)
    if check and res.returncode != 0:
        raise RuntimeError(f"docker {' '.join(args)}: {res.stderr.strip()}")
    return res.stdout.strip()


def raw_trial(
    image: str, run_flags: list[str], task_dir: Path, out_dir: Path
) -> tuple[float, dict[str, float]]:
    """The container operations of one separate-mode trial with the docker CLI; (wall s, per step s)."""
    steps: dict[str, float] = {}
    snap = f"rsi-bench-raw:{secrets.token_hex(6)}"
    ids: list[str] = []

    def step(name: str, fn: Callable[[], str]) -> str:
        t = time.perf_counter()
        out = fn()
        steps[name] = steps.get(name, 0.0) + time.perf_counter() - t
        return out

    t0 = time.perf_counter()
    try:
        a = step("start", lambda: docker("run", "-d", *run_flags, image, "sleep", "infinity"))
        ids.append(a)
        step("agent", lambda: docker("cp", str(task_dir / "solution"), f"{a}:/solution"))
        step("agent", lambda: docker("exec", "-w", "/app", a, "bash", "/solution/solve.sh"))
        step("snapshot", lambda: docker("commit", a, snap))
        v = step("snapshot", lambda: docker("run", "-d", *run_flags, snap, "sleep", "infinity"))
        ids.append(v)
        step("verify", lambda: docker("cp", str(task_dir / "tests"), f"{v}:/tests"))
        step("verify", lambda: docker("exec", "-w", "/app", v, "bash", "/tests/test.sh"))
        step("verify", lambda: docker("cp", f"{v}:/logs/verifier/reward.txt", str(out_dir / "reward.txt")))
        reward = (out_dir / "reward.txt").read_text().strip()
        if reward != "1":
            raise RuntimeError(f"raw docker trial got reward {reward!r}, expected 1")
    finally:
        if ids:
            step("cleanup", lambda: docker("rm", "-f", *ids))
        step("cleanup", lambda: docker("rmi", "--force", snap, check=False))
    return time.perf_counter() - t0, steps


def raw_setup(bench: Bench, task_dir: Path) -> tuple[str, list[str]]:
    """The env image rsi uses for the task (already built) and `docker run` flags with rsi's limits."""
    image = bench.provider.ensure_image(  # same tag rsi used; a reuse, not a build
        task_dir / "environment",
        _env_digest(bench, task_dir),
        build_args={"BASE_IMAGE": bench.env.base_image},
        timeout=300,
    ).tag
    # The limits rsi gives the task's containers (sandbox_spec), so both sides start alike.
    spec = sandbox_spec(bench.env.plan(_spec(bench, task_dir, "x", 0)), image, "trial")
    flags = [
        "--network",
        "none",
        "--init",
        "--cpus",
        f"{spec.cpus:g}",
        "--memory",
        f"{spec.memory_mb}m",
        "--pids-limit",
        str(spec.pids),
        "-w",
        spec.workdir,
    ]
    return image, flags


def p1(tmp: Path, reps: int, verbose: bool) -> bool:
    bench = Bench.open(tmp / "ws-p1")
    task_dir = make_task(tmp / "p1-tasks", "echo-app")
    warm_s, warm = rsi_trial(bench, task_dir, 0)  # builds the env image once; not measured
    if not warm.passed:
        raise SystemExit(f"P1: warm-up oracle trial did not pass: {warm.error_type} {warm.error_message}")
    image, run_flags = raw_setup(bench, task_dir)
    raw_out = tmp / "raw-out"
    raw_out.mkdir()
    raw_trial(image, run_flags, task_dir, raw_out)  # warm the CLI's page cache too

    rsi_wall: list[float] = []
    rsi_total: list[float] = []
    rsi_phase: dict[str, list[float]] = {p: [] for p in PHASES}
    raw_wall: list[float] = []
    raw_phase: dict[str, list[float]] = {}
    for i in range(1, reps + 1):
        # Alternate which side goes first so a slow spell does not favour one side.
        order = ("rsi", "raw") if i % 2 else ("raw", "rsi")
        for side in order:
            if side == "rsi":
                wall, res = rsi_trial(bench, task_dir, i)
                if not res.passed:
                    raise SystemExit(f"P1: rsi trial {i} did not pass: {res.error_type} {res.error_message}")
                rsi_wall.append(wall)
                rsi_total.append(res.timings.total)
                for p in PHASES:
                    rsi_phase[p].append(getattr(res.timings, p))
            else:
                wall, steps = raw_trial(image, run_flags, task_dir, raw_out)
                raw_wall.append(wall)
                for k, v in steps.items():
                    raw_phase.setdefault(k, []).append(v)

    ratio = median(rsi_wall) / median(raw_wall)
    ok = ratio <= P1_TARGET
    REC.add("P1_trial_overhead_ratio", f"P1 oracle trial wall time over the raw docker CLI's (median of {reps})",
            ratio, "x", target=f"<= {P1_TARGET}", note=f"rsi {median(rsi_wall):.3f} s, raw {median(raw_wall):.3f} s")
    print(
        f"P1 trial_overhead_ratio={ratio:.2f} (rsi median {median(rsi_wall):.3f}s "
        f"[timings.total median {median(rsi_total):.3f}s], raw docker median {median(raw_wall):.3f}s, "
        f"n={reps}) target<={P1_TARGET} {verdict(ok)}",
        flush=True,
    )
    if verbose:
        print("   rsi phases (median s): " + ", ".join(f"{p}={median(v):.3f}" for p, v in rsi_phase.items()))
        print(
            "   rsi wall - timings.total (median s): "
            f"{median([w - t for w, t in zip(rsi_wall, rsi_total, strict=True)]):.3f}"
        )
        print("   raw steps  (median s): " + ", ".join(f"{p}={median(v):.3f}" for p, v in raw_phase.items()))
        pairs = [a / b for a, b in zip(rsi_wall, raw_wall, strict=True)]
        listed = ", ".join(f"{x:.2f}" for x in pairs)
        print(f"   median of per-round rsi/raw ratios: {median(pairs):.2f} (all: {listed})")
        print(f"   warm-up rsi trial (incl. any image build): {warm_s:.3f}s")
    return ok


def _env_digest(bench: Bench, task_dir: Path) -> str:
    from rsi.core.digest import merge_digests

    task = load_task(task_dir)
    return merge_digests({"env": task.env_digest, "base": bench.env.base_image_id or bench.env.base_image})


# ---------------------------------------------------------------- P2


def timed_job(ctx: WorkspaceContext, req: RunRequest, provider: SandboxProvider) -> tuple[float, int, int]:
    """(wall seconds, trials passed, trials run) of one `run_job`."""
    t = time.perf_counter()
    out = run_job(ctx, req, provider=provider)
    wall = time.perf_counter() - t
    return wall, sum(1 for r in out.trials if r.passed), len(out.trials)


def raw_parallel(image: str, flags: list[str], task_dir: Path, out: Path, trials: int, n: int) -> float:
    """Wall seconds for `trials` raw-docker trials, `n` at a time on threads."""
    dirs = [out / f"raw-{n}-{i}" for i in range(trials)]
    for d in dirs:
        d.mkdir(parents=True)
    t = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n) as pool:
        list(pool.map(lambda d: raw_trial(image, flags, task_dir, d), dirs))
    return time.perf_counter() - t


def p2(tmp: Path, trials: int, with_raw: bool, verbose: bool) -> bool:
    bench = Bench.open(tmp / "ws-p2")
    task_dir = make_task(tmp / "p2-tasks", "sleep-3s", sleep_s=3.0)
    warm_s, warm = rsi_trial(bench, task_dir, 0)  # builds the env image outside the timed jobs
    if not warm.passed:
        raise SystemExit(f"P2: warm-up oracle trial did not pass: {warm.error_type} {warm.error_message}")
    walls: dict[int, float] = {}
    raw: dict[int, float] = {}
    image, flags = raw_setup(bench, task_dir)
    for n in (1, 4):
        req = RunRequest(paths=[task_dir], agent="oracle", attempts=trials, concurrency=n)
        wall, passed, total = timed_job(bench.ctx, req, bench.provider)
        if passed != total:
            raise SystemExit(f"P2: -n {n}: only {passed}/{total} oracle trials passed")
        walls[n] = wall
        if verbose:
            print(f"   rsi -n {n}: {total} trials in {wall:.2f}s ({total / wall:.3f} trials/s)")
        if with_raw:
            # What the machine itself allows: the same trials with the docker CLI, n threads.
            raw[n] = raw_parallel(image, flags, task_dir, tmp / "p2-raw", trials, n)
            if verbose:
                print(f"   raw docker {n} at a time: {trials} trials in {raw[n]:.2f}s")
    ratio = walls[1] / walls[4]
    ok = ratio >= P2_TARGET
    REC.add("P2_concurrency_speedup", f"P2 -n 4 over -n 1 ({trials} trials of a 3 s solution)", ratio, "x",
            target=f">= {P2_TARGET}",
            compare={"raw docker CLI 4 vs 1": raw[1] / raw[4]} if raw else None)
    ceiling = f", raw docker CLI 4-vs-1 speedup on this machine {raw[1] / raw[4]:.2f}" if raw else ""
    print(
        f"P2 concurrency_speedup={ratio:.2f} (-n 4: {trials / walls[4]:.3f} trials/s in {walls[4]:.2f}s, "
        f"-n 1: {trials / walls[1]:.3f} trials/s in {walls[1]:.2f}s, "
        f"{trials} trials of a 3 s solution{ceiling}) "
        f"target>={P2_TARGET} {verdict(ok)}",
        flush=True,
    )
    return ok


# ---------------------------------------------------------------- P6


def env_image_ids() -> dict[str, str]:
    """tag -> image id of every local rsi environment image."""
    out = docker("images", "--filter", "label=rsi.kind=env", "--format", "{{.Repository}}:{{.Tag}} {{.ID}}")
    pairs = (line.split() for line in out.splitlines() if line.strip())
    return {tag: iid for tag, iid in pairs}


def p6(tmp: Path, quick: bool, verbose: bool) -> bool:
    bench = Bench.open(tmp / "ws-p6", starter_tasks=True)
    tasks_dir = bench.ctx.ws.tasks_dir
    paths = [tasks_dir]
    if quick:
        paths = sorted(p for p in tasks_dir.iterdir() if (p / "task.toml").is_file())[:4]
    req = RunRequest(paths=paths, agent="oracle", attempts=1, concurrency=2)
    first_wall, first_pass, first_total = timed_job(bench.ctx, req, bench.provider)
    first_built = sum(bench.image_built)
    bench.image_built.clear()
    before = env_image_ids()
    second_wall, second_pass, second_total = timed_job(bench.ctx, req, bench.provider)
    after = env_image_ids()
    built = sum(bench.image_built)
    calls = len(bench.image_built)
    # Tags whose image id appeared or changed during the second run (other work on a shared
    # daemon may build images of its own; those carry other tags and are not counted here).
    changed = sorted(t for t in after if before.get(t) != after[t])
    mine = [t for t in changed if t in _task_tags(bench, paths)]
    ok = built == P6_TARGET and not mine
    REC.add("P6_images_built_second_run", "P6 env images built on a second run of the same tasks", built,
            target=f"== {P6_TARGET}", met=ok, note=f"{first_total} tasks; first run built {first_built}")
    print(
        f"P6 images_built_second_run={built} (ensure_image calls {calls}, "
        f"new/changed env image ids {len(mine)}; "
        f"first run built {first_built}, {first_total} tasks, passed {first_pass}/{first_total} then "
        f"{second_pass}/{second_total}) target={P6_TARGET} {verdict(ok)}",
        flush=True,
    )
    if verbose:
        print(f"   first run {first_wall:.2f}s, second run {second_wall:.2f}s")
    return ok


def _task_tags(bench: Bench, paths: list[Path]) -> set[str]:
    from rsi.store.files import find_task_dirs

    return {env_image_tag(_env_digest(bench, d)) for d in find_task_dirs(paths)}


# ---------------------------------------------------------------- main


# ---------------------------------------------------------------- P7


def p7(tmp: Path, reps: int, verbose: bool) -> bool:
    from rsi.sandbox.docker import DockerSandboxProvider

    bench = Bench.open(tmp / "ws-p7")
    envs = {how: TrialEnv(provider=DockerSandboxProvider(build_free=how == "files"), contract=bench.ctx.contract,
                          base_image=bench.env.base_image, base_image_id=bench.env.base_image_id)
            for how in ("files", "build")}
    wall: dict[str, list[float]] = {"files": [], "build": []}
    image: dict[str, list[float]] = {"files": [], "build": []}
    made: list[str] = []
    try:
        for i in range(reps + 1):
            for how in (("files", "build") if i % 2 else ("build", "files")):
                d = make_task(tmp / "p7-tasks", f"fresh-{how}-{i}")
                (d / "environment" / "input.txt").write_text(f"{how} {i} {secrets.token_hex(8)}\n")
                (d / "environment" / "Dockerfile").write_text(DOCKERFILE + "COPY input.txt /app/input.txt\n")
                spec = _spec(bench, d, f"bench-p7-{secrets.token_hex(3)}", i)
                t = time.perf_counter()
                res = run_trial(spec, envs[how])
                w = time.perf_counter() - t
                made.append(_env_digest(bench, d))
                if not res.passed:
                    raise SystemExit(f"P7: {how} trial {i} did not pass: {res.error_type} {res.error_message}")
                if i:  # the first round warms both paths' caches
                    wall[how].append(w)
                    image[how].append(res.timings.build)
    finally:
        for digest in made:
            bench.provider.remove_image(env_image_tag(digest))
    ratio = median(wall["files"]) / median(wall["build"])
    REC.add("P7_fresh_env_trial_ratio",
            f"P7 a fresh environment's oracle trial, build-free over docker build (median of {reps} each)",
            ratio, "x", note=f"files {median(wall['files']):.3f} s (image {median(image['files']):.3f} s), "
                             f"build {median(wall['build']):.3f} s (image {median(image['build']):.3f} s)")
    print(f"P7 fresh_env_trial_ratio={ratio:.2f} (build-free median {median(wall['files']):.3f}s, image "
          f"{median(image['files']):.3f}s; docker build median {median(wall['build']):.3f}s, image "
          f"{median(image['build']):.3f}s; n={reps})", flush=True)
    if verbose:
        print("   build-free walls: " + ", ".join(f"{x:.2f}" for x in wall["files"]))
        print("   docker build walls: " + ", ".join(f"{x:.2f}" for x in wall["build"]))
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="fewer repetitions (P1 n=3, P2 without its raw ceiling, P6 on 4 tasks)",
    )
    ap.add_argument("--only", default="P1,P2,P6,P7", help="comma-separated figures to measure, e.g. P1,P7")
    ap.add_argument("--verbose", action="store_true", help="also print per-phase breakdowns")
    args = ap.parse_args(argv)
    only = {s.strip().upper() for s in args.only.split(",") if s.strip()}
    unknown = only - {"P1", "P2", "P6", "P7"}
    if unknown:
        ap.error(f"--only: unknown figure(s) {', '.join(sorted(unknown))}; choose from P1, P2, P6, P7")
    if shutil.which("docker") is None:
        raise SystemExit("the docker CLI is needed for the raw baseline of P1")

    global REC
    REC = Recorder("trial_overhead", "P1/P2/P6 trial overhead, concurrency, image reuse", argv=argv,
                   context="Oracle trials of a generated trivial task (P1, P2) and the starter tasks (P6) on the "
                           "local Docker daemon; the baseline is the same container operations with the docker CLI.")
    results: list[bool] = []
    with tempfile.TemporaryDirectory(prefix="rsi-bench-") as d:
        tmp = Path(d)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        if "P1" in only:
            results.append(p1(tmp, 3 if args.quick else 7, args.verbose))
        if "P2" in only:
            results.append(p2(tmp, 8, not args.quick, args.verbose))
        if "P6" in only:
            results.append(p6(tmp, args.quick, args.verbose))
        if "P7" in only:
            results.append(p7(tmp, 3 if args.quick else 7, args.verbose))
    REC.write()
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
