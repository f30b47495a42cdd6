"""Arms and trial specs: what acts, fully pinned, and one attempt of it at one task.

An **arm** is (agent, generation, harness config digest, optional variant label). A job may hold
trials of many arms side by side (two configs of one generation, parent and candidate, oracle and
nop controls). A **trial spec** names the task (by digest), the arm and the attempt; its id is an
idempotency key that includes the arm, so a trial re-run after a crash or a node loss is recorded
once. Both are plain, serialisable data: an executor on another machine receives them as JSON.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from rsi.core.digest import digest_obj
from rsi.core.model import RsiModel

# Agents whose trials measure the model-harness pair: the production harness and, later, an external harness
# behind the recording gateway. Every other agent is a control or a data source (oracle, nop, known_wrong,
# oracle-replay, hinted, ...): its passes say something about the task or feed training, never score a
# generation. Every pass rate rsi shows for a generation counts these agents' arms only
# (rsi.store.queries_rates).
MODEL_AGENTS: frozenset[str] = frozenset({"harness", "external"})


def is_model_arm(agent: str) -> bool:
    """Whether trials of `agent` count toward a generation's pass rate (else: a control, shown apart)."""
    return agent in MODEL_AGENTS


class Arm(RsiModel):
    """What acts in a trial. Equal arms have equal ids."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    agent: str
    generation: str | None = None
    config_digest: str | None = None
    variant: str | None = None  # a label such as "sampling.temperature=0.2"; None = the config as is

    @property
    def id(self) -> str:
        """A short stable id: `<agent>-<8 hex>` (the hex covers every field)."""
        return f"{self.agent}-{digest_obj(self.model_dump(mode='json'))[:8]}"

    @property
    def label(self) -> str:
        """A human label for summaries: agent, generation, config digest and variant."""
        parts = [self.agent]
        if self.generation:
            parts.append(self.generation)
        if self.config_digest:
            parts.append(self.config_digest[:8])
        if self.variant:
            parts.append(self.variant)
        return " ".join(parts)


def make_trial_id(job_id: str, task_name: str, arm: Arm, attempt: int) -> str:
    """`<job>.<task>.<arm id>.<attempt>`: unique within the store, stable across resumes."""
    return f"{job_id}.{task_name}.{arm.id}.{attempt}"


class TrialSpec(RsiModel):
    """One attempt of one arm at one task: everything a worker needs, as plain data.

    `config` is the harness config the arm runs (as its canonical mapping, variant applied); the
    worker validates it again. `generation` is the generation manifest as a mapping.
    """

    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    trial_id: str
    job_id: str
    task_name: str
    task_digest: str
    task_path: str
    arm: Arm
    attempt: int = Field(ge=1)
    trial_dir: str
    config: dict[str, Any] | None = None
    generation: dict[str, Any] | None = None
    driver: str | None = None  # the run that submitted it; its containers carry it (rsi.sandbox.base.LABEL_DRIVER)
