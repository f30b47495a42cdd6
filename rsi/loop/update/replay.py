"""Update's replay: accepted trajectories of earlier generations mixed into the dataset, across templates.

Earlier generations are the lineage (parent, its parent, ...), not rejected siblings. Their trials are read
as update reads its own (train split only, the holdout sealed in SQL) and pass the same gates: each must have
run under a config whose behaviour equals the serving config (a mismatch is refused, as for current trials), a
regression-suite task never trains, and the contract's acceptance rules pick its accepted ones.
`rsi.core.training.choose_replay` then takes at most `training.replay_cap` of them, round-robin across
templates (templates the current data lacks first), within the per-template cap and never from the
validation slice. A replayed trajectory trains by SFT only (its advantage is 0: the policy that sampled it
is gone); its dataset line says `replay` and the generation it came from, so the dataset digest covers it.

A config adopted by expand changes the prompts between generations, and a strict config gate would then
refuse every earlier trajectory (replay would be empty from the second cycle on). An ancestor's trajectory
whose config differs from the serving one only in prompt text, few-shot examples or sampling is therefore
re-rendered: its head (system, few-shot, instruction) is rendered again under the serving config from the
variables the harness recorded, and its turns (actions and observations) are kept, because the action
format, tools and loop that produced them are the same. Any other difference is refused as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsi.core.errors import ConfigError, NotFoundError
from rsi.core.generation import GenerationManifest
from rsi.core.harness_config import HarnessConfig
from rsi.core.training import Selection, TrialRecord, choose_replay, select
from rsi.harness.atif import load_trajectory
from rsi.harness.prompts import initial_messages
from rsi.loop.context import WorkspaceContext
from rsi.loop.suites import suite_digests
from rsi.loop.update.data import ConfigGate, LoadedTrial, config_differences, dataset_line, load_trial
from rsi.store.files import load_pool
from rsi.train.dataset import DatasetLine

# a union update (`train.init: base`) replays every accepted sample of the lineage, from each agent that trains
UNION_AGENTS = ("harness", "hinted", "oracle-replay")
UNION_CAP = 1_000_000

# fields a replayed trajectory can be re-rendered across: they shape the prompt's head or how it was
# sampled, not the turns (action format, tools, loop and model settings shape those)
RERENDERABLE = ("prompt.", "sampling.")


@dataclass
class ReplayGate(ConfigGate):
    """The config gate for replay: also passes configs that differ only in RERENDERABLE fields, and
    remembers which digests need their head rendered again."""

    rerender: set[str] = field(default_factory=set)

    def _check(self, digest: str) -> str | None:
        why = super()._check(digest)
        if why is None:
            return None
        try:
            cfg = self.ctx.config_by_digest(digest)
        except ConfigError:
            return why
        if all(d.startswith(RERENDERABLE) for d in config_differences(cfg, self.serving)):
            self.rerender.add(digest)
            return None
        return why


def rerender(t: LoadedTrial, serving: HarnessConfig, config_dir: Path) -> LoadedTrial | str:
    """`t` with its head rendered under the serving config (its turns kept), or why that cannot be done."""
    path = Path(t.trial_dir) / "trajectory.json"
    try:
        variables = load_trajectory(path).rsi.get("prompt_variables")
    except (OSError, ValueError):
        variables = None
    if not isinstance(variables, dict):
        return "mismatch: ran under other prompts and records no prompt variables to render them again"
    try:
        head = initial_messages(serving, variables, config_dir=config_dir)
    except ConfigError as e:
        return f"mismatch: its head does not render under the serving config: {e}"
    messages = head + t.messages[t.prompt_messages:]
    # the recorded token ids belong to the old head: the line trains from its messages
    return LoadedTrial(record=t.record, messages=messages, tools=t.tools, prompt_messages=len(head), tokens=None,
                       job_id=t.job_id, trial_dir=t.trial_dir, rerendered=True)


@dataclass
class Replay:
    lines: list[DatasetLine] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def task_templates(ctx: WorkspaceContext) -> dict[str, str | None]:
    """Task digest -> its template id (None for a task without one) for the tasks in the workspace."""
    return {t.digest: t.spec.metadata.rsi.template for t in load_pool(ctx.ws.tasks_dir)}


def lineage(ctx: WorkspaceContext, gen: GenerationManifest) -> list[str]:
    """The generation's ancestors, parent first."""
    out: list[str] = []
    parent = gen.parent
    while parent and parent not in out:
        out.append(parent)
        try:
            parent = ctx.store.get_generation(parent).parent
        except NotFoundError:
            break
    return out


def training_counts(sel: Selection) -> dict[str, int]:
    """Per template, how many of the current selection's trajectories train (accepted or carrying a signal)."""
    keep, accepted = set(sel.dataset_ids()), set(sel.accepted)
    out: dict[str, int] = {}
    for r in sel.usable:
        if r.trial_id in keep and (r.trial_id in accepted or sel.advantages.get(r.trial_id, 0.0) != 0.0):
            out[r.unit] = out.get(r.unit, 0) + 1
    return out


def gather_replay(ctx: WorkspaceContext, gen: GenerationManifest, cfg: HarnessConfig, cfg_digest: str,
                  max_turns: int, templates: dict[str, str | None], sel: Selection, *,
                  union: bool = False) -> Replay:
    """The replay lines for an update of `gen` whose own selection is `sel`, and what was chosen and why not.

    `union` (a fresh LoRA from the base, `train.init: base`): every accepted sample of the lineage from every
    source agent (its own rollouts, hinted rollouts, oracle replays), with no replay cap; the per-template cap
    and the validation slice still hold."""
    rules = ctx.contract.training
    ancestors = lineage(ctx, gen)
    cap = UNION_CAP if union else rules.replay_cap
    agents = UNION_AGENTS if union else ("harness",)
    summary: dict[str, Any] = {"cap": cap if not union else "union", "generations": ancestors, "accepted": 0,
                               "used": 0, "refused": {}, "not_used": {}, "templates": {}}
    if cap <= 0 or not ancestors:
        return Replay(summary=summary)
    loaded: dict[str, LoadedTrial] = {}
    accepted: list[TrialRecord] = []
    refused: dict[str, int] = {}
    suites = suite_digests(ctx)
    for anc in ancestors:
        gate = ReplayGate(ctx, anc, cfg, cfg_digest)
        mine: dict[str, LoadedTrial] = {}
        rows = [row for agent in agents for row in ctx.store.outcomes("update", generation=anc, agent=agent)]
        for row in rows:
            why = gate.refusal(row) if row.task_digest not in suites else \
                "suite task: the regression suites (promotion.suites) are never training data"
            got = why if why is not None else load_trial(row, ctx.ws.root, max_turns,
                                                         template=templates.get(row.task_digest))
            if not isinstance(got, str) and row.harness_config_digest in gate.rerender:
                got = rerender(got, cfg, ctx.ws.harness_configs_dir)
            if isinstance(got, str):
                key = got.split(":")[0]
                refused[key] = refused.get(key, 0) + 1
            else:
                mine[row.id] = got
        if mine:
            anc_sel = select([t.record for t in mine.values()], ctx.contract)
            accepted += [mine[t].record for t in anc_sel.accepted]
            loaded.update(mine)
    acc = set(sel.accepted)
    kept: dict[str, list[TrialRecord]] = {}
    for r in sel.usable:
        if r.trial_id in acc:
            kept.setdefault(r.task_digest, []).append(r)
    chosen, why_not = choose_replay(
        accepted, training_counts(sel), cap=cap, per_template_cap=rules.per_template_cap,
        validation_fraction=rules.validation_fraction, kept=kept,
        near_duplicate_threshold=ctx.contract.acceptance.near_duplicate_threshold)
    lines = []
    for r in chosen:
        ln = dataset_line(loaded[r.trial_id], accepted=True, group_id=f"replay-{r.trial_id}", sample_index=0,
                          advantage=0.0, serving_digest=cfg_digest)
        ln.provenance["replay"] = True
        if loaded[r.trial_id].rerendered:
            ln.provenance["rerendered"] = True
            summary["rerendered"] = summary.get("rerendered", 0) + 1
        lines.append(ln)
        summary["templates"][r.unit] = summary["templates"].get(r.unit, 0) + 1
    not_used: dict[str, int] = {}
    for why in why_not.values():
        not_used[why.split(":")[0]] = not_used.get(why.split(":")[0], 0) + 1
    summary.update(accepted=len(accepted), used=len(chosen), refused=refused, not_used=not_used,
                   trials=[r.trial_id for r in chosen])
    return Replay(lines=lines, summary=summary)


__all__ = ["RERENDERABLE", "Replay", "ReplayGate", "gather_replay", "lineage", "rerender", "task_templates",
           "training_counts"]
