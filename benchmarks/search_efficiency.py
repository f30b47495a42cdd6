"""P5: config-search efficiency, `--strategy adaptive` against `--strategy random` at equal budgets, on
solving tables drawn at random.

Ground truth is known: Harbor tasks (write `ok` to /app/out.txt) and the deterministic policy server
(benchmarks/policy_server.py) that solves a task only when the harness config has the values the task
requires. A solving table (benchmarks/search_tables.py) says which: of 24 tasks, 4 any config solves,
18 that exactly one of six search_space values fixes and 2 none does. Each table is drawn at random:
how many of the 18 tasks each useful value fixes (so which value is the true best single config) and
where the useful values sit among the 14 decoy values that fix nothing. The search is never told the
table, so each one is a table it was not written for.

Coverage is counted as the seed's headline counts it: tasks the baseline failed that some config
solves (`new`). Per budget the benchmark prints the mean new coverage of each strategy over the tables
(each table's figure a mean over its seeds), the ratio of those means (target: adaptive >= 2x random at
every budget), the worst table's ratio, and how often the adopted config is a true best single config.

`--sandbox docker|fake` runs `rsi expand` end to end: a template workspace per table runs the baseline
and the attribution controls once, and every (strategy, seed, budget) run copies it, so the whole
budget goes to the search (few-shot candidates off: they are not part of the table). `fake` uses
rsi.sandbox.fake (real bash in a temp dir, no Docker). `--sandbox sim` runs rsi.core.search itself on
each table with no trials at all (the same planner, the same evidence an expand would feed it), fast
enough for many tables.

    python benchmarks/search_efficiency.py [--sandbox docker|fake|sim] [--tables 6] [--seeds 3]
        [--budgets 25,50,100,200] [--no-decoys]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from _records import Recorder  # noqa: E402

from benchmarks.policy_server import Policy, serve  # noqa: E402
from benchmarks.search_tables import Table, adopted, draw_table, new_coverage, simulate  # noqa: E402
from rsi.loop.context import WorkspaceContext  # noqa: E402
from rsi.loop.expand.phase import ExpandRequest, expand  # noqa: E402
from rsi.loop.init import init_workspace  # noqa: E402

STRATEGIES = ("adaptive", "random")
R = "${SANDBOX_ROOT:-}"
DOCKERFILE = "ARG BASE_IMAGE=python:3.12-slim\nFROM ${BASE_IMAGE}\nWORKDIR /app\n"
TEST = (f'mkdir -p "{R}/logs/verifier"\n'
        f'if [ "$(cat "{R}/app/out.txt" 2>/dev/null)" = ok ]; then echo 1 > "{R}/logs/verifier/reward.txt"; '
        f'else echo 0 > "{R}/logs/verifier/reward.txt"; fi\n')
TOML = """version = "1.0"

[task]
name = "{name}"

[metadata.rsi]
family = "bench"
difficulty = 1

[agent]
timeout_sec = 60

[verifier]
timeout_sec = 60

[environment]
build_timeout_sec = 300
cpus = 1
memory_mb = 512
pids = 128
network_mode = "none"
"""


@dataclass
class Cell:
    """One (table, budget): per strategy, (new coverage, adopted a true best) per seed."""

    runs: dict[str, list[tuple[int, bool]]] = field(default_factory=lambda: {s: [] for s in STRATEGIES})
    agree: list[bool] = field(default_factory=list)  # end-to-end runs: new coverage equal to the simulator's

    def new(self, strategy: str) -> float:
        return statistics.mean(x for x, _ in self.runs[strategy])

    def best(self, strategy: str) -> int:
        return sum(ok for _, ok in self.runs[strategy])


def write_task(root: Path, name: str) -> None:
    d = root / name
    for sub in ("environment", "tests", "solution"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "instruction.md").write_text(f"Task {name}: write ok to /app/out.txt.\n")
    (d / "environment" / "Dockerfile").write_text(DOCKERFILE)
    (d / "tests" / "test.sh").write_text("#!/bin/bash\n" + TEST)
    (d / "solution" / "solve.sh").write_text(f'#!/bin/bash\necho ok > "{R}/app/out.txt"\n')
    (d / "task.toml").write_text(TOML.replace("{name}", name))


def provider_for(kind: str, tmp: Path) -> object | None:
    if kind == "fake":
        from rsi.sandbox.fake import FakeSandboxProvider

        return FakeSandboxProvider(tmp / "fake")
    return None  # the workspace's provider (docker)


def seeds(table: Table, args: argparse.Namespace) -> range:
    """The search seeds of a table: its own (`rsi expand --seed`), so no two tables share a random stream."""
    return range(1000 * table.index, 1000 * table.index + args.seeds)


def run_sim(table: Table, args: argparse.Namespace) -> dict[int, Cell]:
    out: dict[int, Cell] = {}
    for budget in args.budgets:
        cell = out[budget] = Cell()
        for seed in seeds(table, args):
            for strategy in STRATEGIES:
                state = simulate(table, strategy, budget, seed, round_size=args.round_size)
                cell.runs[strategy].append((new_coverage(state), adopted(state) in table.best))
    return out


def prepare(ctx: WorkspaceContext, args: argparse.Namespace, provider: object | None) -> tuple[int, int]:
    """The template's evidence, and nothing else: the baseline (gen-0000's own config, one attempt per task)
    and the attribution controls (two oracle runs and a nop per task) as plain jobs, which every expand
    reuses. (An expand run for this would also search with half of what the baseline leaves, and that
    evidence would be every later run's, of either strategy.) Returns (tasks solved, trials run)."""
    from rsi.loop.run import RunRequest, run_job

    paths = sorted(p for p in ctx.ws.tasks_dir.iterdir() if p.is_dir())
    runs = [run_job(ctx, RunRequest(paths=paths, agent=agent, attempts=k, concurrency=args.concurrency),
                    provider=provider)  # type: ignore[arg-type]
            for agent, k in (("harness", 1), ("oracle", 2), ("nop", 1))]
    return len({t.task_name for t in runs[0].trials if t.passed}), sum(len(r.trials) for r in runs)


def run_expand(table: Table, args: argparse.Namespace, tmp: Path) -> dict[int, Cell]:
    out: dict[int, Cell] = {}
    policy = Policy(rules=table.rules())  # type: ignore[arg-type]
    with serve(policy) as url:
        template = tmp / f"template-{table.index}"
        (template / "harness_configs").mkdir(parents=True)
        (template / "harness_configs" / "default.yaml").write_text(table.config_text(url))
        init_workspace(template, starter_tasks=False)
        for name in policy.rules:
            write_task(template / "tasks", name)
        ctx = WorkspaceContext.open(template)
        t0 = time.monotonic()
        solved, trials = prepare(ctx, args, provider_for(args.sandbox, tmp))
        ctx.store.close()
        print(f"  template: baseline solves {solved} of {len(policy.rules)}, {trials} trials in "
              f"{time.monotonic() - t0:.0f} s", flush=True)
        for budget in args.budgets:
            cell = out[budget] = Cell()
            for seed in seeds(table, args):
                for strategy in STRATEGIES:
                    ws = tmp / f"{strategy}-{budget}-{seed}"
                    shutil.copytree(template, ws)
                    c = WorkspaceContext.open(ws)
                    res = expand(c, ExpandRequest(budget=budget, attempts=1, strategy=strategy, seed=seed,
                                                  proposals=0, fewshot=0, concurrency=args.concurrency,
                                                  round_size=args.round_size,
                                                  provider=provider_for(args.sandbox, ws)))  # type: ignore[arg-type]
                    c.store.close()
                    new = res.coverage["solved"] - solved
                    cell.runs[strategy].append((new, res.adopted["label"] in table.best))
                    sim = simulate(table, strategy, budget, seed, round_size=args.round_size or args.concurrency)
                    cell.agree.append(new == new_coverage(sim))
                    shutil.rmtree(ws, ignore_errors=True)
            print(f"  budget {budget}: new adaptive {cell.new('adaptive'):.2f} random {cell.new('random'):.2f}",
                  flush=True)
    return out


def ratio(a: float, r: float) -> float:
    """a / r; equal when both found nothing."""
    return a / r if r else (1.0 if not a else float("inf"))


def report(tables: list[Table], cells: list[dict[int, Cell]], args: argparse.Namespace, wall: float) -> bool:
    space = "20 candidates, 6 useful + 14 decoys" if args.decoys else "6 candidates, all useful"
    print(f"\nP5 search efficiency ({args.sandbox}, {len(tables)} random solving tables x {args.seeds} seed(s), "
          f"24 tasks, baseline 4; {space}; round size {args.round_size or args.concurrency}; {wall:.0f} s)")
    print("new coverage = tasks the baseline failed that some config solved; target: adaptive >= 2x random on the "
          "mean at every budget")
    print(f"{'budget':>6} {'new-a':>6} {'new-r':>6} {'ratio':>6} {'target':>6} {'worst table':>16} "
          f"{'adopted=best a/r':>17}")
    met = True
    runs = len(tables) * args.seeds
    rec = Recorder("search_efficiency", f"P5 config search: adaptive vs random ({args.sandbox})",
                   context=f"{len(tables)} random solving tables x {args.seeds} seed(s), 24 tasks, baseline 4; "
                           f"{space}; new coverage = tasks the baseline failed that some config solved.")
    for budget in args.budgets:
        a = statistics.mean(c[budget].new("adaptive") for c in cells)
        r = statistics.mean(c[budget].new("random") for c in cells)
        per = [(ratio(c[budget].new("adaptive"), c[budget].new("random")), t.index) for t, c in zip(tables, cells,
                                                                                                    strict=True)]
        worst, at = min(per)
        ok = ratio(a, r) >= 2.0
        met = met and ok
        hits = [sum(c[budget].best(s) for c in cells) for s in STRATEGIES]
        best = f"{hits[0]}/{runs} {hits[1]}/{runs}"
        print(f"{budget:>6} {a:>6.2f} {r:>6.2f} {ratio(a, r):>6.2f} {'met' if ok else 'MISSED':>6} "
              f"{f'{worst:.2f} (table {at})':>16} {best:>17}")
        rec.add(f"ratio_b{budget}", f"new coverage adaptive / random at budget {budget}", ratio(a, r), "x",
                target=">= 2", note=f"adaptive {a:.2f}, random {r:.2f}; worst table {worst:.2f}; "
                                    f"adopted the best config {hits[0]}/{runs} vs {hits[1]}/{runs}")
    agree = [x for c in cells for b in args.budgets for x in c[b].agree]
    if agree:
        print(f"end-to-end runs whose new coverage equals the simulator's on the same table and seed: "
              f"{sum(agree)} of {len(agree)}")
        rec.add("sim_agreement", "end-to-end runs matching the simulator", f"{sum(agree)} of {len(agree)}")
    rec.wall_sec = wall
    rec.write()
    return met


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--sandbox", choices=["docker", "fake", "sim"], default="docker")
    ap.add_argument("--budgets", type=lambda s: [int(x) for x in s.split(",")], default=[25, 50, 100, 200])
    ap.add_argument("--tables", type=int, default=6, help="random solving tables (table i is drawn from seed i)")
    ap.add_argument("--first-table", type=int, default=0)
    ap.add_argument("--seeds", type=int, default=3, help="search seeds per table")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--round-size", type=int, default=None,
                    help="cells per search round (default: rsi expand's, one wave of --concurrency)")
    ap.add_argument("--decoys", action=argparse.BooleanOptionalAction, default=True,
                    help="the search space holds 14 values that fix nothing (--no-decoys: the 6 useful alone)")
    args = ap.parse_args()
    if args.sandbox == "sim" and args.round_size is None:
        args.round_size = args.concurrency
    tables = [draw_table(i, args.decoys) for i in range(args.first_table, args.first_table + args.tables)]
    tmp = Path(tempfile.mkdtemp(prefix="rsi-p5-"))
    t0 = time.monotonic()
    cells: list[dict[int, Cell]] = []
    try:
        for t in tables:
            print(t.describe(), flush=True)
            cells.append(run_sim(t, args) if args.sandbox == "sim" else run_expand(t, args, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if report(tables, cells, args, time.monotonic() - t0) else 1


if __name__ == "__main__":
    raise SystemExit(main())
