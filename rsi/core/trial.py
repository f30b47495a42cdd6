"""Trial outcomes: error types, who they blame, and the result record every agent produces."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from rsi.core.contract import Integrity
from rsi.core.model import RsiModel


class ErrorType(StrEnum):
    ENVIRONMENT_BUILD_FAILED = "environment_build_failed"
    AGENT_TIMEOUT = "agent_timeout"
    AGENT_ERROR = "agent_error"
    VERIFIER_TIMEOUT = "verifier_timeout"
    REWARD_MISSING = "reward_missing"
    REWARD_INVALID = "reward_invalid"
    TAMPER_DETECTED = "tamper_detected"
    SANDBOX_ERROR = "sandbox_error"
    MODEL_UNAVAILABLE = "model_unavailable"
    MODEL_CONFIG_ERROR = "model_config_error"
    CANCELLED = "cancelled"
    # test.sh exited non-zero while the reward said pass: never a pass (the reward is not trusted).
    VERIFIER_ERROR = "verifier_error"
    # The agent's own commands wrecked its container (killed its PID 1, ran it out of memory or pids,
    # made the daemon refuse a write):
    # an outcome of the agent, not infra, and never retried.
    AGENT_OUT_OF_MEMORY = "agent_out_of_memory"
    AGENT_BROKE_SANDBOX = "agent_broke_sandbox"
    # The cluster node running the trial died (raylet lost): infra, re-run on another node.
    NODE_LOST = "node_lost"
    # A reference solution failed because the tests found no service to talk to (connection refused):
    # the environment is not the one the task's author tested, not a wrong solution (exec/services.py).
    SERVICE_UNREACHABLE = "service_unreachable"


Blame = Literal["task", "infra", "model", "config", "agent"]

# Who an error type points at before any counterfactual re-run (DESIGN §7 refines it).
BLAME: dict[ErrorType, Blame] = {
    ErrorType.ENVIRONMENT_BUILD_FAILED: "task",
    ErrorType.AGENT_TIMEOUT: "model",
    ErrorType.AGENT_ERROR: "agent",
    ErrorType.VERIFIER_TIMEOUT: "task",
    ErrorType.REWARD_MISSING: "task",
    ErrorType.REWARD_INVALID: "task",
    ErrorType.TAMPER_DETECTED: "model",
    ErrorType.SANDBOX_ERROR: "infra",
    ErrorType.MODEL_UNAVAILABLE: "infra",
    ErrorType.MODEL_CONFIG_ERROR: "config",
    ErrorType.CANCELLED: "infra",
    ErrorType.VERIFIER_ERROR: "task",
    ErrorType.AGENT_OUT_OF_MEMORY: "model",
    ErrorType.AGENT_BROKE_SANDBOX: "model",
    ErrorType.NODE_LOST: "infra",
    ErrorType.SERVICE_UNREACHABLE: "task",
}

# Error types under which a trial never passes, whatever the reward says.
NEVER_PASS = {
    ErrorType.TAMPER_DETECTED,
    ErrorType.REWARD_INVALID,
    ErrorType.REWARD_MISSING,
    ErrorType.VERIFIER_TIMEOUT,
    ErrorType.VERIFIER_ERROR,
    ErrorType.MODEL_UNAVAILABLE,
    ErrorType.SANDBOX_ERROR,
    ErrorType.AGENT_OUT_OF_MEMORY,
    ErrorType.AGENT_BROKE_SANDBOX,
    ErrorType.NODE_LOST,
    ErrorType.SERVICE_UNREACHABLE,
}



# Error types that are retried (with backoff) before the trial is recorded.
RETRYABLE = {ErrorType.SANDBOX_ERROR}


def is_infra(error_type: str | None) -> bool:
    return error_type is not None and BLAME.get(ErrorType(error_type)) == "infra"


class TrialStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"


class Timings(RsiModel):
    """Seconds per phase of a trial."""

    build: float = 0.0
    start: float = 0.0
    agent: float = 0.0
    snapshot: float = 0.0
    verify: float = 0.0
    total: float = 0.0
    # Seconds the agent spent waiting for the model server to admit its requests (queued behind
    # other trials); not charged against the agent's time budget.
    model_queue: float = 0.0
    # Finer spans (issue 47's cycle profile; 0.0 in results written before them). Inside `agent`: seconds in
    # model calls (client round trips, queue included), of which the server reported prefill and decode
    # (0.0 where it does not say), and seconds in the sandbox running the agent's commands.
    model: float = 0.0
    model_prefill: float = 0.0
    model_decode: float = 0.0
    sandbox_exec: float = 0.0
    # Inside `snapshot`: committing the frozen agent container to an image, and removing that container.
    commit: float = 0.0
    agent_remove: float = 0.0
    # Inside `verify`: creating + starting the verifier container, test.sh running in it, removing it.
    verify_start: float = 0.0
    verify_exec: float = 0.0
    verify_remove: float = 0.0
    # After `total` (not in it): the verdict, the environment record (image facts asked of the provider), the result.
    record: float = 0.0


class Usage(RsiModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    calls: int = 0

    def add(self, other: Usage) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            cached_tokens=self.cached_tokens + other.cached_tokens,
            calls=self.calls + other.calls,
        )


class TrialResult(RsiModel):
    """What one trial produced; written as `result.json` and summarised in the DB row."""

    schema_version: int = 2
    trial_id: str
    job_id: str
    task: str
    task_digest: str
    attempt: int
    agent: str
    generation: str | None = None
    arm_id: str | None = None
    variant: str | None = None
    split: str = "train"
    reward: float | None = None
    rewards: dict[str, float] = Field(default_factory=dict)
    passed: bool = False
    error_type: ErrorType | None = None
    error_message: str | None = None
    infra_retries: int = 0
    tampered_paths: list[str] = Field(default_factory=list)
    # Why each tampered path voids the pass ("/app/json.py shadows the standard-library module json").
    tamper_reasons: list[str] = Field(default_factory=list)
    changed_paths: list[str] = Field(default_factory=list)
    integrity: Integrity | None = None
    # Writable roots the task added to the contract's allow-list (empty: graded under the default).
    widened_roots: list[str] = Field(default_factory=list)
    verifier_exit_code: int | None = None
    turns: int = 0
    timings: Timings = Field(default_factory=Timings)
    usage: Usage = Field(default_factory=Usage)
    harness_config_digest: str | None = None
    model_name: str | None = None
    trial_dir: str
    node: str | None = None  # the cluster node that ran it (the `ray` executor); None: this machine
    extra: dict[str, Any] = Field(default_factory=dict)
