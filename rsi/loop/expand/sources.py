"""Expand's training-data sources (DESIGN §12), run after the baseline and its attribution controls:

- **oracle replays**: every train task's reference replayed through the production harness (agent
  `oracle-replay`, `replays` per task; no model call, so they are cheap), graded by the verifier;
- **hinted rollouts**: for train tasks the generation fails, its own rollouts with an escalating hint (agent
  `hinted`, variants `hint-1` .. `hint-3`), `hint_attempts` per task and level; a task leaves the ladder at its
  first pass. At most `hint_tasks` tasks climb it (None: every failed one).

Both run under the base config of the expand job (the production harness) and only on the pool's train tasks, so
no holdout or suite task ever reaches a hint or a replay. Their trials never count as the generation's passes
(rsi.core.arm's model arms); update reads them as `oracle` and `hinted:<level>` samples.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsi.core.arm import Arm
from rsi.core.replay import HINT_LEVELS, REPLAY_STYLES
from rsi.core.trial import is_infra
from rsi.loop.arms import ArmPlan
from rsi.loop.context import WorkspaceContext
from rsi.loop.expand.evidence import Pool
from rsi.loop.stages import ChildJobs, Stage

REPLAY, HINTED = "oracle-replay", "hinted"


@dataclass
class SourcesPlan:
    replays: int = 1  # oracle replays per train task (deterministic: more than 1 only re-checks the reference)
    replay_style: str = "plain"  # plain | look | careful (rsi.core.replay.REPLAY_STYLES): the replay arm's variant
    # the hint ladder, lowest first; empty (the default of a plain `rsi expand`): no hinted rollouts, since they
    # cost model trials the config search would otherwise spend (`rsi cycle` and `rsi demo` climb it)
    hints: tuple[int, ...] = ()
    hint_attempts: int = 1  # hinted rollouts per task and level
    hint_tasks: int | None = None  # at most this many failed tasks climb the ladder (None: all)

    def check(self) -> list[str]:
        bad = [lv for lv in self.hints if lv not in HINT_LEVELS]
        out = [f"--hints: {bad} not in {list(HINT_LEVELS)}"] if bad else []
        if self.replay_style not in REPLAY_STYLES:
            out.append(f"--replay-style: '{self.replay_style}' is not one of {', '.join(REPLAY_STYLES)}")
        if self.replays < 0:
            out.append("--replays: must be 0 or more")
        if self.hint_attempts < 1:
            out.append("--hint-attempts: must be at least 1")
        if self.hint_tasks is not None and self.hint_tasks < 0:
            out.append("--hint-tasks: must be 0 or more")
        return out


@dataclass
class SourcesSummary:
    replays: dict[str, int] = field(default_factory=lambda: {"tasks": 0, "trials": 0, "passed": 0})
    hinted: dict[str, dict[str, int]] = field(default_factory=dict)  # level -> tasks, trials, passed

    def as_json(self) -> dict[str, Any]:
        return {"replays": self.replays, "hinted": self.hinted}


def _rows(ctx: WorkspaceContext, gen_id: str, pool: Pool, agent: str) -> dict[tuple[str, str | None], list[Any]]:
    """Finished trials of `agent` on the pool under the base config, by (task name, variant)."""
    name_of = {t.digest: t.name for t in pool.tasks}
    out: dict[tuple[str, str | None], list[Any]] = defaultdict(list)
    for row in ctx.store.outcomes("expand", generation=gen_id, task_digests=list(name_of), agent=agent):
        if row.harness_config_digest == pool.base_digest and not is_infra(row.error_type):
            out[(name_of[row.task_digest], row.variant)].append(row)
    return out


def _trim(cells: list[tuple[str, str, int]], room: list[int | None]) -> list[tuple[str, str, int]]:
    """The cells that fit in `room[0]` trials (None: all), in order; `room[0]` is reduced by what they take."""
    out = []
    for name, arm, n in cells:
        if n <= 0:
            continue
        take = n if room[0] is None else min(n, room[0])
        if take > 0:
            out.append((name, arm, take))
            if room[0] is not None:
                room[0] -= take
    return out


def run_sources(ctx: WorkspaceContext, gen_id: str, base: ArmPlan, pool: Pool, runner: ChildJobs, plan: SourcesPlan,
                failed: list[str], cap: int | None = None) -> str | None:
    """Run the replays, then the hint ladder over `failed` (task names the baseline never passed), at most `cap`
    trials in all (None: no cap; expand leaves the search half of what the baseline left, as for the attribution
    controls); returns why the job must stop (budget, Ctrl-C), else None."""
    room: list[int | None] = [cap]
    if base.config is not None and base.config.is_external:
        return None  # replays and hints are turns of rsi's own loop; an external harness's data is its own calls
    gen = base.generation
    dirs = [Path(t.path) for t in pool.tasks]
    if plan.replays > 0:
        style = None if plan.replay_style == "plain" else plan.replay_style  # plain: the arm as `rsi run` makes it
        arm = ArmPlan(Arm(agent=REPLAY, generation=gen_id, config_digest=base.arm.config_digest, variant=style), gen,
                      base.config)
        have = _rows(ctx, gen_id, pool, REPLAY)
        cells = [(t.name, arm.arm.id, plan.replays - len(have.get((t.name, style), []))) for t in pool.tasks]
        res = runner.run(Stage("replays", [arm], _trim(cells, room), dirs, part="sources"))
        if res.stop:
            return res.stop
    climbing = list(failed)[: plan.hint_tasks] if plan.hint_tasks is not None else list(failed)
    for level in sorted(plan.hints):
        have = _rows(ctx, gen_id, pool, HINTED)
        passed = {name for (name, _v), rows in have.items() if any(r.passed for r in rows)}
        climbing = [n for n in climbing if n not in passed]
        if not climbing:
            break
        variant = f"hint-{level}"
        arm = ArmPlan(Arm(agent=HINTED, generation=gen_id, config_digest=base.arm.config_digest, variant=variant),
                      gen, base.config)
        cells = [(n, arm.arm.id, plan.hint_attempts - len(have.get((n, variant), []))) for n in climbing]
        res = runner.run(Stage(f"hinted-{level}", [arm], _trim(cells, room), dirs, part="sources"))
        if res.stop:
            return res.stop
    return None


def sources_summary(ctx: WorkspaceContext, gen_id: str, pool: Pool) -> SourcesSummary:
    """Replays and hinted rollouts recorded for the pool under the base config: tasks, trials, passes."""
    name_of = {t.digest: t.name for t in pool.tasks}
    tasks: dict[str, set[str]] = defaultdict(set)
    trials: dict[str, int] = defaultdict(int)
    passed: dict[str, int] = defaultdict(int)
    for agent in (REPLAY, HINTED):
        for row in ctx.store.outcomes("expand", generation=gen_id, task_digests=list(name_of), agent=agent):
            if row.harness_config_digest != pool.base_digest or is_infra(row.error_type):
                continue
            key = "replays" if agent == REPLAY else (row.variant or "?")
            tasks[key].add(row.task_name)
            trials[key] += 1
            passed[key] += bool(row.passed)

    def line(key: str) -> dict[str, int]:
        return {"tasks": len(tasks[key]), "trials": trials[key], "passed": passed[key]}

    return SourcesSummary(replays=line("replays"),
                          hinted={k: line(k) for k in sorted(tasks) if k != "replays"})


__all__ = ["HINTED", "REPLAY", "SourcesPlan", "SourcesSummary", "run_sources", "sources_summary"]
