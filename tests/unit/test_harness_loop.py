"""The agent loop, end to end with a scripted model and a canned-output sandbox (no server, no Docker)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml

from rsi.core.contract import Contract
from rsi.core.harness_config import HarnessConfig
from rsi.core.trial import ErrorType, is_infra
from rsi.harness.agent_loop import HarnessAgent
from rsi.harness.atif import load_trajectory
from rsi.harness.fakes import ScriptedChatModel, ScriptedSandbox, make_context, text_result
from rsi.harness.history import chatml, serialize_messages
from rsi.models.client import ChatClient, ModelUnavailable, ToolCall
from rsi.sandbox.base import SandboxError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def contract() -> Contract:
    return Contract.model_validate(yaml.safe_load((ROOT / "contracts" / "hcp-1.0.yaml").read_text()))


def _config(**over: object) -> HarnessConfig:
    raw = yaml.safe_load((ROOT / "harness_configs" / "default.yaml").read_text())
    for key, value in over.items():
        section, field = key.split("__") if "__" in key else (key, None)
        if field:
            raw[section][field] = value
        else:
            raw[section] = value
    return HarnessConfig.model_validate(raw)


def _run(
    tmp_path: Path,
    contract: Contract,
    replies: list,
    sandbox: ScriptedSandbox | None = None,
    config: HarnessConfig | None = None,
    **ctx_kw: object,
):
    model = replies if isinstance(replies, ScriptedChatModel) else ScriptedChatModel(replies)
    ctx = make_context(
        tmp_path / "trial", contract=contract, config=config or _config(), chat_model=model, **ctx_kw
    )  # type: ignore[arg-type]
    sb = sandbox or ScriptedSandbox()
    return HarnessAgent().run(sb, ctx), model, sb


def test_runs_commands_and_stops_on_finish_word(tmp_path: Path, contract: Contract) -> None:
    sb = ScriptedSandbox(outputs={"echo hello > /app/hello.txt": ""})
    out, model, sb = _run(
        tmp_path,
        contract,
        ["```bash\necho hello > /app/hello.txt\n```", "DONE", "```bash\nrm -rf /\n```"],
        sb,
    )
    assert [c[0] for c in sb.commands] == ["echo hello > /app/hello.txt"]
    assert sb.commands[0][2] == "/app"
    assert len(model.requests) == 2 and out.turns == 2
    assert out.error_type is None and not out.timed_out
    assert out.usage.calls == 2 and out.usage.prompt_tokens == 20 and out.usage.completion_tokens == 10
    assert out.harness_config_digest == _config().digest()
    assert out.model_name == "SmolLM2-135M-Instruct"
    req = model.requests[0]
    assert req["model"] == "SmolLM2-135M-Instruct" and req["tools"] is None
    assert (req["temperature"], req["top_p"], req["max_tokens"]) == (0.7, 0.95, 192)
    # the second prompt shows the model its command's output
    assert model.requests[1]["messages"][-1] == {"role": "user", "content": "(no output)\n[exit code 0]"}
    # a plain transcript beside the trajectory, for grep
    log = (tmp_path / "trial" / "agent.log").read_text()
    assert "--> bash" in log and "echo hello > /app/hello.txt" in log and "[exit code 0]" in log


def test_prompt_is_rendered_from_templates_with_few_shot(tmp_path: Path, contract: Contract) -> None:
    _, model, _ = _run(tmp_path, contract, ["DONE"], instruction="Count the lines of /app/a.log.")
    msgs = model.requests[0]["messages"]
    assert msgs[0]["role"] == "system" and "/app" in msgs[0]["content"] and "DONE" in msgs[0]["content"]
    assert "6 turns" in msgs[0]["content"]
    assert [m["role"] for m in msgs[1:5]] == ["user", "assistant", "user", "assistant"]
    assert msgs[4]["content"] == "DONE"  # the few-shot's {{ finish_word }} is rendered
    assert msgs[-1] == {"role": "user", "content": "Task: Count the lines of /app/a.log."}


def test_misspelt_template_variable_is_a_config_error_outcome(tmp_path: Path, contract: Contract) -> None:
    cfg = _config(prompt={"system": "Work in {{ work_dir }}", "instruction": "{{ instruction }}"})
    out, model, _ = _run(tmp_path, contract, ["DONE"], config=cfg)
    assert out.error_type == ErrorType.MODEL_CONFIG_ERROR and not is_infra(out.error_type)
    assert "prompt.system" in (out.error_message or "") and "work_dir" in (out.error_message or "")
    assert model.requests == []
    assert load_trajectory(out.trajectory_path).rsi["stop_reason"] == "config_error"


def test_stops_at_max_turns_capped_by_contract(tmp_path: Path, contract: Contract) -> None:
    out, model, sb = _run(tmp_path, contract, ["```bash\nls\n```"], config=_config(loop__max_turns=4))
    assert len(model.requests) == 4 and out.turns == 4 and len(sb.commands) == 4
    assert load_trajectory(out.trajectory_path).rsi["stop_reason"] == "max_turns"
    capped = contract.model_copy(update={"limits": contract.limits.model_copy(update={"max_turns": 2})})
    out, model, _ = _run(tmp_path, capped, ["```bash\nls\n```"], config=_config(loop__max_turns=4))
    assert len(model.requests) == 2


def test_max_tokens_and_command_timeout_are_capped(tmp_path: Path, contract: Contract) -> None:
    small = contract.model_copy(
        update={
            "limits": contract.limits.model_copy(
                update={"max_tokens_per_turn": 64, "command_timeout_sec": 9.0}
            )
        }
    )
    _, model, sb = _run(tmp_path, small, ["```bash\nls\n```", "DONE"], command_timeout_sec=30.0)
    assert model.requests[0]["max_tokens"] == 64
    assert sb.commands[0][1] == 9.0
    _, _, sb = _run(tmp_path, contract, ["```bash\nls\n```", "DONE"], command_timeout_sec=3.0)
    assert sb.commands[0][1] == 3.0


def test_agent_timeout_sets_timed_out(tmp_path: Path, contract: Contract) -> None:
    model = ScriptedChatModel(["```bash\nls\n```"], delay_sec=0.15)
    out, model, _ = _run(tmp_path, contract, model, agent_timeout_sec=0.3)
    assert out.timed_out and out.error_type is None
    assert 1 <= len(model.requests) <= 3
    assert load_trajectory(out.trajectory_path).rsi["stop_reason"] == "agent_timeout"


def test_unparseable_reply_is_a_turn_with_format_help_not_a_crash(tmp_path: Path, contract: Contract) -> None:
    out, model, sb = _run(tmp_path, contract, ["I would use ls maybe", "```bash\nls\n```", "DONE"])
    assert out.error_type is None and out.turns == 3 and len(sb.commands) == 1
    help_msg = model.requests[1]["messages"][-1]
    assert help_msg["role"] == "user" and "```bash" in help_msg["content"] and "DONE" in help_msg["content"]


def test_long_observation_is_truncated_keeping_head_and_tail(tmp_path: Path, contract: Contract) -> None:
    sb = ScriptedSandbox(outputs={"cat big": "START" + "x" * 10_000 + "END"})
    _, model, _ = _run(tmp_path, contract, ["```bash\ncat big\n```", "DONE"], sb)
    obs = model.requests[1]["messages"][-1]["content"]
    assert len(obs) <= 1500
    assert obs.startswith("START") and obs.endswith("[exit code 0]") and "characters cut" in obs


def test_model_unavailable_is_an_infra_outcome(tmp_path: Path, contract: Contract) -> None:
    out, _, _ = _run(tmp_path, contract, ["```bash\nls\n```", ModelUnavailable("endpoint down")])
    assert out.error_type == ErrorType.MODEL_UNAVAILABLE and is_infra(out.error_type)
    assert "endpoint down" in (out.error_message or "") and out.turns == 1
    assert load_trajectory(out.trajectory_path).rsi["stop_reason"] == "model_unavailable"


def test_real_client_errors_map_to_outcomes(tmp_path: Path, contract: Contract) -> None:
    def down(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"error": {"message": "overloaded"}})

    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"error": {"message": "model 'x' does not exist"}})

    for handler, expected in ((down, ErrorType.MODEL_UNAVAILABLE), (refuse, ErrorType.MODEL_CONFIG_ERROR)):
        client = ChatClient(
            "http://model.test/v1",
            transport=httpx.MockTransport(handler),
            max_attempts=2,
            backoff_initial=0.0,
            backoff_max=0.0,
        )
        ctx = make_context(tmp_path / expected, contract=contract, config=_config(), chat_model=client)
        out = HarnessAgent().run(ScriptedSandbox(), ctx)
        assert out.error_type == expected
        assert out.trajectory_path is not None and out.trajectory_path.exists()


def test_sandbox_error_propagates_after_writing_the_trajectory(tmp_path: Path, contract: Contract) -> None:
    class Broken(ScriptedSandbox):
        def exec(self, cmd: str, **kw: object):  # type: ignore[override]
            raise SandboxError("container vanished")

    ctx = make_context(
        tmp_path / "t",
        contract=contract,
        config=_config(),
        chat_model=ScriptedChatModel(["```bash\nls\n```"]),
    )
    with pytest.raises(SandboxError):
        HarnessAgent().run(Broken(), ctx)
    assert (tmp_path / "t" / "trajectory.json").exists()


def test_tool_calls_format_runs_tools_and_stops_on_submit(tmp_path: Path, contract: Contract) -> None:
    cfg = _config(action_format="tool_calls", tools=["bash", "read_file", "write_file", "submit"])
    replies = [
        text_result(
            None,
            tool_calls=[
                ToolCall(
                    "srv-1",
                    "write_file",
                    {"path": "hello.txt", "content": "hello\n"},
                    '{"path": "hello.txt", "content": "hello\\n"}',
                )
            ],
        ),
        text_result(None, tool_calls=[ToolCall("srv-2", "bash", {}, "{not json")]),
        text_result("done", tool_calls=[ToolCall("srv-3", "submit", {}, "{}")]),
    ]
    out, model, sb = _run(tmp_path, contract, replies, config=cfg)
    assert sb.files["/app/hello.txt"] == b"hello\n"
    assert len(model.requests) == 3 and out.turns == 3
    tools = [t["function"]["name"] for t in model.requests[0]["tools"]]
    assert tools == ["bash", "read_file", "write_file", "submit"]
    second = model.requests[1]["messages"]
    assert (
        second[-2]["tool_calls"][0]["function"]["arguments"] == '{"path": "hello.txt", "content": "hello\\n"}'
    )
    assert second[-1] == {
        "role": "tool",
        "tool_call_id": second[-2]["tool_calls"][0]["id"],
        "content": "wrote 6 bytes to /app/hello.txt",
    }
    assert "not a JSON object" in model.requests[2]["messages"][-1]["content"]
    traj = load_trajectory(out.trajectory_path)
    assert traj.rsi["stop_reason"] == "submitted"
    assert traj.agent.tool_definitions and traj.rsi["tools"]


def test_trajectory_is_valid_atif_with_steps_and_metrics(tmp_path: Path, contract: Contract) -> None:
    sb = ScriptedSandbox(outputs={"ls": "a.txt\n"})
    out, _, _ = _run(tmp_path, contract, ["```bash\nls\n```", "oops", "DONE"], sb)
    raw = json.loads(out.trajectory_path.read_text())
    assert raw["schema_version"] == "ATIF-v1.7" and raw["session_id"] == "trial-0001"
    assert raw["agent"]["model_name"] == "SmolLM2-135M-Instruct"
    assert [s["source"] for s in raw["steps"]] == ["system", "user", "agent", "agent", "agent"]
    assert [s["step_id"] for s in raw["steps"]] == [1, 2, 3, 4, 5]
    first = raw["steps"][2]
    assert first["tool_calls"][0]["function_name"] == "bash"
    assert first["observation"]["results"][0]["source_call_id"] == first["tool_calls"][0]["tool_call_id"]
    assert first["observation"]["results"][0]["content"] == "a.txt\n[exit code 0]"
    assert first["metrics"] == {"prompt_tokens": 10, "completion_tokens": 5, "cached_tokens": 0}
    assert raw["final_metrics"]["total_prompt_tokens"] == 30 and raw["final_metrics"]["total_steps"] == 5
    rsi = raw["extra"]["rsi"]
    assert rsi["harness_config_digest"] == _config().digest() and rsi["model_name"] == "SmolLM2-135M-Instruct"
    assert rsi["messages"][-1] == {"role": "assistant", "content": "DONE"}
    load_trajectory(out.trajectory_path)  # passes the validators


@pytest.mark.parametrize("policy", ["full", "own_view"])
def test_each_prompt_starts_with_previous_prompt_plus_reply(
    tmp_path: Path, contract: Contract, policy: str
) -> None:
    sb = ScriptedSandbox(outputs={"cat big": "y" * 5000, "ls": "a\nb\n"})
    replies = ["```bash\nls\n```", " no command here ", "```bash\ncat big\n```", "```bash\nls\n```\n", "DONE"]
    _, model, _ = _run(tmp_path, contract, replies, sb, config=_config(loop__history=policy))
    prompts = [r["messages"] for r in model.requests]
    assert len(prompts) == 5
    for i in range(1, len(prompts)):
        reply = {"role": "assistant", "content": replies[i - 1]}
        assert serialize_messages(prompts[i]).startswith(serialize_messages(prompts[i - 1] + [reply]))
        assert chatml(prompts[i]).startswith(chatml(prompts[i - 1]) + replies[i - 1])


def test_runs_real_commands_in_the_fake_sandbox_provider(tmp_path: Path, contract: Contract) -> None:
    from rsi.sandbox.base import SandboxSpec
    from rsi.sandbox.fake import FakeSandboxProvider

    provider = FakeSandboxProvider(tmp_path / "sandboxes", images={"fake"})
    sb = provider.start(SandboxSpec(image="fake", workdir="/app"))
    try:
        replies = ["```bash\nprintf 'hello\\n' > hello.txt && wc -c hello.txt; exit 3\n```", "DONE"]
        out, model, _ = _run(tmp_path, contract, replies, sb)  # type: ignore[arg-type]
        assert sb.get_file("/app/hello.txt") == b"hello\n"
        assert model.requests[1]["messages"][-1]["content"] == "6 hello.txt\n[exit code 3]"
        assert out.error_type is None
    finally:
        sb.stop()


def test_text_format_policies_send_identical_prompts(tmp_path: Path, contract: Contract) -> None:
    # default.yaml leaves loop.history out of its search space because of this equality.
    replies = ["```bash\nls\n```", "hmm", "```bash\ncat big\n```", "DONE"]
    sb = {"ls": "a\n", "cat big": "z" * 4000}
    runs = [
        _run(
            tmp_path / p,
            contract,
            replies,
            ScriptedSandbox(outputs=dict(sb)),
            config=_config(loop__history=p),
        )[1]
        for p in ("full", "own_view")
    ]
    assert [r["messages"] for r in runs[0].requests] == [r["messages"] for r in runs[1].requests]
