"""Train-side validation: the data the demo's recipe choices are made on, never the sealed holdout (issue 46).

Two kinds of tasks, each `--n` of them, drawn from an instance stream no discover draws (side `train`, cycle
`10_000 + seed`, train phrasings) and checked first (the oracle passes, doing nothing fails):

- `compositions`: **train** compositions (rsi.loop.discover.generators.compose: combinations the template split
  trains on, every operation a train template) the workspace has no task of. They measure the skill of combining
  trained operations in a new way, which is what the holdout's in-skill part asks, on the train side of the split.
- `ops`: fresh instances of the single-operation templates the workspace trains on (levels 1-2): what a change of
  recipe must not cost.

Every generation given runs them with the production harness (`rsi run --agent harness`); per kind and generation
the record has the pass rate, a one-sided paired test of each later generation against the first (one unit per
task), and the share of trials that ran two commands or more (a composition needs at least two).

Run (heavy: model trials in Docker): `python benchmarks/train_validation.py WS --gens gen-0001,gen-0002 --record`.
The trials are recorded in WS's store under `rsi run` jobs: an update that should not see them takes `--from-job`.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import subprocess
import sys
import time
from pathlib import Path

print = functools.partial(print, flush=True)  # noqa: A001
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _records import Recorder  # noqa: E402

from rsi.core.discover import render_task  # noqa: E402
from rsi.core.stats import paired_permutation_p  # noqa: E402
from rsi.core.training import INFRA_ERRORS  # noqa: E402
from rsi.loop.context import WorkspaceContext  # noqa: E402
from rsi.loop.discover.generators import GENERATORS, GenRequest, load_generators  # noqa: E402
from rsi.loop.discover.generators.compose import ComposeGenerator, train_compositions  # noqa: E402
from rsi.store.files import load_pool  # noqa: E402

VALIDATION_CYCLE = 10_000  # the instance stream's cycle key: no discover or cycle of the workspace draws it
OPERATION_FAMILIES = ("files", "text", "data", "logs", "pyfix", "pipeline", "shell")  # the demo's


def untrained_train_compositions(ws: Path, level: int) -> tuple[list[str], float, int]:
    """Train-side compositions of `level` the workspace has no task of (any split), the split's fraction and the
    contract's held-out phrasings."""
    ctx = WorkspaceContext.open(ws)
    try:
        p = ctx.contract.promotion
        have = {t.spec.metadata.rsi.template for t in load_pool(ctx.ws.tasks_dir)}
        return ([t for t in train_compositions(p.holdout_fraction, level) if t not in have], p.holdout_fraction,
                p.holdout_phrasings)
    finally:
        ctx.store.close()


def trained_operation_templates(ws: Path, levels: tuple[int, ...]) -> tuple[list[tuple[str, int]], int]:
    """(template, level) of the single-operation train templates the workspace has train tasks of, at `levels`,
    and the contract's held-out phrasings."""
    ctx = WorkspaceContext.open(ws)
    try:
        have = {(t.spec.metadata.rsi.template, t.spec.metadata.rsi.difficulty) for t in load_pool(ctx.ws.tasks_dir)
                if t.split == "train" and t.spec.metadata.rsi.family in OPERATION_FAMILIES}
        return sorted((str(t), int(lv or 1)) for t, lv in have if t and (lv or 1) in levels), \
            ctx.contract.promotion.holdout_phrasings
    finally:
        ctx.store.close()


def write_tasks(ws: Path, out: Path, n: int, level: int, seed: int, kind: str = "compositions") -> list[Path]:
    """`compositions`: n train compositions of `level` never trained on; `ops`: fresh instances (an instance
    stream no discover draws) of n single-operation templates the workspace trains on, levels 1-2."""
    if kind == "ops":
        ops, held = trained_operation_templates(ws, (1, 2))
        pairs = ops
    else:
        options, _, held = untrained_train_compositions(ws, level)
        pairs = [(t, level) for t in options]
    if len(pairs) < n:
        raise SystemExit(f"only {len(pairs)} {kind} templates to draw from; asked for {n}")
    chosen = sorted(random.Random(f"train-validation:{kind}:{seed}").sample(pairs, n))
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, (tid, lv) in enumerate(chosen):
        gen = ComposeGenerator() if kind != "ops" else GENERATORS.create(tid.split("/", 1)[0])
        draft = gen.generate(GenRequest(seed=seed * 1000 + i, difficulty=lv, template=tid, family=tid.split("/")[0],
                                        phrasing_side="train", holdout_phrasings=held, side="train",
                                        cycle=VALIDATION_CYCLE + seed))
        name = f"val-{draft.name()}"
        d = out / name
        for rel, text in render_task(draft, name=name, split="train", discovered_by=None).items():
            p = d / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            if rel.endswith(".sh"):
                p.chmod(0o755)
        paths.append(d)
    return paths


def commands(trial_dir: str) -> int:
    """How many commands the agent ran in a trial (its trajectory's agent steps that call a tool)."""
    path = Path(trial_dir) / "trajectory.json"
    if not path.is_file():
        return 0
    steps = json.loads(path.read_text()).get("steps") or []
    return sum(1 for st in steps if st.get("source") == "agent" and st.get("tool_calls"))


Attempt = tuple[int, int, int, int]  # passed 1/0, commands run, steps right, steps scored (compositions' reward.json)


def rsi_run(ws: Path, paths: list[Path], *args: str) -> dict[str, list[Attempt]]:
    """`rsi run` on `paths`; each task's attempts (passed, commands, steps right, steps scored), infra ones left
    out."""
    cmd = ["rsi", "run", "-w", str(ws), "--json", *args, *map(str, paths)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:8])} ...: exit {proc.returncode}: {proc.stderr.strip()[-400:]}")
    out: dict[str, list[Attempt]] = {}
    for t in json.loads(proc.stdout)["trials"]:
        if t.get("error_type") in INFRA_ERRORS:  # says nothing about the model: not counted
            print(f"  {t['id']}: infra ({t['error_type']}), not counted")
            continue
        steps = [v for k, v in (t.get("rewards") or {}).items() if k.startswith("step_")]
        out.setdefault(t["task"], []).append((int(bool(t.get("passed"))), commands(str(t.get("trial_dir") or "")),
                                              int(sum(steps)), len(steps)))
    return out


def measure(ws: Path, kind: str, args: argparse.Namespace, gens: list[str], rec: Recorder, t0: float) -> str:
    """One kind's tasks written, checked (oracle passes, nop fails) and run by every generation; its figures
    added to `rec`; returns a sentence for the record's context."""
    paths = write_tasks(ws, args.out or ws / ".rsi" / "validation" / f"{kind}-{args.seed}", args.n, args.level,
                        args.seed, kind)
    print(f"{len(paths)} train-side {kind} tasks never trained on: {', '.join(p.name for p in paths)}")
    oracle = rsi_run(ws, paths, "--agent", "oracle", "-n", str(args.concurrency))
    nop = rsi_run(ws, paths, "--agent", "nop", "-n", str(args.concurrency))
    valid = [p for p in paths if oracle.get(p.name) and all(a[0] for a in oracle[p.name])
             and not any(a[0] for a in nop.get(p.name, [(1, 0, 0, 0)]))]
    print(f"valid (oracle passes, nop fails): {len(valid)} of {len(paths)}")
    got: dict[str, dict[str, list[Attempt]]] = {}
    for g in gens:
        got[g] = rsi_run(ws, valid, "--agent", "harness", "--gen", g, "-k", str(args.attempts), "-n",
                         str(args.concurrency))
        print(f"{kind} {g}: {sum(a[0] for v in got[g].values() for a in v)}/{sum(len(v) for v in got[g].values())} "
              f"({time.monotonic() - t0:.0f} s so far)")
    valid = [p for p in valid if all(got[g].get(p.name) for g in gens)]  # a task some generation has no count of
    rates = {g: {p.name: sum(a[0] for a in got[g][p.name]) / len(got[g][p.name]) for p in valid} for g in gens}
    for g in gens:
        trials = [t for p in valid for t in got[g][p.name]]
        note = f"{sum(a[0] for a in trials)}/{len(trials)} trials on {len(valid)} tasks"
        if g != gens[0]:
            diffs = [rates[g][p.name] - rates[gens[0]][p.name] for p in valid]
            note += f"; p = {paired_permutation_p(diffs):.4f} against {gens[0]}"
        rec.add(f"{kind}.{g}.rate", f"{kind}, {g}: pass rate", sum(rates[g].values()) / max(1, len(valid)), "",
                note=note, echo=True)
        multi = sum(1 for a in trials if a[1] >= 2)
        rec.add(f"{kind}.{g}.multi", f"{kind}, {g}: trials that ran two commands or more", multi / max(1, len(trials)),
                "", note=f"{multi}/{len(trials)}", echo=True)
        right, scored = sum(a[2] for a in trials), sum(a[3] for a in trials)
        if scored:  # compositions: each step's own effect (reward.json's step_<k>), right or not
            rec.add(f"{kind}.{g}.steps", f"{kind}, {g}: steps whose effect is right", right / scored, "",
                    note=f"{right}/{scored} steps", echo=True)
    return (f"{kind}: {len(valid)} " + (f"train compositions of level {args.level} the workspace never trained on"
                                        if kind != "ops" else "fresh instances of trained single-operation templates"
                                                              " (levels 1-2)"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workspace", type=Path)
    ap.add_argument("--gens", required=True, help="comma-separated generations; the first is the baseline")
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--level", type=int, default=3)
    ap.add_argument("--kind", default="compositions,ops",
                    help="comma-separated: compositions (train compositions never trained on), ops (fresh instances "
                         "of the trained single-operation templates)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--attempts", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=3)
    ap.add_argument("--out", type=Path, default=None, help="where the tasks go (default: WS/.rsi/validation/SEED)")
    ap.add_argument("--record", action="store_true", help="write benchmarks/records/train_validation.json")
    ap.add_argument("--about", default="", help="what the generations are (one sentence, put first in the record)")
    args = ap.parse_args()
    ws = args.workspace.resolve()
    t0 = time.monotonic()
    load_generators()
    gens = args.gens.split(",")
    rec = Recorder("train_validation", "Train-side validation")
    said = [measure(ws, kind, args, gens, rec, t0) for kind in args.kind.split(",")]
    about = args.about.rstrip(". ") + ". " if args.about else ""
    rec.context = (f"{about}{'; '.join(said)} (seed {args.seed}), {args.attempts} attempts each, the production "
                   f"harness; one unit per task; p: one-sided paired permutation test against {gens[0]}. Train-side "
                   f"data only: what the demo's recipe is chosen on, never the sealed holdout")
    if args.record:
        rec.wall_sec = time.monotonic() - t0
        rec.write()


if __name__ == "__main__":
    main()
