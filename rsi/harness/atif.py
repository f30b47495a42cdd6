"""ATIF (Harbor's Agent Trajectory Interchange Format) models and the writer every agent uses.

Field names follow Harbor's RFC 0001 (trajectory format) as published up to v1.7: root
`schema_version`, `session_id`, `trajectory_id`, `agent {name, version, model_name, extra}`,
`steps`, `notes`, `final_metrics`, `extra`; step `step_id` (from 1, consecutive), `timestamp`
(ISO 8601), `source` (system | user | agent), `message`, `model_name`, `reasoning_content`,
`tool_calls [{tool_call_id, function_name, arguments, extra}]`, `observation {results:
[{source_call_id, content, extra}]}`, `metrics {prompt_tokens, completion_tokens, cached_tokens,
cost_usd, ...}`. The validators mirror the rules Harbor's validator states: consecutive step ids,
agent-only fields only on agent steps, each `source_call_id` naming a tool call of its step.
Not confirmed from Harbor's own source (not reachable here): v1.6 multimodal content parts (we
only write strings) and `subagent_trajectories`, which rsi never writes; extra keys are allowed
so a newer Harbor file still loads.

rsi's own data lives under `extra.rsi` (config digest, model/adapter name, stop reason, and the
final OpenAI `messages` + `tools`, so a training export needs nothing else).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

import rsi
from rsi.core.model import RsiModel

SCHEMA_VERSION = "ATIF-v1.7"
AGENT_NAME = "rsi-harness"


class _Open(RsiModel):
    # Unknown keys are kept: files written by newer Harbor versions must still load.
    model_config = ConfigDict(extra="allow")


class AgentInfo(_Open):
    name: str
    version: str
    model_name: str | None = None
    tool_definitions: list[dict[str, Any]] | None = None
    extra: dict[str, Any] | None = None


class ToolCall(_Open):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    extra: dict[str, Any] | None = None


class ObservationResult(_Open):
    source_call_id: str | None = None
    content: str | None = None
    extra: dict[str, Any] | None = None


class Observation(_Open):
    results: list[ObservationResult]


class Metrics(_Open):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    extra: dict[str, Any] | None = None


class FinalMetrics(_Open):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = None
    extra: dict[str, Any] | None = None


_AGENT_ONLY = ("model_name", "reasoning_content", "reasoning_effort", "tool_calls", "metrics")


class Step(_Open):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    model_name: str | None = None
    message: str = ""
    reasoning_content: str | None = None
    tool_calls: list[ToolCall] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _check(self) -> Step:
        if self.timestamp is not None:
            try:
                datetime.fromisoformat(self.timestamp.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(
                    f"step {self.step_id}: timestamp {self.timestamp!r} is not ISO 8601"
                ) from None
        if self.source != "agent":
            bad = [f for f in _AGENT_ONLY if getattr(self, f, None) is not None]
            if bad:
                raise ValueError(f"step {self.step_id}: {', '.join(bad)} only allowed on agent steps")
        if self.observation is not None:
            ids = {c.tool_call_id for c in self.tool_calls or []}
            for r in self.observation.results:
                if r.source_call_id is not None and r.source_call_id not in ids:
                    raise ValueError(
                        f"step {self.step_id}: observation source_call_id {r.source_call_id!r} "
                        "names no tool call of this step"
                    )
        return self


class Trajectory(_Open):
    schema_version: str = SCHEMA_VERSION
    session_id: str | None = None
    trajectory_id: str | None = None
    agent: AgentInfo
    steps: list[Step]
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _consecutive(self) -> Trajectory:
        for i, step in enumerate(self.steps, start=1):
            if step.step_id != i:
                raise ValueError(f"steps[{i - 1}].step_id is {step.step_id}, expected {i}")
        return self

    @property
    def rsi(self) -> dict[str, Any]:
        """rsi's own fields (`extra.rsi`), empty for a trajectory written elsewhere."""
        return dict((self.extra or {}).get("rsi") or {})

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", exclude_none=True), indent=2, ensure_ascii=False)


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def load_trajectory(path: Path) -> Trajectory:
    return Trajectory.model_validate_json(Path(path).read_text())


class TrajectoryRecorder:
    """Builds a trajectory step by step and writes it; the agent loop calls it as turns happen."""

    def __init__(
        self,
        *,
        session_id: str,
        agent_name: str = AGENT_NAME,
        model_name: str | None = None,
        tool_definitions: list[dict[str, Any]] | None = None,
        agent_extra: dict[str, Any] | None = None,
    ) -> None:
        self.trajectory = Trajectory(
            session_id=session_id,
            trajectory_id=session_id,
            agent=AgentInfo(
                name=agent_name,
                version=rsi.__version__,
                model_name=model_name,
                tool_definitions=tool_definitions,
                extra=agent_extra,
            ),
            steps=[],
        )
        self.rsi_extra: dict[str, Any] = {}

    def _next_id(self) -> int:
        return len(self.trajectory.steps) + 1

    def add(
        self, source: Literal["system", "user"], message: str, extra: dict[str, Any] | None = None
    ) -> Step:
        step = Step(step_id=self._next_id(), timestamp=now_iso(), source=source, message=message, extra=extra)
        self.trajectory.steps.append(step)
        return step

    def add_agent(
        self,
        *,
        message: str | None,
        tool_calls: list[ToolCall] | None = None,
        results: list[ObservationResult] | None = None,
        metrics: Metrics | None = None,
        model_name: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Step:
        step = Step(
            step_id=self._next_id(),
            timestamp=now_iso(),
            source="agent",
            model_name=model_name,
            message=message or "",
            tool_calls=tool_calls or None,
            observation=Observation(results=results) if results else None,
            metrics=metrics,
            extra=extra,
        )
        self.trajectory.steps.append(step)
        return step

    def finish(
        self,
        *,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int,
        extra: dict[str, Any] | None = None,
    ) -> Trajectory:
        t = self.trajectory
        t.final_metrics = FinalMetrics(
            total_prompt_tokens=prompt_tokens,
            total_completion_tokens=completion_tokens,
            total_cached_tokens=cached_tokens,
            total_steps=len(t.steps),
            extra=extra,
        )
        t.extra = {"rsi": self.rsi_extra}
        return t

    def write(self, path: Path) -> Path:
        """Validate the whole trajectory again (catches a bad step added by hand) and write it."""
        checked = Trajectory.model_validate(self.trajectory.model_dump(mode="json", exclude_none=True))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(checked.to_json())
        tmp.replace(path)
        return path


def agent_log_text(traj: Trajectory) -> str:
    """A plain-text transcript of a trajectory (`agent.log`), for grep and quick reading."""
    out: list[str] = []
    for st in traj.steps:
        out.append(f"=== step {st.step_id} [{st.source}] {st.timestamp or ''}".rstrip())
        if st.message:
            out.append(st.message)
        for call in st.tool_calls or []:
            out.append(f"--> {call.function_name} {json.dumps(call.arguments, ensure_ascii=False)}")
        if st.observation is not None:
            for r in st.observation.results:
                out.append(f"<-- {r.content or ''}")
    return "\n".join(out) + "\n"
