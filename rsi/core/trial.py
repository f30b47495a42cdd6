"""Trial outcomes: error types, who they blame, and the result record every agent produces."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field


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
}

# Error types that are retried (with backoff) before the trial is recorded.
RETRYABLE = {ErrorType.SANDBOX_ERROR}


def is_infra(error_type: str | None) -> bool:
    return error_type is not None and BLAME.get(ErrorType(error_type)) == "infra"


class TrialStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"


class Timings(BaseModel):
    """Seconds per phase of a trial."""

    build: float = 0.0
    start: float = 0.0
    agent: float = 0.0
    snapshot: float = 0.0
    verify: float = 0.0
    total: float = 0.0


class Usage(BaseModel):
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


class TrialResult(BaseModel):
    """What one trial produced; written as `result.json` and summarised in the DB row."""

    schema_version: int = 1
    trial_id: str
    job_id: str
    task: str
    task_digest: str
    attempt: int
    agent: str
    generation: str | None = None
    reward: float | None = None
    rewards: dict[str, float] = Field(default_factory=dict)
    passed: bool = False
    error_type: ErrorType | None = None
    error_message: str | None = None
    infra_retries: int = 0
    tampered_paths: list[str] = Field(default_factory=list)
    changed_paths: list[str] = Field(default_factory=list)
    timings: Timings = Field(default_factory=Timings)
    usage: Usage = Field(default_factory=Usage)
    harness_config_digest: str | None = None
    model_name: str | None = None
    trial_dir: str
    extra: dict[str, Any] = Field(default_factory=dict)
