"""P4 store scale: 100k synthetic trials across 2 generations and 2k tasks; time `rsi diff` and DB bytes per trial.

Prints one line per figure, each as a ratio against its target:
- `diff_wall_sec`: `rsi diff gen-0000 gen-0001` as a user runs it (a new process, term format) (target < 2 s);
- `diff_build_sec`: the report built in-process (the store's SQL aggregates and the paired test);
- `db_bytes_per_trial`: the SQLite file's size over the trials it holds (target <= 2 KB; trajectories
  live on disk, the row holds the summary and the path);
- `trials_page_ms`: `rsi view`'s trials page (server-side: query and render) for the first page, a filtered
  page, a page sorted by reward, a family filter and the 10th page reached by keyset cursors; the slowest
  median of 5 (target < 300 ms), measured in-process with FastAPI's TestClient once the viewer's background
  trajectory indexing has finished.

    python benchmarks/store_scale.py [--trials 100000] [--tasks 2000]

Works in a temporary workspace; exits 0 only when every target is met.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _records import Recorder

from rsi.core.generation import GenerationState
from rsi.loop.context import WorkspaceContext
from rsi.loop.init import init_workspace
from rsi.store.tables import TrialRow

FAMILIES = ("files", "text", "data", "logs", "pyfix", "pipeline")


def populate(ctx: WorkspaceContext, n_trials: int, n_tasks: int, seed: int = 0) -> None:
    store, rng = ctx.store, random.Random(seed)
    g0 = ctx.generation("gen-0000")
    cand = g0.model_copy(update={"id": "gen-0001", "parent": "gen-0000", "state": GenerationState.CANDIDATE})
    store.put_generation(cand)
    tasks = [(f"{FAMILIES[i % 6]}-l{1 + i % 4}-{i:05d}", f"{rng.getrandbits(256):064x}") for i in range(n_tasks)]
    skill = {d: rng.random() for _, d in tasks}
    per_gen = n_trials // 2
    jobs = 20
    for j in range(jobs):  # jobs of 5k trials, as promote / expand children write them
        job_id = f"job-2026{j:04d}-bench-{j:06x}"
        gen = "gen-0000" if j < jobs // 2 else "gen-0001"
        phase = ("expand", "promote", "discover")[j % 3]
        rows = []
        for i in range(per_gen // (jobs // 2)):
            name, digest = tasks[i % n_tasks]
            attempt = 1 + i // n_tasks
            p = min(skill[digest] + (0.1 if gen == "gen-0001" else 0.0), 1.0)
            passed = rng.random() < p
            err = None if rng.random() > 0.01 else "sandbox_error"
            trial_id = f"{job_id}.{name}.harness-{gen}-{g0.harness_config.digest[:8]}.{attempt}"
            rows.append(TrialRow(
                id=trial_id, job_id=job_id, task_name=name, task_digest=digest, generation=gen, agent="harness",
                attempt=attempt, status="done", reward=1.0 if passed else 0.0, passed=passed and err is None,
                error_type=err, error_message="daemon hiccup: connection reset" if err else None,
                t_build=0.2, t_agent=rng.uniform(5, 60), t_verify=1.5, t_total=rng.uniform(8, 70),
                prompt_tokens=rng.randint(2000, 20000), completion_tokens=rng.randint(100, 2000),
                cached_tokens=rng.randint(0, 15000), harness_config_digest=g0.harness_config.digest,
                model_name="HuggingFaceTB/SmolLM2-135M-Instruct",
                trial_dir=f".rsi/jobs/{job_id}/{name}.harness-{gen}.{attempt}",
                arm_id=f"harness-{gen}-{g0.harness_config.digest[:8]}", split="holdout" if i % 5 == 0 else "train",
                reward_map_json=json.dumps({"reward": 1.0 if passed else 0.0}), integrity="snapshot",
                changed_paths_json=json.dumps(["/app/out.txt"]), verifier_exit_code=0, turns=rng.randint(1, 10),
            ))
        store.create_job(job_id, agent="harness", generation=gen, harness_config_digest=g0.harness_config.digest,
                         attempts=4, concurrency=2, task_paths=[], tasks_fingerprint="", trials=rows, kind="run",
                         phase=phase)  # type: ignore[arg-type]
        store.finish_job(job_id, "done")
    from rsi.store.tables import TaskRow

    with store.session() as s:  # the pool's task rows: the viewer's family filter reads them
        s.add_all([TaskRow(digest=d, name=n, path=f"tasks/{n}", family=n.split("-")[0], split="train")
                   for n, d in tasks])
        s.commit()
    for gen in ("gen-0000", "gen-0001"):
        for name, digest in tasks[: n_tasks // 4]:
            store.upsert_attribution(task_digest=digest, task_name=name, generation=gen,
                                     kind=rng.choice(["model", "config", "task", "infra"]), confidence=0.9,
                                     evidence=[], reason="synthetic")


def trials_page_ms(root: Path) -> tuple[float, str]:
    """`rsi view`'s trials page on this workspace, served in-process (FastAPI's TestClient): the slowest of the
    medians of 5 requests per URL, and which URL it was."""
    import re

    from fastapi.testclient import TestClient

    from rsi.view.app import create_app
    from rsi.view.context import ViewContext

    ctx = ViewContext.open(root)
    app = create_app(ctx, index_path=root / ".rsi" / "cache" / "bench-search.db")
    urls = ["/trials", "/trials?generation=gen-0001&outcome=fail", "/trials?sort=reward&dir=desc",
            "/trials?sort=finished", "/trials?family=text&split=holdout&sort=tokens"]
    out: dict[str, float] = {}
    with TestClient(app) as c:
        deadline = time.monotonic() + 900  # the viewer indexes trajectories in the background at start: let it finish
        while (app.state.index.syncing or app.state.index.last_sync == 0.0) and time.monotonic() < deadline:
            time.sleep(0.5)
        url = "/trials"
        for _ in range(9):  # the 10th page, by following `next page` links
            nxt = re.search(r'id="next-page" href="([^"]+)"', c.get(url).text)
            assert nxt, "no next page"
            url = "/trials" + nxt.group(1).replace("&amp;", "&")
        urls.append(url)
        for u in urls:
            c.get(u)  # warm: the first request of a URL kind compiles its template
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                r = c.get(u)
                times.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200 and "trial-row" in r.text, (u, r.status_code)
            out[u if len(u) < 60 else u[:40] + "…(page 10)"] = sorted(times)[2]
    ctx.close()
    worst = max(out, key=lambda k: out[k])
    for u, ms in out.items():
        print(f"  trials page {ms:6.1f} ms  {u}")
    return out[worst], worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--tasks", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="rsi-p4-") as tmp:
        root = Path(tmp) / "ws"
        init_workspace(root, starter_tasks=False)
        ctx = WorkspaceContext.open(root)
        t0 = time.perf_counter()
        populate(ctx, args.trials, args.tasks)
        insert = time.perf_counter() - t0
        from sqlmodel import func, select

        with ctx.store.session() as s:
            n = int(s.exec(select(func.count()).select_from(TrialRow)).one())
        from rsi.report.diff import build_diff

        t0 = time.perf_counter()
        report = build_diff(ctx, "gen-0000", "gen-0001")
        build = time.perf_counter() - t0  # includes importing scipy.stats (the Wilson intervals, the test)
        t0 = time.perf_counter()
        build_diff(ctx, "gen-0000", "gen-0001")
        warm = time.perf_counter() - t0  # the store's queries and the statistics alone
        ctx.store.close()
        db = ctx.ws.db_path
        size = db.stat().st_size + sum(p.stat().st_size for p in db.parent.glob(db.name + "-wal"))
        env = {**os.environ, "COLUMNS": "120"}
        # as installed: pip compiles a package's bytecode, and scripts/setup.sh compiles this checkout's; with
        # PYTHONDONTWRITEBYTECODE set and no bytecode, each run would compile rsi's modules again (~0.7 s)
        import compileall

        import rsi

        compileall.compile_dir(os.path.dirname(rsi.__file__), quiet=1)
        base = []
        for _ in range(3):  # the baseline: the same interpreter starting the CLI and doing nothing
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-m", "rsi", "--version"], capture_output=True, env=env, check=True)
            base.append(time.perf_counter() - t0)
        walls = []
        for _ in range(3):
            t0 = time.perf_counter()
            cp = subprocess.run([sys.executable, "-m", "rsi", "-w", str(root), "diff", "gen-0000", "gen-0001"],
                                capture_output=True, text=True, env=env)
            walls.append(time.perf_counter() - t0)
            if cp.returncode != 0:
                print(cp.stderr, file=sys.stderr)
                return 1
        wall = sorted(walls)[1]
        page_ms, page_worst = trials_page_ms(root)
        per_trial = size / n
        o = report.overall
        print(f"trials_inserted {n} in {insert:.1f} s ({n / insert:.0f}/s), {args.tasks} tasks, 2 generations")
        print(f"diff_tasks_compared {o.get('tasks')} (scope {o.get('scope')}), p {o.get('p_value')}")
        print(f"diff_wall_sec {wall:.3f} (median of 3 runs; ratio to the 2 s target {wall / 2.0:.3f})")
        print(f"cli_start_sec {sorted(base)[1]:.3f} (`rsi --version`; diff / start {wall / sorted(base)[1]:.2f})")
        print(f"diff_build_sec {build:.3f} cold (scipy.stats imported), {warm:.3f} warm "
              f"(ratio to the 2 s target {build / 2.0:.3f} / {warm / 2.0:.3f})")
        print(f"db_bytes_per_trial {per_trial:.0f} (ratio to the 2048 B target {per_trial / 2048:.3f}; "
              f"db {size / 1e6:.1f} MB)")
        print(f"trials_page_ms {page_ms:.0f} (slowest median of 5 over {page_worst}; ratio to the 300 ms target "
              f"{page_ms / 300:.3f})")
        rec = Recorder("store_scale", "P4 store at scale (100k trials)",
                       context=f"{n} trials over {args.tasks} tasks and 2 generations inserted into a fresh SQLite "
                               "workspace; `rsi diff` in a new process, the report in-process, the viewer's trials "
                               "page.")
        rec.add("diff_wall_sec", "`rsi diff` wall time (new process, median of 3)", wall, "s", target="< 2",
                compare={"`rsi --version` start": sorted(base)[1]})
        rec.add("diff_build_sec", "diff report built in-process (cold / warm)", build, "s", target="< 2",
                note=f"warm {warm:.3f} s")
        rec.add("db_bytes_per_trial", "DB bytes per trial", per_trial, "B", target="<= 2048")
        rec.add("trials_page_ms", "`rsi view` trials page (slowest median of 5)", page_ms, "ms", target="< 300",
                note=str(page_worst))
        rec.add("insert_per_sec", "trials inserted per second", n / insert, "trials/s")
        rec.write()
        return 0 if wall < 2.0 and per_trial <= 2048 and page_ms < 300 else 1


if __name__ == "__main__":
    sys.exit(main())
