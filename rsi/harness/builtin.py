"""Built-in agents: `oracle` runs the task's reference solution, `nop` does nothing, and
`known_wrong` runs one of a discovery candidate's plausible-but-wrong solutions.

They are the controls of task validation and attribution: a valid task passes with `oracle`
and fails with `nop` and with every known-wrong solution. All write a small ATIF trajectory like
every other agent, so `rsi trials show` works on any trial.

Known-wrong solutions never ship inside a task: a discovery candidate is staged as
`<candidate>/task/` (the Harbor task) beside `<candidate>/known_wrong/<name>/solve.sh`, and the
`known_wrong` arm's variant label names which one to run.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from rsi.core.task import resolve_env
from rsi.core.trial import ErrorType
from rsi.harness.actions import format_exec
from rsi.harness.agent import AGENTS, AgentContext, AgentOutcome
from rsi.harness.atif import ObservationResult, ToolCall, TrajectoryRecorder
from rsi.sandbox.base import Sandbox

SOLUTION_DIR = "/solution"
# `${SANDBOX_ROOT:-}`: empty in a container; the fake provider's private root otherwise (see sandbox/base.py).
SOLVE_COMMAND = f"bash \"${{SANDBOX_ROOT:-}}{SOLUTION_DIR}/solve.sh\""


def _recorder(ctx: AgentContext, agent: str) -> TrajectoryRecorder:
    rec = TrajectoryRecorder(session_id=ctx.trial_id, agent_name=f"rsi-{agent}")
    rec.rsi_extra.update(task=ctx.task.name, task_digest=ctx.task.digest, trial_id=ctx.trial_id, agent=agent)
    rec.add("user", ctx.task.instruction)
    return rec


def _write(rec: TrajectoryRecorder, ctx: AgentContext, stop_reason: str) -> AgentOutcome:
    rec.rsi_extra["stop_reason"] = stop_reason
    rec.finish(prompt_tokens=0, completion_tokens=0, cached_tokens=0)
    return AgentOutcome(trajectory_path=rec.write(ctx.trial_dir / "trajectory.json"))


class OracleAgent:
    """Copies `solution/` to /solution and runs `bash /solution/solve.sh` in the workdir."""

    name = "oracle"

    def solution_dir(self, ctx: AgentContext) -> Path:
        return ctx.task_dir / "solution"

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        rec = _recorder(ctx, self.name)
        solution = self.solution_dir(ctx)
        ctx.trial_dir.mkdir(parents=True, exist_ok=True)
        log = ctx.trial_dir / "agent.log"
        if not (solution / "solve.sh").is_file():
            msg = f"task {ctx.task.name} has no {solution.name}/solve.sh at {solution}"
            log.write_text(msg + "\n")
            out = _write(rec, ctx, "no_solution")
            out.error_type, out.error_message = ErrorType.AGENT_ERROR, msg
            return out
        t0 = time.monotonic()
        sandbox.put_dir(solution, SOLUTION_DIR)
        env = resolve_env(ctx.task.spec.solution.env, os.environ) or None  # Harbor's [solution] env
        res = sandbox.exec(SOLVE_COMMAND, timeout=ctx.agent_timeout_sec, workdir=sandbox.workdir, env=env)
        exec_sec = time.monotonic() - t0
        log.write_text(
            f"$ {SOLVE_COMMAND}\n"
            f"# exit code {res.exit_code}, timed out {res.timed_out}, {res.duration:.2f}s\n"
            f"--- stdout ---\n{res.stdout}\n--- stderr ---\n{res.stderr}\n"
        )
        rec.add_agent(
            message="",
            tool_calls=[
                ToolCall(tool_call_id="call_1_0", function_name="bash", arguments={"command": SOLVE_COMMAND})
            ],
            results=[
                ObservationResult(
                    source_call_id="call_1_0",
                    content=format_exec(
                        res.stdout, res.stderr, res.exit_code, res.timed_out, ctx.agent_timeout_sec
                    ),
                    extra={"exit_code": res.exit_code, "timed_out": res.timed_out},
                )
            ],
        )
        out = _write(rec, ctx, "agent_timeout" if res.timed_out else "done")
        out.exempt_paths = [SOLUTION_DIR]
        out.timed_out = res.timed_out
        out.turns = 1
        out.exec_sec = exec_sec
        return out


KNOWN_WRONG_DIR = "known_wrong"


def known_wrong_dir(task_dir: Path) -> Path:
    """Where a staged candidate's known-wrong solutions live: beside its task, never inside it."""
    return task_dir.parent / KNOWN_WRONG_DIR


class KnownWrongAgent(OracleAgent):
    """Runs the known-wrong solution named by the arm's variant, exactly as the oracle runs its own."""

    name = "known_wrong"

    def solution_dir(self, ctx: AgentContext) -> Path:
        return known_wrong_dir(ctx.task_dir) / (ctx.variant or "missing")


class NopAgent:
    """Does nothing: the control that a task is not already solved by its environment."""

    name = "nop"

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        return _write(_recorder(ctx, self.name), ctx, "done")


AGENTS.add("oracle", OracleAgent)
AGENTS.add("nop", NopAgent)
AGENTS.add("known_wrong", KnownWrongAgent)


def load_agents() -> list[str]:
    """Register every agent (`oracle`, `nop`, `harness` from agent_loop.py, `oracle-replay` and `hinted` from
    replay.py); return their names."""
    import rsi.harness.agent_loop  # noqa: F401  (registers "harness" on import)
    import rsi.harness.replay  # noqa: F401  (registers "oracle-replay" and "hinted")

    return AGENTS.names()
