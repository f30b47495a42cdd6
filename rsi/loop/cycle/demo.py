"""`rsi demo`: one cycle sized for a 2-core machine with the bundled SmolLM2-135M, on a workspace it creates."""

from __future__ import annotations

from pathlib import Path

from rsi.loop.cycle.phase import CycleRequest

# Discover draws from all seven procedural families at levels 1 and 2 (67 templates, each worded 4+ ways). The
# contract splits by template and by phrasing: about 20 % of the templates are never trained on (the unseen part:
# transfer) and the last phrasing of every other template is never trained on (the in-skill part: the skill in new
# words). The holdout is topped up to DEMO_HOLDOUT_TEMPLATES unseen templates and DEMO_IN_SKILL_TEMPLATES train
# templates in held-out phrasings, of every family (those it lacks first). Train candidates come from the bundled
# model's reach: the requests take level 1 twice before level 2 (a level-2 task of any family, and a level-1 task
# outside `files` and `text`, it practically never solves, so it yields nothing to learn from), and `files` and
# `text` twice in each round of the families. Probes and baseline attempts are several per task, so the tasks
# it sometimes solves yield accepted trajectories and groups with reward variance.
DEMO_FAMILIES = ("files", "text", "data", "logs", "pyfix", "pipeline", "shell")
DEMO_GENERATORS = ("files", "text", "data", "logs", "files", "text", "pyfix", "pipeline", "shell")  # in turn
DEMO_LEVELS = (1, 1, 2)  # in turn: level 1 twice, then level 2
DEMO_TRAIN = {"steps": 48, "batch_size": 4, "max_seq_len": 1024}
DEMO_IN_TEMPLATE = 1  # promote's trials per train task and generation for the in-template rate (not gated)
DEMO_HOLDOUT_TEMPLATES = 8  # unseen templates; with 5 (the clustered test's minimum) every one must improve
DEMO_IN_SKILL_TEMPLATES = 8  # train templates in held-out phrasings: the in-skill part


def demo_request(budget: float) -> CycleRequest:
    # the demo's workspace starts empty, so discover gets more than the default share: train tasks and the
    # holdout split the paired test needs both come from it (one holdout task per template it tops up)
    return CycleRequest(budget=budget, discover_share=0.65, holdout_target=DEMO_HOLDOUT_TEMPLATES,
                        in_skill_target=DEMO_IN_SKILL_TEMPLATES, n=12,
                        generators=list(DEMO_GENERATORS), levels=list(DEMO_LEVELS), attempts=2, expand_attempts=4,
                        proposals=1, round_size=4, steps=DEMO_TRAIN["steps"], concurrency=2)


def demo_settings(root: Path) -> None:
    """The demo's training numbers in the workspace's rsi.yaml (where `rsi update` reads them), and its
    contract asks promote for the in-template rate (DEMO_IN_TEMPLATE trials per train task and generation),
    so one run reports the template-disjoint holdout, the suite and in-template side by side."""
    import yaml

    from rsi.store.files import write_atomic

    path = root / "rsi.yaml"
    data = yaml.safe_load(path.read_text()) or {}
    train = data.setdefault("train", {})
    train.update(DEMO_TRAIN)
    write_atomic(path, yaml.safe_dump(data, sort_keys=False))
    contract = root / str(data["contract"])
    text = contract.read_text()
    key = "in_template_trials_per_task: 0"
    if key in text:  # the shipped contract's line, comments kept
        write_atomic(contract, text.replace(key, f"in_template_trials_per_task: {DEMO_IN_TEMPLATE}"))


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
        raw["mol"] = {"domains": DEMO_MOL_DOMAINS}
        cfg = HarnessConfig.model_validate(raw)
        write_atomic(path, cfg.canonical_yaml())
        m = g0.model_copy(update={"harness_config": HarnessRef(name=cfg.name, digest=cfg.digest())})
        ctx.store.put_generation(m)
        write_yaml_model(ctx.ws.generations_dir / "gen-0000.yaml", m)
        return cfg.digest()
    finally:
        ctx.store.close()


__all__ = ["DEMO_FAMILIES", "DEMO_MOL_DOMAINS", "demo_mol_settings",
           "DEMO_GENERATORS", "DEMO_HOLDOUT_TEMPLATES", "DEMO_IN_SKILL_TEMPLATES", "DEMO_IN_TEMPLATE", "DEMO_LEVELS",
           "DEMO_TRAIN", "demo_request", "demo_settings"]
