"""Fakes for the harness boundary: a scripted chat model and a canned-output sandbox.

Used by the unit tests and benchmarks/prefix_reuse.py so the agent loop runs deterministically with
no model server and no Docker. `rsi.sandbox.fake.FakeSandboxProvider` runs real commands in a temp
directory; `ScriptedSandbox` here answers from a table instead, which keeps outputs byte-stable.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsi.core.contract import Contract
from rsi.core.harness_config import HarnessConfig
from rsi.core.task import Task, TaskSpec
from rsi.core.trial import Usage
from rsi.harness.agent import AgentContext
from rsi.models.client import ChatResult, ChoiceRefused, ChoiceResult, ToolCall
from rsi.sandbox.base import ExecResult

Reply = str | ChatResult | Exception | Callable[[list[dict[str, Any]]], "str | ChatResult"]


def text_result(
    content: str | None,
    *,
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
    tool_calls: list[ToolCall] | None = None,
    model: str = "fake",
) -> ChatResult:
    return ChatResult(
        content=content,
        tool_calls=tool_calls or [],
        finish_reason="tool_calls" if tool_calls else "stop",
        usage=Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, calls=1),
        model=model,
        latency_sec=0.0,
        raw={},
    )


@dataclass
class ScriptedChatModel:
    """Answers each chat call with the next scripted reply; records every request.

    A reply may be a string (text content), a ChatResult, an exception to raise, or a function of
    the messages. When the script runs out, the last reply repeats.
    """

    replies: Sequence[Reply]
    delay_sec: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    # MoL: the router's answers to `choose`, in order (the last repeats; a label outside the set is
    # refused as the real client refuses it; an exception is raised); every choice request is recorded
    labels: Sequence[str | Exception] = ("L0",)
    choice_requests: list[dict[str, Any]] = field(default_factory=list)

    def choose(self, model: str, messages: list[dict[str, Any]], labels: list[str], *,
               constraint: str = "choice", deadline: float | None = None) -> ChoiceResult:
        self.choice_requests.append({"model": model, "messages": copy.deepcopy(messages), "labels": list(labels),
                                     "constraint": constraint})
        got = self.labels[min(len(self.choice_requests) - 1, len(self.labels) - 1)]
        if isinstance(got, Exception):
            raise got
        if got not in labels:
            raise ChoiceRefused(f"answered {got!r} for a choice of {'/'.join(labels)}")
        return ChoiceResult(label=got, margin=1.0, scores=None, latency_sec=0.0,
                            usage=Usage(prompt_tokens=sum(len(str(m.get("content"))) for m in messages) // 4,
                                        completion_tokens=1, calls=1))

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
    ) -> ChatResult:
        self.requests.append(
            {
                "model": model,
                "messages": copy.deepcopy(messages),
                "tools": tools,
                "temperature": temperature,
                "top_p": top_p,
                "max_tokens": max_tokens,
                "stop": stop,
                "seed": seed,
            }
        )
        if self.delay_sec:
            time.sleep(self.delay_sec)
        reply = self.replies[min(len(self.requests) - 1, len(self.replies) - 1)]
        if isinstance(reply, Exception):
            raise reply
        if callable(reply):
            reply = reply(messages)
        return text_result(reply) if isinstance(reply, str) else reply


@dataclass
class ScriptedSandbox:
    """A Sandbox whose commands answer from `outputs` (command -> stdout, or an ExecResult).

    Unknown commands print nothing and exit 0. Files live in a dict. Records every command run.
    """

    outputs: dict[str, str | ExecResult] = field(default_factory=dict)
    id: str = "scripted"
    workdir: str = "/app"
    files: dict[str, bytes] = field(default_factory=dict)
    commands: list[tuple[str, float | None, str | None]] = field(default_factory=list)
    exec_delay_sec: float = 0.0

    def exec(
        self,
        cmd: str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        self.commands.append((cmd, timeout, workdir))
        if self.exec_delay_sec:
            time.sleep(self.exec_delay_sec)
        out = self.outputs.get(cmd, "")
        return out if isinstance(out, ExecResult) else ExecResult(exit_code=0, stdout=out, stderr="")

    def put_file(self, dest: str, data: bytes, mode: int = 0o644) -> None:
        self.files[dest] = data

    def put_dir(self, src: Path, dest: str) -> None:
        for p in sorted(Path(src).rglob("*")):
            if p.is_file():
                self.files[f"{dest.rstrip('/')}/{p.relative_to(src).as_posix()}"] = p.read_bytes()

    def get_file(self, path: str) -> bytes | None:
        return self.files.get(path)

    def get_dir(self, src: str, dest: Path) -> bool:
        return False

    def changed_paths(self) -> list[str]:
        return sorted(self.files)

    def changes(self) -> dict[str, int]:
        return dict.fromkeys(self.files, 1)

    def snapshot(self, labels: dict[str, str]) -> str:
        return "scripted-snapshot"

    def stop(self) -> None:
        return None


def make_context(
    trial_dir: Path,
    *,
    contract: Contract,
    config: HarnessConfig | None = None,
    chat_model: Any = None,
    instruction: str = "Create the file /app/hello.txt containing hello.",
    task_name: str = "hello",
    task_dir: Path | None = None,
    agent_timeout_sec: float = 60.0,
    command_timeout_sec: float = 30.0,
) -> AgentContext:
    """An AgentContext for one fake trial (no task directory on disk needed unless the agent reads it)."""
    task = Task(
        name=task_name,
        path=str(task_dir or trial_dir),
        spec=TaskSpec(),
        instruction=instruction,
        digest="0" * 64,
        env_digest="0" * 64,
        has_solution=True,
    )
    extra: dict[str, Any] = {"chat_model": chat_model} if chat_model is not None else {}
    return AgentContext(
        task=task,
        task_dir=task_dir or trial_dir,
        trial_dir=trial_dir,
        trial_id="trial-0001",
        contract=contract,
        agent_timeout_sec=agent_timeout_sec,
        command_timeout_sec=command_timeout_sec,
        harness_config=config,
        extra=extra,
    )
