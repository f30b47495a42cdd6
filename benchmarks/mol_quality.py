"""Mixture-of-LoRA quality and forgetting (issue 26, E6): real trials in Docker, on the embedded model.

Run (heavy: trains seven adapters and runs trials): `flock /tmp/rsi-heavy.lock python benchmarks/mol_quality.py`.

One fresh workspace; tasks from the procedural generators of the demo's families, split by template (every third
template of a family is held out, so the evaluation is on templates no adapter saw). Training data are the train
tasks' oracle demonstrations (the solution as one ```bash action, its output, the finish word, rendered by the
production config exactly as a passing trajectory would be): the same examples for every arm, so the arms differ
only in how the weights are shared.

- **E6 quality**, per family on the held-out tasks (pass rate over `--attempts` trials per task):
  base (no adapter); **pooled** (one LoRA on every family's examples); **MoL** (L0 trained on routing examples,
  one specialist per label on its own families' examples, the demo's grouping; L0 routes each trial); **oracle
  routing** (each family's tasks answered by its own specialist, no route hop): routing regret = oracle - MoL.
- **Forgetting**: family group A (L1's families) then B (L2's). Pooled: a LoRA trained on A, then trained on
  from it on B; A's pass rate under each. MoL: B gets a new specialist; A's adapter is byte-identical (sha256)
  before and after, so its answers on A cannot change (A's rate under it is the oracle arm's).

Prints one line per figure; the workspace is kept when `--keep DIR` is given (every trial can be opened with
`rsi -w DIR view`).

Measured once (5 December, README "Mixture-of-LoRA"): 77 min of running on the 2-core box, mostly training (a 24-step
adapter takes about 3 min alone; two CPU jobs at once slow it tenfold, so run it alone).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

print = functools.partial(print, flush=True)  # noqa: A001  (progress on a shared machine)
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rsi.core.discover import TaskDraft, render_task  # noqa: E402
from rsi.core.generation import AdapterRef, GenerationManifest, GenerationState, HarnessRef  # noqa: E402
from rsi.core.harness_config import HarnessConfig  # noqa: E402
from rsi.core.mol import MolSpec  # noqa: E402
from rsi.core.task import Task, TaskSpec  # noqa: E402
from rsi.loop.cycle.demo import DEMO_MOL_DOMAINS  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _records import Recorder  # noqa: E402
from mol import template_drafts  # noqa: E402  (benchmarks/mol.py: the same template split)

DOMAINS = DEMO_MOL_DOMAINS
A, B = DOMAINS["L1"], DOMAINS["L2"]


def write_tasks(ds: list[TaskDraft], into: Path) -> dict[str, list[Path]]:
    """Each draft as a Harbor task directory under into/<family>/; family -> task dirs."""
    out: dict[str, list[Path]] = {}
    for i, d in enumerate(ds):
        name = f"{(d.template or d.family).replace('/', '-')}-{i}"
        for rel, text in render_task(d, name=name, split="holdout", discovered_by=None).items():
            p = into / d.family / name / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            if rel.endswith(".sh"):
                p.chmod(0o755)
        out.setdefault(d.family, []).append(into / d.family / name)
    return out


def demonstration(cfg: HarnessConfig, contract: Any, d: TaskDraft) -> list[dict[str, Any]]:
    """The train task solved as the production config would show it: its solution as one action, an empty
    successful output, the finish word."""
    from rsi.harness.actions import format_exec
    from rsi.harness.prompts import initial_messages, prompt_variables

    tools = contract.openai_tools(cfg.tools)
    head = initial_messages(cfg, prompt_variables(cfg, instruction=d.instruction, workdir="/app", tools=tools,
                                                  max_turns=cfg.loop.max_turns, task=d.family))
    body = "\n".join(ln for ln in d.solve_sh.strip().splitlines()
                     if not ln.startswith("#!") and ln.strip() not in ("set -e", "set -eu", "set -euo pipefail"))
    return [*head, {"role": "assistant", "content": f"```bash\n{body.strip()}\n```"},
            {"role": "user", "content": format_exec("", "", 0, False, 10.0)},
            {"role": "assistant", "content": cfg.loop.finish_word}]


def train(lines: list[Any], out: Path, steps: int, parent: Path | None = None) -> tuple[Path, str]:
    """A LoRA (rsi.train.local, the demo's settings) on `lines`; (adapter dir, its sha256)."""
    from rsi.core.training import TrainSettings
    from rsi.models.adapters import file_sha256
    from rsi.models.server.model_files import resolve_model
    from rsi.train.base import TrainRequest
    from rsi.train.dataset import write_dataset
    from rsi.train.local import LocalBackend

    info = write_dataset(out / "dataset", lines, {})
    settings = TrainSettings(steps=steps, batch_size=4, max_seq_len=1024, kl_coef=0.0, validation_every=10_000)
    t0 = time.monotonic()
    res = LocalBackend().train(TrainRequest(dataset=info.path, output_dir=out / "adapter", base_model="base",
                                            objective="sft", settings=settings, parent_adapter=parent,
                                            base_model_dir=resolve_model(None)[0], log=lambda m: None))
    assert res.adapter_dir is not None
    print(f"  trained {out.name}: {len(lines)} examples, {steps} steps, loss {res.losses[0]:.3f} -> "
          f"{res.losses[-1]:.3f}, {time.monotonic() - t0:.0f} s")
    return res.adapter_dir, file_sha256(res.adapter_dir / "adapter_model.safetensors")


def line_of(msgs: list[dict[str, Any]], head: int, group: str) -> Any:
    from rsi.train.dataset import DatasetLine

    return DatasetLine(messages=msgs, tools=[], reward=1.0, accepted=True, group_id=group, sample_index=0,
                       advantage=0.0, prompt_messages=head, provenance={"benchmark": "mol_quality"})


def rsi(root: Path, *args: str, env: dict[str, str], timeout: float = 5400) -> Any:
    cp = subprocess.run([sys.executable, "-m", "rsi", "-w", str(root), *args], capture_output=True, text=True,
                        env=env, cwd=root, timeout=timeout)
    if cp.returncode != 0:
        raise SystemExit(f"rsi {' '.join(args)} failed: {cp.stderr[-2000:]}")
    return json.loads(cp.stdout) if "--json" in args else cp.stdout


def rates(job: dict[str, Any], fam_of: dict[str, str]) -> dict[str, dict[str, list[int]]]:
    """generation -> family -> [passes, graded trials] (infra errors and failed environment builds left out:
    neither is a verdict on the model)."""
    from rsi.core.trial import is_infra

    out: dict[str, dict[str, list[int]]] = {}
    for t in job["trials"]:
        if is_infra(t["error_type"]) or t["error_type"] == "environment_build_failed":
            continue
        acc = out.setdefault(t["generation"], {}).setdefault(fam_of[t["task"]], [0, 0])
        acc[0] += bool(t["passed"])
        acc[1] += 1
    return out


def fmt(c: list[int] | None) -> str:
    return f"{c[0]}/{c[1]} ({c[0] / c[1]:.0%})" if c and c[1] else "-"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="files,text,data,pyfix", help="families evaluated (and trained)")
    ap.add_argument("--train-per-template", type=int, default=2)
    ap.add_argument("--held-per-template", type=int, default=1)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--attempts", type=int, default=2)
    ap.add_argument("--keep", type=Path, default=None, help="make the workspace here and keep it")
    args = ap.parse_args()
    from rsi.loop.context import WorkspaceContext
    from rsi.loop.init import init_workspace

    families = args.families.split(",")
    tmp = Path(tempfile.mkdtemp(prefix="rsi-e6-"))
    root = args.keep or tmp / "ws"
    init_workspace(root, starter_tasks=False)
    ctx = WorkspaceContext.open(root)
    g0 = ctx.generation("gen-0000")
    cfg = ctx.harness_config_for(g0)
    mol_raw = yaml.safe_load(cfg.canonical_yaml())
    mol_raw.update(name="mol", mol={"domains": DOMAINS})
    mol_cfg = HarnessConfig.model_validate(mol_raw)
    (ctx.ws.harness_configs_dir / "mol.yaml").write_text(mol_cfg.canonical_yaml())
    mol_digest = ctx.register_config(mol_cfg)
    train_d, held_d = template_drafts(families, args.train_per_template, args.held_per_template)
    evals = write_tasks(held_d, root / "eval")
    fam_of = {p.name: f for f, ps in evals.items() for p in ps}
    print(f"E6 setup: {len(train_d)} train tasks, {len(held_d)} held-out tasks of unseen templates in "
          f"{', '.join(families)}; domains {DOMAINS}; {args.steps} steps per adapter")
    spec = MolSpec(domains=DOMAINS)
    demos = {id(d): demonstration(cfg, ctx.contract, d) for d in train_d}
    head = len(demos[id(train_d[0])]) - 3
    examples = {fam: [line_of(demos[id(d)], head, f"{fam}-{i}") for i, d in enumerate(train_d) if d.family == fam]
                for fam in families}
    from rsi.harness.mol import route_prompt

    routing = []
    for i, d in enumerate(train_d):
        task = Task(name=f"r{i}", path=f"r{i}", instruction=d.instruction, digest=f"r{i}".ljust(64, "0"),
                    env_digest="0" * 64, has_solution=True, spec=TaskSpec.model_validate(
                        {"metadata": {"rsi": {"family": d.family, "template": d.template}}}))
        msgs = route_prompt(mol_cfg, ctx.contract, task, DOMAINS)
        routing.append(line_of([*msgs, {"role": "assistant", "content": spec.label_of(d.family)}], len(msgs),
                               f"route-{i}"))
    work = tmp / "train"
    every = [x for fam in families for x in examples[fam]]
    adapters: dict[str, tuple[Path, str]] = {"pooled": train(every, work / "pooled", args.steps),
                                             "L0": train(routing, work / "L0", args.steps)}
    for lab in ("L1", "L2", "L3"):
        mine = [x for fam in DOMAINS[lab] if fam in examples for x in examples[fam]]
        if mine:
            adapters[lab] = train(mine, work / lab, args.steps)
    a_lines = [x for fam in A if fam in examples for x in examples[fam]]
    b_lines = [x for fam in B if fam in examples for x in examples[fam]]
    adapters["pooled_A"] = train(a_lines, work / "pooled_A", args.steps)
    adapters["pooled_AB"] = train(b_lines, work / "pooled_AB", args.steps, parent=adapters["pooled_A"][0])

    def place(key: str, gen_id: str) -> AdapterRef:
        src, sha = adapters[key]
        rel = Path("adapters") / "e6" / key.lower() / gen_id
        shutil.copytree(src, root / rel)
        return AdapterRef(path=str(rel), sha256=sha, serve_name=f"e6-{key.lower()}-{gen_id}-{sha[:8]}")

    gens: dict[str, str] = {}

    def register(gen_id: str, what: str, refs: dict[str, AdapterRef], digest: str, name: str) -> None:
        m = g0.model_copy(update={"id": gen_id, "parent": "gen-0000", "state": GenerationState.CANDIDATE,
                                  "adapters": refs, "harness_config": HarnessRef(name=name, digest=digest),
                                  **({"schema_version": 2} if len(refs) > 1 else {})})
        GenerationManifest.model_validate(m.model_dump(mode="json"))
        ctx.store.put_generation(m)
        gens[gen_id] = what

    cfg_digest = g0.harness_config.digest
    register("gen-0001", "pooled", {"agent": place("pooled", "gen-0001")}, cfg_digest, cfg.name)
    mol_refs = {lab: place(lab, "gen-0002").model_copy(update={
        "role": "chat+router" if lab == "L0" else "specialist", "domains": DOMAINS[lab]})
        for lab in DOMAINS if lab in adapters}
    register("gen-0002", "MoL", mol_refs, mol_digest, "mol")
    oracle = {}
    for n, lab in enumerate(("L1", "L2", "L3"), start=3):
        if lab in adapters:
            oracle[lab] = f"gen-{n:04d}"
            register(oracle[lab], f"oracle {lab}", {"agent": place(lab, oracle[lab])}, cfg_digest, cfg.name)
    register("gen-0006", "pooled A", {"agent": place("pooled_A", "gen-0006")}, cfg_digest, cfg.name)
    register("gen-0007", "pooled A then B", {"agent": place("pooled_AB", "gen-0007")}, cfg_digest, cfg.name)
    ctx.store.close()

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "RSI_MODEL_PORT": str(port), "HF_HUB_OFFLINE": "1", "COLUMNS": "160"}
    all_tasks = [str(p) for ps in evals.values() for p in ps]
    k = str(args.attempts)
    t0 = time.monotonic()
    main_job = rsi(root, "run", *all_tasks, "--agent", "harness", "--gen", "gen-0000", "--gen", "gen-0001",
                   "--gen", "gen-0002", "-k", k, "-n", "2", "--json", env=env)
    got = rates(main_job, fam_of)
    for lab, gid in oracle.items():
        mine = [str(p) for fam in DOMAINS[lab] for p in evals.get(fam, [])]
        if mine:
            got.update(rates(rsi(root, "run", *mine, "--agent", "harness", "--gen", gid, "-k", k, "-n", "2",
                                 "--json", env=env), fam_of))
    a_tasks = [str(p) for fam in A for p in evals.get(fam, [])]
    got.update(rates(rsi(root, "run", *a_tasks, "--agent", "harness", "--gen", "gen-0006", "--gen", "gen-0007",
                         "-k", k, "-n", "2", "--json", env=env), fam_of))
    print(f"trials took {(time.monotonic() - t0) / 60:.1f} min")

    def total(gid: str, fams: list[str]) -> list[int]:
        cells = [got.get(gid, {}).get(f) for f in fams]
        return [sum(c[0] for c in cells if c), sum(c[1] for c in cells if c)]

    oracle_of = {fam: oracle[lab] for lab in oracle for fam in DOMAINS[lab]}
    print("E6 per family (held-out templates): base | pooled | MoL | oracle routing")
    for fam in families:
        print(f"  {fam:<9} {fmt(got.get('gen-0000', {}).get(fam)):>12} {fmt(got.get('gen-0001', {}).get(fam)):>12} "
              f"{fmt(got.get('gen-0002', {}).get(fam)):>12} {fmt(got.get(oracle_of.get(fam, ''), {}).get(fam)):>12}")
    orc = [sum(got.get(oracle_of.get(f, ""), {}).get(f, [0, 0])[i] for f in families) for i in (0, 1)]
    cols = {"base": total("gen-0000", families), "pooled": total("gen-0001", families),
            "MoL": total("gen-0002", families), "oracle routing": orc}
    print("E6 overall: " + ", ".join(f"{k_} {fmt(v)}" for k_, v in cols.items()))
    if cols["MoL"][1] and orc[1]:
        print(f"E6 routing regret (oracle - MoL): {orc[0] / orc[1] - cols['MoL'][0] / cols['MoL'][1]:+.3f}")
    a_mol = [sum(got.get(oracle.get("L1", ""), {}).get(f, [0, 0])[i] for f in A) for i in (0, 1)]
    print(f"forgetting on A ({', '.join(A)}): pooled trained on A {fmt(total('gen-0006', A))} -> then on B "
          f"{fmt(total('gen-0007', A))}; MoL: L1 unchanged by adding L2 (sha256 {adapters['L1'][1][:12]} before and "
          f"after), A under L1 {fmt(a_mol)}")
    rec = Recorder("mol_quality", "Mixture-of-LoRA quality (E6) and forgetting",
                   context="Per-family pass rate on held-out templates for the base, one pooled LoRA, Mixture-of-LoRA "
                           "and oracle routing; forgetting: a pooled LoRA trained on A then B vs a new specialist.")
    for name, v in cols.items():
        rec.add(f"E6_{name.replace(' ', '_')}", f"held-out pass rate, {name}", 100 * v[0] / max(v[1], 1), "%",
                note=fmt(v))
    if cols["MoL"][1] and orc[1]:
        rec.add("E6_routing_regret", "routing regret (oracle routing - MoL)",
                orc[0] / orc[1] - cols["MoL"][0] / cols["MoL"][1])
    ta, tb = total("gen-0006", A), total("gen-0007", A)
    rec.add("forgetting_pooled", "pooled LoRA on A's held-out tasks after training on B", 100 * tb[0] / max(tb[1], 1),
            "%", compare={"before training on B": 100 * ta[0] / max(ta[1], 1)})
    rec.add("forgetting_mol", "MoL on A's held-out tasks after adding a specialist for B",
            100 * a_mol[0] / max(a_mol[1], 1), "%", note="L1 unchanged (sha256 before and after)")
    rec.write()
    print(f"workspace: {root}" + ("" if args.keep else " (temporary, removed)"))
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
