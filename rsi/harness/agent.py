"""The `Agent` boundary: whatever acts in a sandbox during a trial.

`oracle` and `nop` are built in (builtin.py); `harness` is a real model driven through a harness
config (loop.py). Agents are chosen by name from `AGENTS`; an unknown name lists the known ones.
Agents never grade: the verifier runs after the agent, in a separate container.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rsi.core.contract import Contract
from rsi.core.errors import RsiError
from rsi.core.generation import GenerationManifest
from rsi.core.harness_config import HarnessConfig
from rsi.core.limits import EffectiveLimits
from rsi.core.registry import Registry
from rsi.core.task import Task
from rsi.core.trial import ErrorType, Usage
from rsi.sandbox.base import Sandbox


@dataclass
class AgentContext:
    """Everything an agent may use during one trial."""

    task: Task
    task_dir: Path
    trial_dir: Path  # write trajectory.json / agent.log here
    trial_id: str
    contract: Contract
    agent_timeout_sec: float  # the effective limit (task, capped by contract and config)
    command_timeout_sec: float
    generation: GenerationManifest | None = None
    harness_config: HarnessConfig | None = None
    model_endpoint: str | None = None  # resolved base URL, e.g. http://127.0.0.1:8765/v1
    limits: EffectiveLimits | None = None  # computed once by the runner (rsi.core.limits)
    variant: str | None = None  # the arm's variant label (the known-wrong agent's solution name)
    extra: dict[str, Any] = field(default_factory=dict)


class Deferred(Protocol):
    """Work an agent left running past its turn (a MoL summary hop, rsi.harness.deferred)."""

    def finish(self) -> None:
        """Wait for it and record it in the outcome and the trajectory; idempotent."""
        ...


@dataclass
class AgentOutcome:
    timed_out: bool = False
    error_type: ErrorType | None = None
    error_message: str | None = None
    usage: Usage = field(default_factory=Usage)
    trajectory_path: Path | None = None
    model_name: str | None = None
    harness_config_digest: str | None = None
    turns: int = 0
    # Seconds spent queued for the model server (not charged against the agent's time limit).
    model_queue_sec: float = 0.0
    # Where the agent's time went (the cycle profile): model calls (round trips, queue included), the prefill
    # and decode seconds the server reported for them (0.0 where it does not say), and the sandbox's commands.
    model_sec: float = 0.0
    model_prefill_sec: float = 0.0
    model_decode_sec: float = 0.0
    exec_sec: float = 0.0
    # Paths rsi's own agent runtime wrote (the oracle's /solution): exempt from the tamper check.
    exempt_paths: list[str] = field(default_factory=list)
    # Set only when the runner allowed it (AgentContext.extra["defer_summary"]): the runner calls
    # `deferred.finish()` once the trial is graded and before the verdict, and on every other way out.
    deferred: Deferred | None = None


class Agent(Protocol):
    name: str

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        """Act in `sandbox` until done, out of turns, or past `ctx.agent_timeout_sec`.

        Must not raise for model or task problems (record them in the outcome); may raise
        `SandboxError` for substrate failures, which the trial runner retries as infra.
        """
        ...


AGENTS: Registry[Agent] = Registry("agent")


class AgentSetupError(RsiError):
    exit_code = 2
