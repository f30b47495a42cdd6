"""Running an external agent program for one trial: what every program shares.

1. The program must be installed at exactly the config's `external.version` (the version is in the digest: a
   different installed version would run a different harness than the one being improved), else the trial
   stops with a setup error naming both versions.
2. The trial gets its own session on the recording gateway (rsi.models.gateway), pinned to the generation's
   serve name, with the effective limits: per-call max_tokens ceiling, max_turns calls, the agent deadline, the
   trial's token budget. The program is pointed at the session's base URL and key and never at the endpoint.
3. The program's runner (one per program, `RUNNERS`) runs it with an environment that executes its commands in
   the trial's sandbox under the effective command timeout and observation truncation (rsi enforces both there,
   whatever the program's config says).
4. The trajectory (`trajectory.json`, ATIF) is built from the gateway's records only (rsi.harness.gateway_atif),
   the records themselves are kept as `gateway.jsonl`, and the program's own log/trajectory beside them.

A `SandboxError` from the program's commands propagates (the runner retries the trial as infra); a failure of
the model endpoint behind the gateway is MODEL_UNAVAILABLE; anything else the program raises is AGENT_ERROR.
"""

from __future__ import annotations

import importlib.metadata
import os
import time
import traceback

from rsi.core.external import ExternalHarness
from rsi.core.harness_config import HarnessConfig
from rsi.core.limits import effective_limits
from rsi.core.trial import ErrorType
from rsi.harness.agent import AgentContext, AgentOutcome, AgentSetupError
from rsi.harness.atif import agent_log_text
from rsi.harness.external.runner import RUNNERS, ExternalResult, ExternalRun
from rsi.harness.gateway_atif import trajectory_from_calls
from rsi.models.gateway import GatewaySession, SessionPolicy, shared_gateway
from rsi.sandbox.base import Sandbox, SandboxError

__all__ = ["RUNNERS", "ExternalResult", "ExternalRun", "check_installed", "load_runners", "run_external"]

DEFAULT_MODEL = "SmolLM2-135M-Instruct"


def load_runners() -> list[str]:
    import rsi.harness.external.mini_swe  # noqa: F401  (registers "mini-swe-agent")

    return RUNNERS.names()


def installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_installed(ext: ExternalHarness) -> None:
    """AgentSetupError unless the program is installed at exactly the config's version."""
    got = installed_version(ext.spec.package)
    if got is None:
        raise AgentSetupError(f"external harness {ext.program} {ext.version} is not installed "
                              f"(pip install 'rsi[external]' or pip install {ext.spec.package}=={ext.version})")
    if got != ext.version:
        raise AgentSetupError(f"external harness {ext.program}: the config pins version {ext.version}, "
                              f"{got} is installed (the version is part of the harness's identity)")


def _serve_name(ctx: AgentContext) -> str:
    if ctx.harness_config is not None and ctx.harness_config.model.name:
        return ctx.harness_config.model.name
    return ctx.generation.serve_name() if ctx.generation is not None else DEFAULT_MODEL


def _adapter_sha256(ctx: AgentContext, serve_name: str) -> str | None:
    gen = ctx.generation
    if gen is None:
        return None
    for ref in gen.adapters.values():
        if ref.serve_name == serve_name:
            return ref.sha256
    return None


def _upstream(config: HarnessConfig, ctx: AgentContext) -> str | None:
    if ctx.model_endpoint is not None:
        return ctx.model_endpoint
    return None if config.model.endpoint == "embedded" else config.model.endpoint


def run_external(sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
    """Run the config's external program for one trial (see the module docstring)."""
    config = ctx.harness_config
    if config is None or config.external is None:
        raise AgentSetupError("an external harness run needs a config of kind external")
    ext = config.external
    load_runners()
    if ext.program not in RUNNERS.names():
        raise AgentSetupError(f"no runner for external program {ext.program} (known: {', '.join(RUNNERS.names())})")
    check_installed(ext)
    lim = ctx.limits or effective_limits(ctx.task.spec, ctx.contract, config)
    agent_timeout = min(lim.agent_timeout_sec, ctx.agent_timeout_sec)
    model = _serve_name(ctx)
    outcome = AgentOutcome(model_name=model, harness_config_digest=config.digest())
    ctx.trial_dir.mkdir(parents=True, exist_ok=True)
    upstream = _upstream(config, ctx)
    start = time.monotonic()
    deadline = start + agent_timeout
    session: GatewaySession | None = None
    result: ExternalResult | None = None
    stop_reason = "model_unavailable"
    error_tb: str | None = None
    try:
        if upstream is None:
            outcome.error_type = ErrorType.MODEL_UNAVAILABLE
            outcome.error_message = "no model endpoint: the embedded server is not running and none was given"
            return outcome
        api_key = os.environ.get(config.model.api_key_env) if config.model.api_key_env else None
        budget = ctx.extra.get("token_budget")
        gateway = ctx.extra.get("gateway") or shared_gateway()  # tests pass one with a fake endpoint behind it
        session = gateway.open_session(upstream, SessionPolicy(
            model=model, max_tokens=lim.max_tokens_per_turn, max_calls=lim.max_turns, deadline=deadline,
            token_budget=int(budget) if budget is not None else None,
            adapter_sha256=_adapter_sha256(ctx, model)), api_key=api_key)
        run = ExternalRun(sandbox=sandbox, ctx=ctx, harness=ext, limits=lim.model_copy(update={
            "agent_timeout_sec": agent_timeout,
            "command_timeout_sec": min(lim.command_timeout_sec, ctx.command_timeout_sec)}),
            base_url=session.base_url, api_key=session.key, model=model, deadline=deadline,
            workdir=sandbox.workdir or "/app")
        try:
            result = RUNNERS.create(ext.program).run(run)
            stop_reason = result.exit_status or "done"
        except SandboxError:
            stop_reason = "sandbox_error"
            raise
        except Exception as e:  # the program failed: the harness's outcome, recorded, never raised
            error_tb = traceback.format_exc()
            stop_reason = "agent_error"
            outcome.error_type = ErrorType.AGENT_ERROR
            outcome.error_message = f"{ext.program}: {type(e).__name__}: {e}"[:2000]
        _classify(outcome, session, deadline)
        if outcome.timed_out:
            stop_reason = "agent_timeout"
        return outcome
    finally:
        _write(outcome, ctx, config, ext, session, result, stop_reason, error_tb, start, model)


def _classify(outcome: AgentOutcome, session: GatewaySession, deadline: float) -> None:
    """Endpoint failures behind the gateway are infra; a refusal at the deadline is a timeout."""
    failed = [c for c in session.calls if c.status >= 500 or c.status in (408, 429)]
    if failed and (outcome.error_type is None or outcome.error_type == ErrorType.AGENT_ERROR):
        outcome.error_type = ErrorType.MODEL_UNAVAILABLE
        outcome.error_message = f"model endpoint behind the gateway failed: HTTP {failed[-1].status}: " \
                                f"{failed[-1].refused or (failed[-1].response or {})}"[:2000]
    if time.monotonic() >= deadline or any(c.refused and "time limit" in c.refused for c in session.calls):
        outcome.timed_out = True
        if outcome.error_type == ErrorType.AGENT_ERROR:  # the program stopped because rsi refused past the deadline
            outcome.error_type, outcome.error_message = None, None


def _write(outcome: AgentOutcome, ctx: AgentContext, config: HarnessConfig, ext: ExternalHarness,
           session: GatewaySession | None, result: ExternalResult | None, stop_reason: str, error_tb: str | None,
           start: float, model: str) -> None:
    calls = list(session.calls) if session is not None else []
    if session is not None:
        session.write(ctx.trial_dir / "gateway.jsonl")
        session.close()
        outcome.usage = session.usage
    outcome.turns = sum(1 for c in calls if c.ok)
    rec, messages = trajectory_from_calls(
        calls, session_id=ctx.trial_id, agent_name=ext.program, agent_version=ext.version, model_name=model,
        final_messages=result.final_messages if result is not None else None, instruction=ctx.task.instruction)
    head = 2 if len(messages) >= 2 and messages[0].get("role") == "system" else 1
    rec.rsi_extra.update(
        task=ctx.task.name, task_digest=ctx.task.digest, trial_id=ctx.trial_id,
        generation=ctx.generation.id if ctx.generation else None, model_name=model,
        harness_config_name=config.name, harness_config_digest=outcome.harness_config_digest,
        harness_kind="external", external={"program": ext.program, "version": ext.version},
        # the model chose every action and the gateway recorded every call (DESIGN §12): exact served token ids
        source="gateway", recorded_by="gateway", contract=ctx.contract.hcp, few_shot=[], head_messages=head,
        stop_reason=stop_reason, messages=messages, tools=[],
        limits={"max_turns": ctx.limits.max_turns if ctx.limits else None,
                "max_tokens": session.policy.max_tokens if session else None,
                "agent_timeout_sec": round(session.policy.deadline - start, 3)
                if session and session.policy.deadline else None},
        program_result=(result.extra | {"exit_status": result.exit_status}) if result is not None else None,
    )
    if error_tb:
        rec.rsi_extra["program_traceback"] = error_tb[-4000:]
    rec.finish(prompt_tokens=outcome.usage.prompt_tokens, completion_tokens=outcome.usage.completion_tokens,
               cached_tokens=outcome.usage.cached_tokens,
               extra={"calls": len(calls), "turns": outcome.turns,
                      "elapsed_sec": round(time.monotonic() - start, 3)})
    outcome.trajectory_path = rec.write(ctx.trial_dir / "trajectory.json")
    (ctx.trial_dir / "agent.log").write_text(agent_log_text(rec.trajectory) + (error_tb or ""))
