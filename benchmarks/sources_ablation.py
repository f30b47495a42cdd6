"""Which training-data source carries the gain (issue 36): oracle replays only, hinted rollouts only, the model's own
rollouts only, and all of them, each trained from the same parent on the same demo's trials and measured on the
same sealed holdout.

Run on a workspace a finished `rsi demo` left (heavy: trains one adapter per variant and runs model trials):

    flock /tmp/heavy.lock python benchmarks/sources_ablation.py --workspace rsi-demo [--attempts 4]

For each variant the workspace copy's contract keeps only that variant's `training.sources` (rsi.core.training
refuses the others with the reason), `rsi update` trains a candidate from the demo's parent (gen-0000) with the
demo's training settings, and `rsi run` measures it with the harness agent on the in-skill holdout tasks (train
templates in phrasings never trained on) and the unseen-template holdout tasks, `--attempts` trials each. The
parent is measured the same way in the same run, so the rates compare within one run (DESIGN §9). A variant with
no sample to train on is reported as such. This is an ablation over the demo's data, not three more demos: the
tasks, the replays and the rollouts are the demo's, only what trains differs.

Prints one line per variant and part: samples by source, pass rate (passes/trials) parent -> variant, and the
clustered one-sided p-value against the parent (the promote gate's statistic, rsi.core.stats).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from _records import Recorder

VARIANTS = {"oracle only": ["oracle"], "hinted only": ["hinted"], "self only": ["self"],
            "all sources": ["self", "hinted", "oracle"]}
TURNS_PER_SAMPLE = 5  # a replay is look, command(s), check, finish word
EPOCHS = 2


def rsi(ws: Path, *args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "rsi", "-w", str(ws), *args, "--json"], capture_output=True,
                         text=True)
    if out.returncode != 0:
        raise RuntimeError(f"rsi {' '.join(args)}: exit {out.returncode}: {out.stderr.strip()[-600:]}")
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def holdout_dirs(ws: Path) -> dict[str, list[Path]]:
    """Holdout task directories by part (a task naming no part is `unseen`)."""
    import tomllib

    out: dict[str, list[Path]] = {"in_skill": [], "unseen": []}
    for toml in sorted((ws / "tasks").glob("*/task.toml")):
        meta = tomllib.loads(toml.read_text()).get("metadata", {}).get("rsi", {})
        if meta.get("split") == "holdout":
            out[meta.get("holdout_part") or "unseen"].append(toml.parent)
    return out


def set_sources(ws: Path, sources: list[str]) -> None:
    contract = ws / "contracts" / "hcp-1.0.yaml"
    text, n = re.subn(r"^(  sources:) .*$", rf"\1 [{', '.join(sources)}]", contract.read_text(), count=1,
                      flags=re.MULTILINE)
    if not n:
        raise SystemExit(f"{contract}: training.sources not found")
    contract.write_text(text)


def measure(ws: Path, gen: str, dirs: list[Path], attempts: int) -> dict[str, tuple[int, int]]:
    """task name -> (passes, trials) of `gen`'s harness arm, infra left out."""
    job = rsi(ws, "run", *map(str, dirs), "--agent", "harness", "--gen", gen, "-k", str(attempts), "-n", "3")
    from rsi.core.trial import is_infra

    out: dict[str, tuple[int, int]] = {}
    for t in job["trials"]:
        if is_infra(t.get("error_type")):
            continue
        p, n = out.get(t["task"], (0, 0))
        out[t["task"]] = (p + int(bool(t.get("passed"))), n + 1)
    return out


def clustered_p(parent: dict[str, tuple[int, int]], cand: dict[str, tuple[int, int]],
                template: dict[str, str]) -> float:
    """One-sided exact paired permutation test over templates (the promote gate's clustered statistic)."""
    from rsi.core.stats import paired_permutation_p

    units: dict[str, list[float]] = {}
    for task, (p, n) in cand.items():
        if task in parent and n and parent[task][1]:
            units.setdefault(template[task], []).append(p / n - parent[task][0] / parent[task][1])
    return float(paired_permutation_p([sum(v) / len(v) for v in units.values()], "greater"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workspace", type=Path, required=True, help="a workspace a finished `rsi demo` left")
    ap.add_argument("--attempts", type=int, default=4)
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS))
    ap.add_argument("--keep", type=Path, help="keep the copy here (default: a temporary directory)")
    ap.add_argument("--batch", type=int, default=8, help="turns per step (the demo's train.batch_size)")
    ap.add_argument("--epochs", type=int, default=EPOCHS, help="epochs each variant trains (the demo's: 2); another "
                    "value records as sources_ablation_epochs<N>, beside the 2-epoch record")
    ap.add_argument("--reuse", help="the demo's own candidate (e.g. gen-0001) stands for 'all sources' "
                                    "instead of training it again")
    a = ap.parse_args()
    ws = a.keep or Path(tempfile.mkdtemp(prefix="rsi-ablation-")) / "ws"
    if ws.exists():
        shutil.rmtree(ws)
    shutil.copytree(a.workspace, ws, symlinks=True)
    import tomllib

    parts = holdout_dirs(ws)
    template = {d.name: tomllib.loads((d / "task.toml").read_text())["metadata"]["rsi"].get("template") or d.name
                for ds in parts.values() for d in ds}
    name = "sources_ablation" if a.epochs == EPOCHS else f"sources_ablation_epochs{a.epochs}"
    rec = Recorder(name, "Which training-data source carries the gain (issue 36 ablation)" if a.epochs == EPOCHS
                   else f"Training {a.epochs} epoch(s) instead of {EPOCHS} (issue 36: the update's share of the demo)",
                   context=f"From the finished demo in {a.workspace.name}: each variant trains a LoRA from its parent "
                           f"on that demo's trials ({a.epochs} epoch(s)), {a.attempts} trials per holdout task, parent "
                           "re-measured in the same run; p is clustered by template, one-sided.")
    rec.command = " ".join(["python", "benchmarks/sources_ablation.py", *sys.argv[1:]])
    parent = {part: measure(ws, "gen-0000", ds, a.attempts) for part, ds in parts.items() if ds}
    for part, res in parent.items():
        p, n = sum(x[0] for x in res.values()), sum(x[1] for x in res.values())
        print(f"parent gen-0000 {part}: {p}/{n}", flush=True)
    for name in a.variants:
        set_sources(ws, VARIANTS[name])
        try:
            # the demo's settings, but steps sized to the variant's samples (two epochs of whole trajectories at the
            # demo's batch of turns): a variant of five samples trained for the demo's 260 steps would only overfit
            dry = rsi(ws, "update", "--gen", "gen-0000", "--dry-run")
            n = sum((dry.get("selection", {}).get("samples") or {}).get("by_source", {}).values())
            steps = max(4, -(-a.epochs * n * TURNS_PER_SAMPLE // a.batch))
            if a.reuse and name == "all sources":
                up = {"candidate": a.reuse, "selection": dry.get("selection", {})}
            else:
                up = rsi(ws, "update", "--gen", "gen-0000", "--no-load", "--steps", str(steps))
        except RuntimeError as e:
            print(f"{name}: no candidate ({e})", flush=True)
            # the page gets the reason in a sentence; the raw error stays in the run's output above
            why = str(e).rsplit("no candidate registered: ", 1)[-1].split(";")[0].strip()
            rec.add(f"{name.replace(' ', '_')}_samples", f"{name}: samples", 0,
                    note=f"no candidate: {why}"[:120])
            continue
        samples = (up.get("selection", {}).get("samples") or {}).get("by_source", {})
        cand = up["candidate"]
        for part, ds in parts.items():
            if not ds:
                continue
            res = measure(ws, cand, ds, a.attempts)
            cp, cn = sum(x[0] for x in res.values()), sum(x[1] for x in res.values())
            pp, pn = sum(x[0] for x in parent[part].values()), sum(x[1] for x in parent[part].values())
            pval = clustered_p(parent[part], res, template)
            print(f"{name} ({cand}; samples {samples}): {part} {pp}/{pn} -> {cp}/{cn}, clustered one-sided "
                  f"p = {pval:.4g}", flush=True)
            rec.add(f"{name.replace(' ', '_')}_{part}", f"{name}: {part} pass rate", 100 * cp / max(cn, 1), "%",
                    compare={"parent": 100 * pp / max(pn, 1)},
                    note=f"{pp}/{pn} -> {cp}/{cn}, p = {pval:.3g}; {steps} steps; samples "
                         + ", ".join(f"{k} {v}" for k, v in sorted(samples.items())))
        rec.write()


if __name__ == "__main__":
    main()
