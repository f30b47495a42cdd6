"""Agents that turn a task's reference solution into training data through the production harness (DESIGN §12).

- `oracle-replay`: the reference replayed as the agent's turns (the arm's variant: `plain` — the default —, `look`
  or `careful`, rsi.core.replay.REPLAY_STYLES). The harness loop runs exactly as it runs the
  model — the serving config's system and task prompts, its action format, real observations from the sandbox,
  the finish word — but each reply is the next action of a `ReplayPlan` (rsi.core.replay) instead of a model
  call. No model is called; the trial is graded by the verifier at the task's integrity level like any other.
- `hinted`: the model itself, with one extra message after the instruction holding a hint drawn from the
  reference (the arm's variant `hint-<level>`). Update stores a passing rollout with that message removed.

Neither is a model arm: their pass rates are never the generation's score (a replay passes because the reference
does; a hinted rollout had help production will not give).
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Sequence
from typing import Any

from rsi.core.harness_config import HarnessConfig
from rsi.core.replay import REPLAY_STYLES, named_paths, reference_actions, replay_plan
from rsi.core.trial import ErrorType, Usage
from rsi.harness.agent import AGENTS, AgentContext, AgentOutcome, AgentSetupError
from rsi.harness.agent_loop import HarnessAgent, Limits
from rsi.models.client import ChatResult, ToolCall
from rsi.sandbox.base import Sandbox

REPLAY = "oracle-replay"
HINTED = "hinted"


def replay_style(variant: str | None) -> str:
    """The style an `oracle-replay` arm's variant names (None: `plain`, the commands and the finish word)."""
    style = variant or "plain"
    if style not in REPLAY_STYLES:
        raise AgentSetupError(f"agent 'oracle-replay' takes a variant {', '.join(REPLAY_STYLES)}, not {variant!r}")
    return style


def hint_variant(level: int) -> str:
    return f"hint-{level}"


def hint_level(variant: str | None) -> int:
    """The level a `hinted` arm's variant names (`hint-2` -> 2)."""
    try:
        level = int((variant or "").removeprefix("hint-"))
    except ValueError:
        level = 0
    if not variant or not variant.startswith("hint-") or level not in (1, 2, 3):
        raise AgentSetupError(f"agent 'hinted' needs a variant hint-1, hint-2 or hint-3, not {variant!r}")
    return level


def _reference(ctx: AgentContext) -> list[str]:
    path = ctx.task_dir / "solution" / "solve.sh"
    if not path.is_file():
        return []
    return reference_actions(path.read_text(errors="replace"), ctx.task.spec.environment.workdir)


def _no_reference(ctx: AgentContext, what: str) -> AgentOutcome:
    """The agent's own error (never the model's): the task's solution/solve.sh holds no command."""
    msg = f"task {ctx.task.name} has no reference command {what}"
    ctx.trial_dir.mkdir(parents=True, exist_ok=True)
    (ctx.trial_dir / "agent.log").write_text(msg + "\n")
    return AgentOutcome(error_type=ErrorType.AGENT_ERROR, error_message=msg)


class ReplayModel:
    """A `ChatModel` that answers each call with the next scripted action in the config's action format, then the
    finish (the finish word, or a `submit` call). Text replies go through the config's stop strings as a server
    applies them, so the history holds exactly the bytes a model's reply would leave there."""

    def __init__(self, actions: Sequence[str], config: HarnessConfig) -> None:
        self.actions = list(actions)
        self.config = config
        self.calls = 0

    def chat(self, model: str, messages: list[dict[str, Any]], **_: Any) -> ChatResult:
        i, self.calls = self.calls, self.calls + 1
        if self.config.action_format == "tool_calls":
            if i < len(self.actions):
                args = {"command": self.actions[i]}
                call = ToolCall(id=f"call_{i + 1}_0", name="bash", arguments=args, raw_arguments=json.dumps(args))
            else:
                call = ToolCall(id=f"call_{i + 1}_0", name="submit", arguments={}, raw_arguments="{}")
            return _result(None, [call])
        text = f"```bash\n{self.actions[i]}\n```\n" if i < len(self.actions) else self.config.loop.finish_word
        for stop in self.config.sampling.stop:
            at = text.find(stop)
            if at >= 0:
                return dataclasses.replace(_result(text[:at], []), stop_reason=stop)
        return _result(text, [])


def _result(content: str | None, calls: list[ToolCall]) -> ChatResult:
    return ChatResult(content=content, tool_calls=calls, finish_reason="tool_calls" if calls else "stop",
                      usage=Usage(), model=REPLAY, latency_sec=0.0, raw={})


class OracleReplayAgent:
    """Agent `oracle-replay`: the reference's commands as the harness's turns, with a look first and a check last."""

    name = REPLAY

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        config = ctx.harness_config
        if config is None:
            raise AgentSetupError("agent 'oracle-replay' needs a harness config (the serving config it replays in)")
        commands = _reference(ctx)
        if not commands:
            return _no_reference(ctx, "in solution/solve.sh")
        workdir = sandbox.workdir or "/app"
        named = named_paths(ctx.task.instruction)
        outputs = [p for p in (ctx.task.spec.verifier.reads or []) if not p.endswith("/")]
        # the inputs are the named files that exist before the agent acts (a file to fix is both)
        inputs = [p for p in named if _is_file(sandbox, p, workdir)]
        # one turn is the finish word's
        plan = replay_plan(commands, inputs=inputs, outputs=outputs, max_actions=Limits(config, ctx).max_turns - 1,
                           style=replay_style(ctx.variant))
        script = ReplayModel(plan.actions, config)
        inner = dataclasses.replace(ctx, extra={**ctx.extra, "chat_model": script, "source": "oracle"})
        out = HarnessAgent().run(sandbox, inner)
        out.model_name = REPLAY
        out.usage = Usage()
        return out


def _is_file(sandbox: Sandbox, path: str, workdir: str) -> bool:
    """Whether `path` is a file in the sandbox now (a SandboxError propagates: the runner retries it as infra)."""
    return sandbox.exec(f"test -f {shlex.quote(path)}", timeout=10, workdir=workdir).exit_code == 0


class HintedAgent:
    """Agent `hinted`: the model with a hint of the arm's level (variant `hint-<level>`) after the instruction."""

    name = HINTED

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        from rsi.core.replay import hint_text

        level = hint_level(ctx.variant)
        commands = _reference(ctx)
        if not commands:
            return _no_reference(ctx, "to hint at")
        hint = {"level": level, "text": hint_text(level, commands)}
        inner = dataclasses.replace(ctx, extra={**ctx.extra, "hint": hint, "source": f"hinted:{level}"})
        return HarnessAgent().run(sandbox, inner)


AGENTS.add(REPLAY, OracleReplayAgent)
AGENTS.add(HINTED, HintedAgent)

__all__ = ["HINTED", "REPLAY", "HintedAgent", "OracleReplayAgent", "ReplayModel", "hint_level", "hint_variant",
           "replay_style"]
