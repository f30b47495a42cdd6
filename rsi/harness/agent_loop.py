"""The `harness` agent: a real model driven through a harness config, turn by turn, in a sandbox.

One turn = one chat call, its parsed action(s), their observations. The loop stops on the finish
word / `submit`, at max_turns (the config's, capped by the contract's), or when the agent time
limit is spent (`timed_out`). Model and format problems are recorded in the outcome and the
trajectory, never raised; `SandboxError` propagates so the trial runner retries it as infra.
Every run writes `trajectory.json` (ATIF), also when it ends early.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Protocol

from rsi.core.errors import ConfigError
from rsi.core.harness_config import HarnessConfig
from rsi.core.limits import effective_limits
from rsi.core.trial import ErrorType, Usage
from rsi.harness.actions import (
    Invocation,
    ParsedReply,
    ToolOutcome,
    parse_text_reply,
    parse_tool_calls,
    run_invocation,
    truncate_middle,
)
from rsi.harness.agent import AGENTS, AgentContext, AgentOutcome, AgentSetupError
from rsi.harness.atif import Metrics, ObservationResult, TrajectoryRecorder, agent_log_text
from rsi.harness.atif import ToolCall as AtifToolCall
from rsi.harness.deferred import DeferredSummary, summary_step
from rsi.harness.history import CallRecord, TurnEvent, make_history
from rsi.harness.mol import MolInfraError, MolSession, RecordingModel, mol_spec_for
from rsi.harness.prompts import initial_messages, prompt_variables
from rsi.models.client import ChatClient, ChatResult, ModelRequestError, ModelUnavailable
from rsi.sandbox.base import Sandbox

DEFAULT_MODEL = "SmolLM2-135M-Instruct"


class ChatModel(Protocol):
    """What the loop needs of a model: one chat completion. `ChatClient` fits; tests pass fakes."""

    def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = 256,
        stop: list[str] | None = None,
        seed: int | None = None,
        deadline: float | None = None,
    ) -> ChatResult: ...


class Limits:
    """The effective limits of one run, as the runner computed them once (rsi.core.limits)."""

    def __init__(self, config: HarnessConfig, ctx: AgentContext) -> None:
        lim = ctx.limits or effective_limits(ctx.task.spec, ctx.contract, config)
        self.max_turns = lim.max_turns
        self.max_tokens = lim.max_tokens_per_turn
        self.observation_max_chars = lim.observation_max_chars
        self.command_timeout = min(lim.command_timeout_sec, ctx.command_timeout_sec)
        self.agent_timeout = min(lim.agent_timeout_sec, ctx.agent_timeout_sec)


def _model_name(ctx: AgentContext) -> str:
    """The `model` a request names: the config's pinned `model.name`, else the generation's serve name."""
    if ctx.harness_config is not None and ctx.harness_config.model.name:
        return ctx.harness_config.model.name
    return ctx.generation.serve_name() if ctx.generation is not None else DEFAULT_MODEL


def _make_client(config: HarnessConfig, ctx: AgentContext, agent_timeout: float) -> ChatModel | None:
    injected = ctx.extra.get("chat_model")
    if injected is not None:
        return injected  # type: ignore[no-any-return]
    base_url = ctx.model_endpoint
    if base_url is None and config.model.endpoint != "embedded":
        base_url = config.model.endpoint
    if base_url is None:
        return None
    api_key = os.environ.get(config.model.api_key_env) if config.model.api_key_env else None
    # One request may not outlast the whole agent budget (the loop checks the budget between calls).
    timeout = min(config.model.request_timeout_sec, agent_timeout)
    # The embedded server returns the exact prompt/completion token ids and logprobs (training needs
    # them, rsi update); RSI_TOKEN_IDS=1 asks a vLLM endpoint for them too.
    token_ids = config.model.endpoint == "embedded" or os.environ.get("RSI_TOKEN_IDS") == "1"
    return ChatClient(base_url, api_key=api_key, timeout=timeout, token_ids=token_ids)


class HarnessAgent:
    """Agent `harness`: the model acts through the harness config's prompts, format and tools."""

    name = "harness"

    def run(self, sandbox: Sandbox, ctx: AgentContext) -> AgentOutcome:
        config = ctx.harness_config
        if config is None:
            raise AgentSetupError("agent 'harness' needs a harness config (none was given for this trial)")
        if config.is_external:  # a published agent program behind the recording gateway (rsi.harness.external)
            if ctx.extra.get("hint") is not None:
                raise AgentSetupError("hinted rollouts need rsi's own loop, not an external harness")
            from rsi.harness.external import run_external

            return run_external(sandbox, ctx)
        lim = Limits(config, ctx)
        model_name = _model_name(ctx)
        tools = ctx.contract.openai_tools(config.tools)
        tool_schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
        workdir = sandbox.workdir or "/app"
        config_dir = ctx.extra.get("harness_config_dir")
        variables = prompt_variables(
            config,
            instruction=ctx.task.instruction,
            workdir=workdir,
            tools=tools,
            max_turns=lim.max_turns,
            task=ctx.task.name,
        )
        outcome = AgentOutcome(model_name=model_name, harness_config_digest=config.digest())
        rec = TrajectoryRecorder(
            session_id=ctx.trial_id,
            model_name=model_name,
            tool_definitions=tools if config.action_format == "tool_calls" else None,
            agent_extra={"harness_config": config.name, "action_format": config.action_format},
        )
        try:
            head = initial_messages(config, variables, config_dir=Path(config_dir) if config_dir else None)
        except ConfigError as e:
            # A prompt that does not render is the config's fault: blame it, do not crash the job.
            outcome.error_type, outcome.error_message = ErrorType.MODEL_CONFIG_ERROR, str(e)
            rec.add("user", ctx.task.instruction)
            rec.rsi_extra.update(
                task=ctx.task.name,
                harness_config_digest=outcome.harness_config_digest,
                harness_config_name=config.name,
                stop_reason="config_error",
            )
            rec.finish(prompt_tokens=0, completion_tokens=0, cached_tokens=0)
            outcome.trajectory_path = rec.write(ctx.trial_dir / "trajectory.json")
            return outcome
        # `history_factory` lets benchmarks and experiments try a policy the config cannot name.
        factory = ctx.extra.get("history_factory")
        history = factory(head) if factory else make_history(config.loop.history, head, viewer=model_name)
        mol: MolSession | None = None
        if ctx.generation is not None and ctx.generation.is_mol:
            gen = ctx.generation
            # the instruction is the trial's one user turn: routed by L0, answered by the chosen adapter
            mol = MolSession(mol_spec_for(gen.mol_domains(), config.mol),
                             {lab: gen.serve_name(lab) for lab in gen.adapters}, head[:-1])
            mol.add_user(head[-1]["content"])
            history = mol
        n_shots = len(config.prompt.few_shot)
        rec.add("system", head[0]["content"])
        rec.add("user", head[-1]["content"])
        hint = ctx.extra.get("hint")  # a hinted rollout (rsi.harness.replay): one message production lacks
        if hint is not None:
            if mol is not None:
                raise AgentSetupError("hinted rollouts are not supported for Mixture-of-LoRA generations")
            rec.add("user", hint["text"])
            rec.rsi_extra["hint"] = {**hint, "index": len(head)}
            history = factory([*head, {"role": "user", "content": hint["text"]}]) if factory else make_history(
                config.loop.history, [*head, {"role": "user", "content": hint["text"]}], viewer=model_name)
        rec.rsi_extra.update(
            task=ctx.task.name,
            task_digest=ctx.task.digest,
            trial_id=ctx.trial_id,
            generation=ctx.generation.id if ctx.generation else None,
            model_name=model_name,
            harness_config_name=config.name,
            harness_config_digest=outcome.harness_config_digest,
            # who chose the actions (DESIGN §12): the model (`self`), the model with a hint, or the reference
            source=ctx.extra.get("source", "self"),
            contract=ctx.contract.hcp,
            action_format=config.action_format,
            history=config.loop.history,
            few_shot=head[1 : 1 + n_shots],
            # what the head was rendered from: update's replay re-renders it under a later config's prompts
            prompt_variables=variables,
            limits={
                "max_turns": lim.max_turns,
                "max_tokens": lim.max_tokens,
                "observation_max_chars": lim.observation_max_chars,
                "command_timeout_sec": lim.command_timeout,
                "agent_timeout_sec": lim.agent_timeout,
            },
        )
        client = _make_client(config, ctx, lim.agent_timeout)
        stop_reason = "max_turns"
        start = time.monotonic()
        try:
            if client is None:
                outcome.error_type = ErrorType.MODEL_UNAVAILABLE
                outcome.error_message = (
                    "no model endpoint: the embedded server is not running and none was given"
                )
                stop_reason = "model_unavailable"
                return outcome
            if mol is not None:
                stop_reason = self._mol_turns(mol, sandbox, ctx, config, lim, client, tools, tool_schemas,
                                              workdir, rec, outcome, start)
                return outcome
            stop_reason = self._turns(
                sandbox,
                ctx,
                config,
                lim,
                client,
                model_name,
                tools,
                tool_schemas,
                workdir,
                history,
                rec,
                outcome,
                start,
            )
            return outcome
        finally:
            rec.rsi_extra["stop_reason"] = stop_reason
            if mol is not None:
                rec.rsi_extra["mol"] = {**mol.as_json(), "family": ctx.task.family}
            rec.rsi_extra["messages"] = (mol.answer_messages if mol is not None and mol.answer_messages
                                         else history.messages())
            rec.rsi_extra["tools"] = tools if config.action_format == "tool_calls" else []
            rec.finish(
                prompt_tokens=outcome.usage.prompt_tokens,
                completion_tokens=outcome.usage.completion_tokens,
                cached_tokens=outcome.usage.cached_tokens,
                extra={
                    "calls": outcome.usage.calls,
                    "turns": outcome.turns,
                    "elapsed_sec": round(time.monotonic() - start, 3),
                },
            )
            outcome.trajectory_path = rec.write(ctx.trial_dir / "trajectory.json")
            (ctx.trial_dir / "agent.log").write_text(agent_log_text(rec.trajectory))
            if (client is not None and client is not ctx.extra.get("chat_model") and hasattr(client, "close")
                    and outcome.deferred is None):  # a deferred summary closes it when done with it
                client.close()

    def _mol_turns(self, mol: MolSession, sandbox: Sandbox, ctx: AgentContext, config: HarnessConfig, lim: Limits,
                   client: ChatModel, tools: list[dict[str, Any]], tool_schemas: dict[str, dict[str, Any]],
                   workdir: str, rec: TrajectoryRecorder, outcome: AgentOutcome, start: float) -> str:
        """One MoL user turn: L0 routes, the chosen adapter acts (the usual turns), then summarises.
        A failed route or summary hop is infra (MODEL_UNAVAILABLE: the trial is retried)."""

        def deadline() -> float:
            return time.monotonic() + max(0.0, lim.agent_timeout - (time.monotonic() - start - outcome.model_queue_sec))

        t_turn = time.monotonic()
        try:
            route = mol.route(client, deadline=deadline())  # type: ignore[arg-type]
        except MolInfraError as e:
            outcome.error_type, outcome.error_message = ErrorType.MODEL_UNAVAILABLE, str(e)
            return "route_failed"
        outcome.usage = outcome.usage.add(_one_call(route.usage))
        outcome.model_sec += route.latency_sec
        rec.add_agent(message=route.label, model_name=mol.serve_names["L0"],
                      metrics=Metrics(prompt_tokens=route.usage.prompt_tokens,
                                      completion_tokens=route.usage.completion_tokens,
                                      cached_tokens=route.usage.cached_tokens),
                      extra={"hop": "route", "adapter": "L0", "label": route.label, "margin": route.margin,
                             "latency_sec": round(route.latency_sec, 3)})
        stop = self._turns(sandbox, ctx, config, lim, RecordingModel(client, mol), mol.serve_names[mol.label],
                           tools, tool_schemas, workdir, mol, rec, outcome, start)
        mol.answer_messages = mol.view(mol.label)
        mol.turn_sec = round(time.monotonic() - t_turn, 4)
        if outcome.error_type is not None:
            return stop
        if ctx.extra.get("defer_summary"):  # off the critical path: the runner grades the trial meanwhile
            own = client is not ctx.extra.get("chat_model") and hasattr(client, "close")
            outcome.deferred = DeferredSummary(mol, client, deadline(), rec, outcome,  # type: ignore[arg-type]
                                               ctx.trial_dir, close=client.close if own else None)  # type: ignore[attr-defined]
            return stop
        try:
            text = mol.summarize(client, deadline=deadline())  # type: ignore[arg-type]
        except MolInfraError as e:
            outcome.error_type, outcome.error_message = ErrorType.MODEL_UNAVAILABLE, str(e)
            return "summary_failed"
        summary_step(mol, text, rec, outcome)
        return stop

    def _turns(
        self,
        sandbox: Sandbox,
        ctx: AgentContext,
        config: HarnessConfig,
        lim: Limits,
        client: ChatModel,
        model_name: str,
        tools: list[dict[str, Any]],
        tool_schemas: dict[str, dict[str, Any]],
        workdir: str,
        history: Any,
        rec: TrajectoryRecorder,
        outcome: AgentOutcome,
        start: float,
    ) -> str:
        """Run turns until a stop condition; return why it stopped."""
        s = config.sampling

        def used() -> float:
            """Agent time so far: wall time minus time queued for the model server."""
            return time.monotonic() - start - outcome.model_queue_sec

        for turn in range(1, lim.max_turns + 1):
            if used() >= lim.agent_timeout:
                outcome.timed_out = True
                return "agent_timeout"
            t_call = time.monotonic()
            try:
                result = client.chat(
                    model_name,
                    history.messages(),
                    tools=tools if config.action_format == "tool_calls" else None,
                    temperature=s.temperature,
                    top_p=s.top_p,
                    max_tokens=lim.max_tokens,
                    stop=list(s.stop) or None,
                    seed=s.seed,
                    deadline=time.monotonic() + (lim.agent_timeout - used()),
                )
            except ModelUnavailable as e:
                outcome.error_type, outcome.error_message = ErrorType.MODEL_UNAVAILABLE, str(e)
                return "model_unavailable"
            except ModelRequestError as e:
                if isinstance(history, MolSession) and e.status_code == 404:
                    # an adapter of the mixture missing on the endpoint: infra, retried, never the model's
                    outcome.error_type, outcome.error_message = ErrorType.MODEL_UNAVAILABLE, f"mol: {e}"
                    return "model_unavailable"
                outcome.error_type, outcome.error_message = ErrorType.MODEL_CONFIG_ERROR, str(e)
                return "model_request_error"
            matched = getattr(result, "stop_reason", None)
            if isinstance(matched, str) and matched in s.stop and result.content is not None:
                # OpenAI semantics drop the stop string from the text; put the closing fence back so
                # the history shows the model a well-formed reply (and the prompt extends the KV the
                # server already holds for this sequence).
                result = dataclasses.replace(result, content=result.content + matched)
            outcome.usage = outcome.usage.add(result.usage if result.usage.calls else _one_call(result.usage))
            outcome.model_queue_sec += getattr(result, "queue_sec", 0.0)
            outcome.model_sec += time.monotonic() - t_call
            outcome.model_prefill_sec += getattr(result, "prefill_sec", 0.0)
            outcome.model_decode_sec += getattr(result, "decode_sec", 0.0)
            outcome.turns = turn

            if config.action_format == "text":
                parsed = parse_text_reply(result.content, config.loop.finish_word, turn=turn)
            else:
                parsed = parse_tool_calls(result.content, result.tool_calls, tool_schemas)

            outcomes: list[ToolOutcome] = []
            timed_out = False
            for inv in parsed.invocations:
                remaining = lim.agent_timeout - used()
                if remaining <= 0:
                    timed_out = True
                    break
                t_exec = time.monotonic()
                out = run_invocation(
                    sandbox, inv, workdir=workdir, command_timeout=min(lim.command_timeout, remaining)
                )
                outcome.exec_sec += time.monotonic() - t_exec
                out.content = truncate_middle(out.content, lim.observation_max_chars)
                outcomes.append(out)
            note = truncate_middle(parsed.error, lim.observation_max_chars) if parsed.error else None
            self._record(history, rec, config, turn, model_name, result, parsed, outcomes, note)

            if timed_out or used() >= lim.agent_timeout:
                outcome.timed_out = True
                return "agent_timeout"
            if parsed.finish or any(o.submitted for o in outcomes):
                return "submitted" if config.action_format == "tool_calls" else "finish_word"
        return "max_turns"

    @staticmethod
    def _record(
        history: Any,
        rec: TrajectoryRecorder,
        config: HarnessConfig,
        turn: int,
        model_name: str,
        result: ChatResult,
        parsed: ParsedReply,
        outcomes: list[ToolOutcome],
        note: str | None,
    ) -> None:
        """Append the turn to the history (once, already truncated) and to the trajectory."""
        invs: list[Invocation] = parsed.invocations
        text_mode = config.action_format == "text"
        calls = tuple(
            CallRecord(
                server_id=("" if text_mode else inv.call_id),
                name=inv.name,
                raw_arguments=inv.raw_arguments,
                arguments=inv.arguments,
            )
            for inv in invs
        )
        observations = tuple(o.content for o in outcomes)
        # A submit (or finish word) ends the episode: its observation is never shown to the model.
        history.append(
            TurnEvent(
                turn=turn,
                author=model_name,
                format=config.action_format,
                content=result.content,
                calls=calls if not text_mode else calls[: len(outcomes)],
                observations=observations,
                note=note,
            )
        )
        atif_calls = [
            AtifToolCall(
                tool_call_id=inv.call_id or f"call_{turn}_{k}",
                function_name=inv.name,
                arguments=inv.arguments,
                extra={"error": inv.error} if inv.error else None,
            )
            for k, inv in enumerate(invs)
        ]
        results = [
            ObservationResult(
                source_call_id=atif_calls[k].tool_call_id,
                content=o.content,
                extra={"exit_code": o.exit_code, "timed_out": o.timed_out}
                if o.exit_code is not None
                else ({"error": True} if o.is_error else None),
            )
            for k, o in enumerate(outcomes)
        ]
        if note is not None:
            results.append(ObservationResult(source_call_id=None, content=note, extra={"format_error": True}))
        rec.add_agent(
            message=result.content,
            tool_calls=atif_calls,
            results=results,
            metrics=Metrics(
                prompt_tokens=result.usage.prompt_tokens,
                completion_tokens=result.usage.completion_tokens,
                cached_tokens=result.usage.cached_tokens,
            ),
            model_name=result.model or model_name,
            extra={
                "turn": turn,
                **({"hop": "answer", "adapter": history.label} if isinstance(history, MolSession) else {}),
                "finish_reason": result.finish_reason,
                "latency_sec": round(result.latency_sec, 3),
                "finish": parsed.finish,
                **_token_extra(result),
            },
        )


def _token_extra(result: ChatResult) -> dict[str, Any]:
    """The served tokens of this turn (what `rsi update` trains on), where the server gave them."""
    ids = getattr(result, "prompt_token_ids", None)
    if ids is None:
        return {}
    return {"prompt_token_ids": ids, "completion_token_ids": getattr(result, "completion_token_ids", None),
            "logprobs": getattr(result, "logprobs", None)}


def _one_call(u: Usage) -> Usage:
    """The client's Usage for one completion may leave `calls` at 0; a chat call is one call."""
    return Usage(
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        cached_tokens=u.cached_tokens,
        calls=1,
    )


AGENTS.add("harness", HarnessAgent)
