"""`rsi demo`: one cycle sized for a 2-core machine with the bundled SmolLM2-135M, on a workspace it creates."""

from __future__ import annotations

import re
from pathlib import Path

from rsi.loop.cycle.phase import CycleRequest
from rsi.loop.expand.sources import SourcesPlan

DEMO_FAMILIES = ("files", "text", "data", "logs", "pyfix", "pipeline", "shell")
DEMO_GENERATORS = DEMO_FAMILIES
DEMO_LEVELS = (1, 2)
# Enough to learn from (issue 36): the bundled 135M model passes ~5 % of level-1 tasks, so its own rollouts alone
# give a handful of samples. Every admitted train task's reference is replayed through the production harness
# (an `oracle` sample: cheap, no model call), the model retries a few failed tasks with a hint (STaR), and the
# update trains on the mixture. Discover aims its candidates at the train templates in turn (about 4 instances
# of each of ~50 templates) and probes one per template (the others take its band); expand's baseline runs on that
# one per template (reusing the probe) and no config search runs, so the model's trials go to the hints and to
# promote. The LoRA covers every linear layer (attention and MLP); a step takes whole trajectories until it
# holds `batch_size` turns (rsi.train.packing), so 260 steps of 8 turns are about two epochs of ~220 samples (~4.7
# turns each). No validation slice (the contract's training.validation_fraction is 0 here): on the first measured
# run its curve, four completions of held-out templates, stopped training at step 24 of 200 (a fifth of an epoch)
# and the candidate had learned the look and the check of the replays without the command between them.
DEMO_TRAIN_TASKS = 230  # train candidates discover aims at the train templates (~4.5 per template)
DEMO_TRAIN = {"steps": 260, "batch_size": 8, "max_seq_len": 1024,
              "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]}
DEMO_HINT_TASKS = 12  # failed train tasks that climb the hint ladder (2: first command, 3: reference)
# Level 1 (the tools the reference uses) is left out of the demo's ladder: measured, 0 of 12 passed at 43 s each
# (the 135M model runs out its turns), where level 2 passed 4 of 12 and level 3 2 of 8. `rsi expand --hints 1,2,3`.
DEMO_HINTS = (2, 3)
DEMO_IN_TEMPLATE = 1  # promote's trials per train task and generation for the in-template rate (not gated) ...
DEMO_IN_TEMPLATE_TASKS = 16  # ... on at most this many train tasks, one per template first
DEMO_LOOKS = 2  # promote measures in two rounds and stops after the first when the answer is clear
# ... with alpha spent by Pocock's rule, whose first bound (0.031) a clear gain can meet after one round, where
# O'Brien-Fleming's (0.0056) asks for nearly every template better (benchmarks/sequential.py simulates both).
DEMO_SPENDING = "pocock"
# Each holdout part is 16 templates x 2 trials per generation, not 8 x 4: the same trials, twice the clusters. The
# paired test is clustered on templates; with 8 it is the exact permutation test, which can only say 1/256,
# 2/256, ...: at the demo's Pocock bounds it promoted 0.65 % of candidates equal to their parent (alpha 0.05) and
# 12 % of candidates that had learned half the compositions (each to 0.2-0.8); with 16 x 2 (Wilcoxon over the
# templates), 4.1 % and 67 % (benchmarks/sequential.py, records/sequential.json, 2000 runs a cell: simulated,
# never a holdout result; O'Brien-Fleming there: 4.1 % and 73 %, for a later stop). The demo's levels hold 16
# unseen templates and 22 held-out level-3 compositions.
DEMO_TRIALS = 2  # promotion.trials_per_task: per holdout task and generation
DEMO_HOLDOUT_TEMPLATES = 16  # unseen templates
# The non-inferiority margins (unseen part, suite) follow from the parts' sizes alone, never from a result
# (rsi.core.noninferiority.design_margin): the smallest margin at which a candidate truly equal to its parent at
# the worst rate (0.5) passes the last look with probability DEMO_NI_POWER. The demo's unseen part (16 templates x
# 2 trials = 32 per arm) gets 0.30: a test that can fail and that a candidate no worse than its parent passes;
# benchmarks/noninferiority.py simulates its type-I error and power there.
DEMO_NI_POWER = 0.8
DEMO_IN_SKILL_TEMPLATES = 16  # the in-skill part each cycle draws afresh: held-out compositions of trained operations
# The in-skill part asks held-out compositions (two or three trained operations in a combination never trained):
# a demo that trains on single operations only never shows the model a combination, and its first measured run
# (benchmarks/records/demo.json, a10e2af) moved the train templates (in-template 0 -> 6/16) and no composition
# (0 -> 0/16). So discover also aims DEMO_COMPOSITIONS candidates at the *train* compositions of level 3 (one per
# combination, in turn), whose oracle replays train beside the single operations. Chosen on train-side data
# (benchmarks/train_validation.py, records/train_validation.json), never on the holdout: with them the candidate
# ran two commands or more on 28 of 32 train compositions it never trained on (0 of 32 without), and passed 17 of
# 32 fresh instances of its trained single operations (8 of 32 without, p = 0.004). One value was tried.
DEMO_COMPOSITIONS = 48
# trials: promote ~320 first (2 generations x 2 trials x (34 holdout + 48 suite tasks)); discover 0.8
# of the rest, of which the compositions (48 x 7) and the holdout top-ups (32 x 6) are set aside first, leaving
# the main discover the ~1390 trials its 230 candidates are planned at (gate ~6 each; it stops at its budget);
# expand the other 0.2 (~500, of which it spends ~300)
DEMO_BUDGET = 2750


def demo_request(budget: float) -> CycleRequest:
    # the demo's workspace starts empty, so discover gets most of what promote leaves: train tasks and the
    # holdout split the paired test needs both come from it (one holdout task per template it tops up)
    return CycleRequest(budget=budget, discover_share=0.8, holdout_target=DEMO_HOLDOUT_TEMPLATES,
                        in_skill_target=DEMO_IN_SKILL_TEMPLATES, n=DEMO_TRAIN_TASKS, train_templates=True,
                        probe_per_template=1, baseline_per_template=1, search=False, fewshot=0,
                        sources=SourcesPlan(replays=1, hints=DEMO_HINTS, hint_attempts=1,
                                            hint_tasks=DEMO_HINT_TASKS),
                        generators=list(DEMO_GENERATORS), levels=list(DEMO_LEVELS), attempts=1, expand_attempts=1,
                        compositions=DEMO_COMPOSITIONS,
                        # steps: rsi.yaml's train.steps (DEMO_TRAIN), so a resumed cycle trains the same
                        proposals=0, round_size=4, steps=None, concurrency=3)


def demo_settings(root: Path) -> None:
    """The demo's training numbers in the workspace's rsi.yaml (where `rsi update` reads them), and its
    contract's promotion asks for the in-template rate (DEMO_IN_TEMPLATE trials on DEMO_IN_TEMPLATE_TASKS train
    tasks per generation) and measures in DEMO_LOOKS rounds spending alpha by DEMO_SPENDING, so one run reports
    both holdout parts, the suite and in-template side by side and stops early when the answer is clear."""
    import yaml

    from rsi.store.files import write_atomic

    path = root / "rsi.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    train = data.setdefault("train", {})
    train.update(DEMO_TRAIN)
    write_atomic(path, yaml.safe_dump(data, sort_keys=False))
    contract = root / str(data["contract"])
    text = contract.read_text()
    for key, value in (("trials_per_task", DEMO_TRIALS), ("in_template_trials_per_task", DEMO_IN_TEMPLATE),
                       ("in_template_max_tasks", DEMO_IN_TEMPLATE_TASKS), ("looks", DEMO_LOOKS),
                       ("spending", DEMO_SPENDING),
                       *demo_margins(root, yaml.safe_load(text).get("promotion") or {}).items(),
                       ("validation_fraction", 0)):
        text, n = re.subn(rf"^(  {key}:) \S+", rf"\1 {value}", text, count=1, flags=re.MULTILINE)
        if not n:
            raise ValueError(f"{contract}: promotion.{key} not found to set for the demo")
    write_atomic(contract, text)


def demo_margins(root: Path, promotion: dict[str, object]) -> dict[str, float]:
    """unseen_margin, no_forgetting_margin and suite_margin for the demo's shape: design_margin over each part's
    trials per arm (DEMO_HOLDOUT_TEMPLATES or DEMO_IN_SKILL_TEMPLATES x trials_per_task; the suites' tasks x
    suite_trials_per_task) at the last look's
    non-inferiority bound under DEMO_LOOKS."""
    from rsi.core.contract import Promotion
    from rsi.core.noninferiority import design_margin
    from rsi.core.promotion import look_bounds

    promo = Promotion.model_validate({**promotion, "looks": DEMO_LOOKS, "spending": DEMO_SPENDING,
                                      "trials_per_task": DEMO_TRIALS})
    level = look_bounds(promo, promo.noninferiority_spending)[-1]
    suite = sum(1 for s in promo.suites if (root / s).is_dir() for d in (root / s).iterdir() if d.is_dir())
    out = {"unseen_margin": design_margin(DEMO_HOLDOUT_TEMPLATES * promo.trials_per_task, level, DEMO_NI_POWER),
           # the no-forgetting part: an earlier cycle's in-skill part (DEMO_IN_SKILL_TEMPLATES templates, at least)
           "no_forgetting_margin": design_margin(DEMO_IN_SKILL_TEMPLATES * promo.trials_per_task, level,
                                                 DEMO_NI_POWER)}
    if suite:
        out["suite_margin"] = design_margin(suite * promo.suite_trials_per_task, level, DEMO_NI_POWER)
    return out


# `rsi demo --mol`: four adapters on the frozen base. L0 chats and routes; files-like work shares one
# specialist, data and logs another, Python fixes get their own (skills that share patterns share an adapter).
DEMO_MOL_DOMAINS = {"L0": [], "L1": ["files", "text", "pipeline", "shell"], "L2": ["data", "logs"], "L3": ["pyfix"]}


def demo_mol_settings(root: Path) -> str:
    """Give the workspace's harness config the demo's `mol` section and re-register gen-0000 under it, so
    `rsi update` makes a Mixture-of-LoRA candidate (one adapter per label) and `rsi promote` gates its routing.
    Returns the config's new digest."""
    import yaml

    from rsi.core.generation import HarnessRef
    from rsi.core.harness_config import HarnessConfig
    from rsi.loop.context import WorkspaceContext
    from rsi.store.files import write_atomic, write_yaml_model

    ctx = WorkspaceContext.open(root)
    try:
        g0 = ctx.generation("gen-0000")
        path = ctx.ws.harness_configs_dir / f"{g0.harness_config.name}.yaml"
        raw = yaml.safe_load(path.read_text())
        raw["mol"] = {"domains": DEMO_MOL_DOMAINS, "route_legend": True}  # L0 is trained fresh, in this form
        cfg = HarnessConfig.model_validate(raw)
        write_atomic(path, cfg.canonical_yaml())
        m = g0.model_copy(update={"harness_config": HarnessRef(name=cfg.name, digest=cfg.digest())})
        ctx.store.put_generation(m)
        write_yaml_model(ctx.ws.generations_dir / "gen-0000.yaml", m)
        return cfg.digest()
    finally:
        ctx.store.close()


__all__ = ["DEMO_BUDGET", "DEMO_COMPOSITIONS", "DEMO_FAMILIES", "DEMO_MOL_DOMAINS", "demo_mol_settings", "fresh_seed",
           "DEMO_GENERATORS", "DEMO_HOLDOUT_TEMPLATES", "DEMO_IN_SKILL_TEMPLATES", "DEMO_IN_TEMPLATE", "DEMO_LEVELS",
           "DEMO_NI_POWER", "DEMO_SPENDING", "DEMO_TRAIN", "demo_margins", "demo_request", "demo_settings"]


def fresh_seed() -> int:
    """A demo's first-cycle seed when none is given: drawn at random (1..1,000,000), so every demo run draws its
    own tasks and its own sealed holdout, which no constant of the demo was chosen on."""
    import secrets

    return secrets.randbelow(1_000_000) + 1
