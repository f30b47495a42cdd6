"""The boundary between rsi and one external agent program: what its runner is given and returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from rsi.core.external import ExternalHarness
from rsi.core.limits import EffectiveLimits
from rsi.core.registry import Registry
from rsi.harness.agent import AgentContext
from rsi.sandbox.base import Sandbox


@dataclass
class ExternalRun:
    """What a program's runner is given: where to act, where to call the model, under which limits."""

    sandbox: Sandbox
    ctx: AgentContext
    harness: ExternalHarness
    limits: EffectiveLimits
    base_url: str  # the trial's gateway endpoint (OpenAI-compatible, `/v1` included)
    api_key: str
    model: str  # the serve name the gateway is pinned to
    deadline: float  # time.monotonic() when the agent's time is up
    workdir: str


@dataclass
class ExternalResult:
    exit_status: str  # the program's own word for how it ended (Submitted, LimitsExceeded, ...)
    final_messages: list[dict[str, Any]] | None = None  # the program's history at the end, where it has one
    extra: dict[str, Any] = field(default_factory=dict)


class ExternalRunner(Protocol):
    program: str

    def run(self, run: ExternalRun) -> ExternalResult:
        """Run the program to its end. May raise SandboxError (infra) or anything else (the program failed)."""
        ...


RUNNERS: Registry[ExternalRunner] = Registry("external harness program")


