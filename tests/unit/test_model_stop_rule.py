"""The stop rule: generation ends when the first fenced block closes (a plain `stop` string)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import yaml

from rsi.core.contract import Contract
from rsi.core.harness_config import HarnessConfig
from rsi.harness.actions import parse_text_reply
from rsi.harness.agent_loop import HarnessAgent
from rsi.harness.fakes import ScriptedChatModel, ScriptedSandbox, make_context, text_result
from rsi.models.client import ChatClient

ROOT = Path(__file__).resolve().parents[2]
FENCE_STOP = "\n```\n"


def _config() -> HarnessConfig:
    """The shipped default config: the stop rule is on (`sampling.stop`)."""
    raw = yaml.safe_load((ROOT / "harness_configs" / "default.yaml").read_text())
    return HarnessConfig.model_validate(raw)


def test_fence_stop_matches_the_closing_fence_only() -> None:
    stop = _config().sampling.stop
    assert stop == [FENCE_STOP]
    reply = "Let me see.\n```bash\nls /app\n```\nThen more text\n```bash\nrm -rf /\n```\n"
    cut = min(reply.find(s) for s in stop)
    kept = reply[:cut]
    # the opening fence never matches; the cut keeps exactly the first command
    assert kept == "Let me see.\n```bash\nls /app"
    assert parse_text_reply(kept, "DONE", turn=1).invocations[0].arguments["command"] == "ls /app"
    assert parse_text_reply(kept + FENCE_STOP, "DONE", turn=1).invocations[0].arguments["command"] == "ls /app"


def _completion(choice_extra: dict[str, Any]) -> httpx.Response:
    choice = {"index": 0, "message": {"role": "assistant", "content": "```bash\nls"}, "finish_reason": "stop"}
    body = {
        "model": "m",
        "choices": [{**choice, **choice_extra}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    return httpx.Response(200, json=body)


def test_client_reads_the_matched_stop_string() -> None:
    for extra, want in (
        ({"stop_reason": FENCE_STOP}, FENCE_STOP),  # vLLM
        ({"matched_stop": FENCE_STOP}, FENCE_STOP),  # SGLang
        ({"stop_reason": 2}, None),  # a stop token id, not a string
        ({}, None),  # OpenAI says nothing
    ):
        with ChatClient("http://m.test/v1", transport=httpx.MockTransport(lambda r, e=extra: _completion(e))) as c:
            assert c.chat("m", [{"role": "user", "content": "hi"}], stop=[FENCE_STOP]).stop_reason == want


def test_loop_sends_the_stop_and_puts_the_closing_fence_back_in_history(tmp_path: Path) -> None:
    contract = Contract.model_validate(yaml.safe_load((ROOT / "contracts" / "hcp-1.0.yaml").read_text()))
    cut = dataclasses.replace(text_result("```bash\nls /app"), stop_reason=FENCE_STOP)
    unknown = dataclasses.replace(text_result("```bash\npwd"), stop_reason="not-ours")
    model = ScriptedChatModel([cut, unknown, "DONE"])
    ctx = make_context(tmp_path / "trial", contract=contract, config=_config(), chat_model=model)  # type: ignore[arg-type]
    sb = ScriptedSandbox()
    out = HarnessAgent().run(sb, ctx)
    assert [c[0] for c in sb.commands] == ["ls /app", "pwd"] and out.turns == 3
    assert all(r["stop"] == [FENCE_STOP] for r in model.requests)
    assistant = [m["content"] for m in model.requests[2]["messages"] if m["role"] == "assistant"]
    # few-shot reply, then ours: the matched stop string is restored, a string we did not send is not
    assert assistant[-2:] == ["```bash\nls /app" + FENCE_STOP, "```bash\npwd"]
