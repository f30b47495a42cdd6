"""P5: config-search efficiency, `--strategy adaptive` against `--strategy random` at equal budgets.

Ground truth is known: Harbor tasks (write `ok` to /app/out.txt) and the deterministic policy server
(benchmarks/policy_server.py) that solves a task only when the harness config has the values the
task requires (temperature, turn limit, prompt variant, few-shot off), different per task. Of 24
tasks, 4 are solved by any config, 18 need one of six search_space values (5/4/3/3/2/1 tasks per
value, so `sampling.temperature=0.2` is the true best single config) and 2 by none.

The search space holds 14 more values that fix nothing (other temperatures, turn limits and prompt
variants), as a real harness config's space mostly does: 20 single-edit candidates, 6 of them
useful. `--no-decoys` searches the 6 useful values alone; there no strategy can reach 2x random at
25 or 200 trials (with all 18 assignments known in advance, 25 trials fix at most ~6.3 tasks where
random fixes ~3; at 200 random already fixes ~13 of the 18).

Coverage is counted as the seed's headline counts it: tasks the baseline failed that some config
solves (`new`); the totals with the baseline's own tasks are printed beside it.

A template workspace runs the baseline and the attribution controls once; every (strategy, seed,
budget) run copies it and runs `rsi expand` end to end, so the baseline is reused at no cost and
the whole budget goes to the search. Prints, per budget: mean tasks covered (and newly covered
beyond the baseline) for each strategy, the ratio, and how often the adopted config is the true
best single config.

    python benchmarks/search_efficiency.py [--sandbox docker|fake] [--budgets 25,50,100,200] [--seeds 5] [--no-decoys]

`--sandbox fake` uses rsi.sandbox.fake (real bash in a temp dir, no Docker) for a quick run.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.policy_server import CONFIG, FIXES, Policy, rule_for, serve  # noqa: E402
from rsi.loop.context import WorkspaceContext  # noqa: E402
from rsi.loop.expand import ExpandRequest, expand  # noqa: E402
from rsi.loop.init import init_workspace  # noqa: E402

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
COUNTS = [5, 4, 3, 3, 2, 1]
TRUE_BEST = "sampling.temperature=0.2"
# Values that fix no task (the policy server solves a `need-*` task only with its one required value).
DECOYS: dict[str, list[object]] = {
    "sampling.temperature": [0.0, 0.1, 0.3, 0.4, 0.5, 0.9],
    "loop.max_turns": [2, 4, 6, 7, 10],
    "prompt.system": [f"Variant {v}. Reply with one bash block. You have {{{{ max_turns }}}} turns." for v in "CDE"],
}


def config_text(url: str, decoys: bool) -> str:
    """The policy config, its search space widened with DECOYS when asked."""
    import yaml

    text = CONFIG.format(endpoint=url)
    if not decoys:
        return text
    raw = yaml.safe_load(text)
    for key, values in DECOYS.items():
        raw["search_space"][key] = [*raw["search_space"][key], *values]
    return str(yaml.safe_dump(raw, sort_keys=False))


def rules() -> dict[str, object]:
    out: dict[str, object] = {f"any-{i}": {} for i in range(4)}
    for fix, n in zip(FIXES, COUNTS, strict=True):
        key = "-".join(f"{k}{v}" for k, v in fix.items()).replace(".", "")
        for i in range(n):
            out[f"need-{key}-{i}"] = rule_for(fix)
    out.update({"never-0": None, "never-1": None})
    return out


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


def run(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="rsi-p5-"))
    policy = Policy(rules=rules())  # type: ignore[arg-type]
    with serve(policy) as url:
        template = tmp / "template"
        (template / "harness_configs").mkdir(parents=True)
        (template / "harness_configs" / "default.yaml").write_text(config_text(url, args.decoys))
        init_workspace(template, starter_tasks=False)
        for name in policy.rules:
            write_task(template / "tasks", name)
        provider = provider_for(args.sandbox, tmp)
        ctx = WorkspaceContext.open(template)
        n = len(policy.rules)
        t0 = time.monotonic()
        prep = expand(ctx, ExpandRequest(budget=n + (n - 4) * 3, attempts=1, strategy="grid", proposals=0,
                                         concurrency=args.concurrency, provider=provider))  # type: ignore[arg-type]
        ctx.store.close()
        base = prep.baseline.tasks_solved
        print(f"template: {n} tasks, baseline solves {base}, {prep.trials} trials in "
              f"{time.monotonic() - t0:.0f} s ({args.sandbox})", flush=True)
        rows = []
        for budget in args.budgets:
            res: dict[str, list[tuple[int, bool]]] = {"adaptive": [], "random": []}
            for seed in range(args.seeds):
                for strategy in ("adaptive", "random"):
                    ws = tmp / f"{strategy}-{budget}-{seed}"
                    shutil.copytree(template, ws)
                    c = WorkspaceContext.open(ws)
                    out = expand(c, ExpandRequest(budget=budget, attempts=1, strategy=strategy, seed=seed,
                                                  proposals=0, concurrency=args.concurrency,
                                                  round_size=args.round_size,
                                                  provider=provider_for(args.sandbox, ws)))  # type: ignore[arg-type]
                    c.store.close()
                    res[strategy].append((out.coverage["solved"], out.adopted["label"] == TRUE_BEST))
                    shutil.rmtree(ws, ignore_errors=True)
            a = statistics.mean(x for x, _ in res["adaptive"])
            r = statistics.mean(x for x, _ in res["random"])
            rows.append((budget, a, r, a - base, r - base,
                         sum(ok for _, ok in res["adaptive"]), sum(ok for _, ok in res["random"])))
            print(f"budget {budget}: adaptive {a:.1f} random {r:.1f}", flush=True)
    space = "20 candidates, 6 useful + 14 decoys" if args.decoys else "6 candidates, all useful"
    print(f"\nP5 search efficiency ({args.sandbox}, {args.seeds} seed(s), {n} tasks, baseline {base}; {space})")
    print("coverage of the tasks the baseline failed (new), target: adaptive >= 2x random; totals beside it")
    print(f"{'budget':>6} {'new-a':>6} {'new-r':>6} {'new ratio':>9} {'target':>6} {'total-a':>8} {'total-r':>8}"
          f" {'ratio':>6} {'adopted=best a/r':>17}")
    met = True
    for budget, a, r, na, nr, oka, okr in rows:
        ratio = na / nr if nr else float("inf")
        met = met and ratio >= 2.0
        print(f"{budget:>6} {na:>6.1f} {nr:>6.1f} {ratio:>9.2f} {'met' if ratio >= 2.0 else 'MISSED':>6} "
              f"{a:>8.1f} {r:>8.1f} {a / r if r else float('inf'):>6.2f} "
              f"{f'{oka}/{args.seeds} {okr}/{args.seeds}':>17}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if met else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sandbox", choices=["docker", "fake"], default="docker")
    ap.add_argument("--budgets", type=lambda s: [int(x) for x in s.split(",")], default=[25, 50, 100, 200])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--round-size", type=int, default=8)
    ap.add_argument("--decoys", action=argparse.BooleanOptionalAction, default=True,
                    help="the search space holds 14 values that fix nothing (--no-decoys: the 6 useful alone)")
    return run(ap.parse_args())


if __name__ == "__main__":
    raise SystemExit(main())
