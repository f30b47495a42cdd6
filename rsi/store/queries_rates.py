"""A generation's pass rate on a task set: the one computation behind every rate rsi shows.

The viewer's compare grid, `rsi diff` (terminal, Markdown, HTML, JSON) and the report all read a rate through
`RateQueries.pass_tally`, and it counts what the promote gate (rsi.loop.promote.phase) counts:

- **model arms only**: trials of the agents that score a generation (rsi.core.arm.MODEL_AGENTS, plus the agent a
  recorded promote measured as the model, e.g. a scripted stand-in in tests). The oracle, nop, known-wrong,
  oracle-replay and hinted agents are controls or data sources: a task's oracle pass says the task is valid, it
  is no score. A tally of a control arm is asked for by naming that arm, and is shown apart;
- **the generation's own config** (its manifest's harness config digest) unless configs are named: a variant
  that expand tried is another arm, not the generation;
- **never a discover job's gate or probe trials** for a model arm (the probe selected the tasks); a control's
  trials count wherever they ran (discover's gate is where most of them come from);
- **infra errors counted apart**, never graded (rsi.core.trial.is_infra, via INFRA_ERROR_TYPES); for model arms,
  trials graded at an integrity level the contract does not accept for promotion are left out, and per task
  only the first K graded trials (oldest first) count where the scope names a K — what promote reuses;
- **the task set** by part: `holdout` (split holdout, the regression suites' tasks left out), `suite` (the
  contract's suites), `train`; retired tasks left out of the holdout and train parts, as promote leaves them;
- **the holdout's two parts**: each holdout task's part (`[metadata.rsi] holdout_part` in its task.toml: `in_skill`
  or `unseen`; a task naming none counts as `unseen`, as promote counts it) comes with the scope
  (`task_parts`, read from the task files by rsi.report.rates, like the suites' digests), and `holdout_part`
  keeps one part only. Every holdout TaskTally says its part, so one tally splits by part without a second read.

A tally keeps the id of every trial it counted, so a figure links to exactly the trials behind it.
Plain SQL over `_tuples`, like rsi.store.queries_diff: the light `sqlite3` reader runs it too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rsi.core.arm import MODEL_AGENTS
from rsi.core.errors import NotFoundError
from rsi.core.generation import GenerationManifest
from rsi.core.promotion import PART_LABEL
from rsi.core.trial import BLAME

# error types blamed on infrastructure: such trials are neither a pass nor a failure of the model
INFRA_ERROR_TYPES: tuple[str, ...] = tuple(sorted(e.value for e, blame in BLAME.items() if blame == "infra"))
INFRA_SQL = "(" + ", ".join(f"'{e}'" for e in INFRA_ERROR_TYPES) + ")"  # a SQL list of them
PROBE_JOBS = ("SELECT id FROM jobs WHERE kind = 'discover' OR parent_job IN "
              "(SELECT id FROM jobs WHERE kind = 'discover')")
DONE = "done"  # rsi.core.trial.TrialStatus.DONE
PARTS = ("holdout", "suite", "train")
HOLDOUT_PARTS = tuple(PART_LABEL)  # the sealed holdout's parts: in_skill, unseen, no_forgetting
HOLDOUT_PART_LABEL = PART_LABEL  # how a page names them: in-skill, unseen-template


@dataclass(frozen=True)
class RateScope:
    """Which trials a rate counts, besides whose (see the module docstring).

    `parts`: task-set parts counted (None: every part); `suite`: digests of the regression suites' tasks;
    `per_task`: part -> K, the first K graded trials per task (a part missing: all of them); `integrity`: the
    levels a trial may be graded at (None: any; a trial with no level recorded always counts, as in promote);
    `configs`: harness config digests counted (None: each generation's own); `family`: one task family only;
    `task_parts`: holdout task name -> the part its task.toml names (`in_skill` | `unseen`; a holdout task missing
    here names none and counts as `unseen`); `holdout_part`: only the holdout tasks of that part."""

    parts: tuple[str, ...] | None = ("holdout",)
    suite: frozenset[str] = frozenset()
    per_task: Mapping[str, int] = field(default_factory=dict)
    integrity: frozenset[str] | None = None
    configs: tuple[str | None, ...] | None = None
    family: str | None = None
    task_parts: Mapping[str, str] = field(default_factory=dict)
    holdout_part: str | None = None

    def __post_init__(self) -> None:
        if self.holdout_part is not None and self.holdout_part not in HOLDOUT_PARTS:
            raise ValueError(f"holdout_part must be one of {', '.join(HOLDOUT_PARTS)}; got {self.holdout_part!r}")

    def part_of(self, name: str) -> str:
        """The holdout part of a holdout task (`unseen` when its task.toml names none)."""
        return self.task_parts.get(name) or "unseen"

    def describe(self) -> str:
        parts = "every part" if self.parts is None else " + ".join(self.parts)
        if self.holdout_part is not None:
            parts = f"holdout, {HOLDOUT_PART_LABEL[self.holdout_part]} part only"
        ks = ", ".join(f"first {k} per {p} task" for p, k in sorted(self.per_task.items())
                       if self.parts is None or p in self.parts)
        return parts + (f" ({ks})" if ks else "") + (f", family {self.family}" if self.family else "")


@dataclass
class TaskTally:
    """One task's counted trials under one column (a generation's model arms, or one arm)."""

    digest: str
    name: str
    part: str
    passes: int = 0
    graded: int = 0  # counted trials: not infra, integrity accepted, within the first K
    infra: int = 0
    left_out: int = 0  # graded by the verifier but not counted: integrity not accepted, or beyond K
    counted: list[str] = field(default_factory=list)  # the ids of the graded trials counted, oldest first
    holdout_part: str | None = None  # a holdout task's part: in_skill | unseen (None: not a holdout task)

    @property
    def rate(self) -> float | None:
        return self.passes / self.graded if self.graded else None


@dataclass
class PassTally:
    """A column's tally per task: a generation's model arms (its own config unless named) or one arm."""

    column: str  # the generation id, or the arm id
    generation: str | None
    agents: tuple[str, ...]  # the agents counted
    configs: tuple[str | None, ...]  # the harness config digests counted (None: trials with no config)
    scope: RateScope
    tasks: dict[str, TaskTally] = field(default_factory=dict)  # task name -> its tally

    def over(self, names: Iterable[str] | None = None) -> tuple[int, int]:
        """(passes, graded) pooled over `names` (None: every task the column ran)."""
        rows = self.tasks.values() if names is None else [self.tasks[n] for n in names if n in self.tasks]
        return sum(t.passes for t in rows), sum(t.graded for t in rows)

    def rate(self, names: Iterable[str] | None = None) -> float | None:
        p, n = self.over(names)
        return p / n if n else None

    def in_part(self, part: str, names: Iterable[str] | None = None) -> list[str]:
        """The holdout tasks of `part` (in_skill | unseen) among `names` (None: every task the column ran)."""
        keep = self.tasks if names is None else [n for n in names if n in self.tasks]
        return [n for n in keep if self.tasks[n].holdout_part == part]

    def counted_ids(self, names: Iterable[str] | None = None) -> list[str]:
        rows = self.tasks.values() if names is None else [self.tasks[n] for n in names if n in self.tasks]
        return [i for t in rows for i in t.counted]

    def covers(self) -> str:
        """`agent harness, config 1a2b3c4d`: whose trials the figure counts."""
        if not self.configs and self.generation is None:
            return f"agent {', '.join(self.agents)}, any generation and config"
        cfgs = ", ".join("none" if c is None else c[:8] for c in self.configs) or "none"
        return f"agent {', '.join(self.agents)}, config {cfgs}"

    def as_json(self) -> dict[str, Any]:
        p, n = self.over()
        return {"column": self.column, "generation": self.generation, "agents": list(self.agents),
                "configs": list(self.configs), "scope": self.scope.describe(), "passes": p, "graded": n,
                "rate": p / n if n else None,
                "infra": sum(t.infra for t in self.tasks.values()),
                "tasks": {k: {"part": t.part, "holdout_part": t.holdout_part, "passes": t.passes,
                              "graded": t.graded, "infra": t.infra, "left_out": t.left_out, "trials": t.counted}
                          for k, t in sorted(self.tasks.items())}}


def _in(prefix: str, values: Iterable[Any]) -> tuple[str, dict[str, Any]]:
    names = {f"{prefix}{i}": v for i, v in enumerate(values)}
    return ", ".join(":" + n for n in names) or "NULL", names


class RateQueries:
    """The pass-rate reads over `_tuples`, which the class that mixes this in provides."""

    def _tuples(self, sql: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def generation_manifest(self, gen_id: str) -> GenerationManifest:
        """A generation's manifest; NotFoundError naming the known ones."""
        rows = self._tuples("SELECT manifest_json FROM generations WHERE id = :id", {"id": gen_id})
        if not rows:
            known = ", ".join(r[0] for r in self._tuples("SELECT id FROM generations ORDER BY id")) or "(none)"
            raise NotFoundError(f"unknown generation '{gen_id}'; known: {known}")
        return GenerationManifest.model_validate_json(rows[0][0])

    def model_agents(self) -> frozenset[str]:
        """The agents whose trials score a generation: rsi.core.arm.MODEL_AGENTS, and any agent a recorded
        promote measured as the model (only tests name another: a scripted stand-in for the model)."""
        extra = set()
        for (params,) in self._tuples("SELECT params_json FROM jobs WHERE kind = 'promote'"):
            agent = (json.loads(params or "{}") or {}).get("agent")
            if isinstance(agent, str) and agent:
                extra.add(agent)
        return MODEL_AGENTS | frozenset(extra)

    def arm_info(self, arm_id: str) -> dict[str, Any]:
        """An arm's agent, generation, config digest and variant (NotFoundError when the store lacks it)."""
        rows = self._tuples("SELECT agent, generation, config_digest, variant FROM arms WHERE id = :id",
                            {"id": arm_id})
        if not rows:
            raise NotFoundError(f"unknown arm '{arm_id}'")
        agent, gen, cfg, variant = rows[0]
        return {"id": arm_id, "agent": agent, "generation": gen, "config_digest": cfg, "variant": variant}

    def trial_briefs(self, ids: Iterable[str]) -> dict[str, dict[str, Any]]:
        """id -> job, passed, error type and trial dir of these trials: what a link to a counted trial shows."""
        inl, names = _in("id", list(ids))
        if not names:
            return {}
        return {str(i): {"id": str(i), "job": j, "passed": bool(p), "error_type": e, "trial_dir": d}
                for i, j, p, e, d in self._tuples(
                    f"SELECT id, job_id, passed, error_type, trial_dir FROM trials WHERE id IN ({inl})", names)}

    def pass_tally(self, scope: RateScope, *, generation: str | None = None, arm: str | None = None,
                   agents: Iterable[str] | None = None) -> PassTally:
        """Per task, the trials a rate counts (see the module docstring): a generation's model arms under its
        own config (or `scope.configs`), or — given `arm` — that one arm, control or model. `agents` narrows a
        generation's model agents (e.g. to the one a promotion measured)."""
        if generation is not None and arm is not None:
            raise ValueError("give a generation or an arm, not both")
        if generation is None and arm is None and not agents:
            raise ValueError("give a generation, an arm or the agents (controls) to count")
        model = self.model_agents()
        where = [f"t.status = '{DONE}'"]
        params: dict[str, Any] = {}
        if arm is not None:
            info = self.arm_info(arm)
            where.append("t.arm_id = :arm")
            params["arm"] = arm
            who: tuple[str, ...] = (str(info["agent"]),)
            cfgs: tuple[str | None, ...] = (info["config_digest"],)
            column, gen = arm, info["generation"]
        elif generation is None:  # these agents (controls) on the task set, whatever generation or config
            who = tuple(sorted(set(agents or ())))
            inl, names = _in("ag", who)
            where.append(f"t.agent IN ({inl})")
            params.update(names)
            cfgs = ()
            column, gen = "+".join(who), None
        else:
            who = tuple(sorted(model if agents is None else set(agents)))
            cfgs = scope.configs if scope.configs is not None else (
                self.generation_manifest(generation).harness_config.digest,)
            inl, names = _in("ag", who)
            where += ["t.generation = :gen", f"t.agent IN ({inl})"]
            params.update(names, gen=generation)
            ors = []
            for i, c in enumerate(cfgs):
                if c is None:
                    ors.append("t.harness_config_digest IS NULL")
                else:
                    ors.append(f"t.harness_config_digest = :cfg{i}")
                    params[f"cfg{i}"] = c
            where.append("(" + " OR ".join(ors or ["0 = 1"]) + ")")
            column, gen = generation, generation
        inl, names = _in("ma", sorted(model))
        where.append(f"(t.agent NOT IN ({inl}) OR t.job_id NOT IN ({PROBE_JOBS}))")  # a model's probe: never
        params.update(names)
        if scope.parts is not None and "suite" not in scope.parts:
            inl, names = _in("sp", scope.parts)
            where.append(f"t.split IN ({inl})")
            params.update(names)
        elif scope.parts is not None and set(scope.parts) == {"suite"}:
            inl, names = _in("sd", sorted(scope.suite))
            where.append(f"t.task_digest IN ({inl})")
            params.update(names)
        if scope.family:
            where.append("t.task_digest IN (SELECT digest FROM tasks WHERE family = :family)")
            params["family"] = scope.family
        rows = self._tuples(
            "SELECT t.task_digest, t.task_name, t.split, t.id, t.passed, t.error_type, t.integrity FROM trials t "
            f"WHERE {' AND '.join(where)} ORDER BY t.task_digest, t.finished_at, t.id", params)
        retired = {d for (d,) in self._tuples("SELECT digest FROM tasks WHERE state != 'active'")}
        out = PassTally(column, gen, who, cfgs, scope)
        gated = any(a in model for a in who)  # promote's integrity levels and K apply to what it measures
        for digest, name, split, tid, passed, error, integrity in rows:
            part = "suite" if digest in scope.suite else str(split)
            if scope.parts is not None and part not in scope.parts:
                continue
            if part != "suite" and digest in retired:
                continue
            held = scope.part_of(name) if part == "holdout" else None
            if scope.holdout_part is not None and held != scope.holdout_part:
                continue
            t = out.tasks.get(name)
            if t is None:
                t = out.tasks[name] = TaskTally(digest, name, part, holdout_part=held)
            if error in INFRA_ERROR_TYPES:
                t.infra += 1
            elif gated and ((scope.integrity is not None and integrity is not None
                             and integrity not in scope.integrity)
                            or ((k := scope.per_task.get(part)) is not None and t.graded >= k)):
                t.left_out += 1
            else:
                t.graded += 1
                t.passes += int(bool(passed))
                t.counted.append(str(tid))
        return out


def promotion_scope(contract: Any, parts: tuple[str, ...] | None = ("holdout",), suite: Iterable[str] = (),
                    family: str | None = None, task_parts: Mapping[str, str] | None = None,
                    holdout_part: str | None = None) -> RateScope:
    """The scope the promote gate counts under `contract` (rsi.core.contract.Contract): K per part (holdout:
    `promotion.trials_per_task`, suite: `suite_trials_per_task`, train: `in_template_trials_per_task` when the
    contract asks for the in-template rate) and the integrity levels `grading.promotion_integrity` accepts;
    `task_parts` and `holdout_part` as RateScope has them."""
    pr = contract.promotion
    per_task = {"holdout": pr.trials_per_task, "suite": pr.suite_trials_per_task}
    if pr.in_template_trials_per_task:
        per_task["train"] = pr.in_template_trials_per_task
    levels = frozenset(str(getattr(x, "value", x)) for x in contract.grading.promotion_integrity)
    return RateScope(parts=parts, suite=frozenset(suite), per_task=per_task, integrity=levels, family=family,
                     task_parts=dict(task_parts or {}), holdout_part=holdout_part)


__all__ = ["DONE", "HOLDOUT_PARTS", "HOLDOUT_PART_LABEL", "INFRA_ERROR_TYPES", "INFRA_SQL", "PARTS", "PROBE_JOBS",
           "PassTally", "RateQueries", "RateScope", "TaskTally", "promotion_scope"]
