"""Action parsing and tool execution: what the harness does with one model reply."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rsi.core.errors import ConfigError
from rsi.harness.actions import (
    parse_text_reply,
    parse_tool_calls,
    resolve_path,
    run_invocation,
    truncate_middle,
)
from rsi.harness.fakes import ScriptedSandbox
from rsi.models.client import ToolCall
from rsi.sandbox.base import ExecResult

SCHEMAS: dict[str, dict[str, Any]] = {
    "bash": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
    "write_file": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
    "submit": {"type": "object", "properties": {}},
}


def test_text_fenced_block_is_the_command() -> None:
    p = parse_text_reply("I will list.\n```bash\nls -la /app\n```\nthen more", "DONE", turn=3)
    assert p.error is None and not p.finish
    assert [(i.name, i.arguments, i.call_id) for i in p.invocations] == [
        ("bash", {"command": "ls -la /app"}, "call_3_0")
    ]


def test_text_only_first_block_runs_and_sh_and_untagged_fences_count() -> None:
    p = parse_text_reply("```sh\necho one\n```\n```bash\necho two\n```", "DONE", turn=1)
    assert [i.arguments["command"] for i in p.invocations] == ["echo one"]
    p = parse_text_reply("```\ncat f\n```", "DONE", turn=1)
    assert p.invocations[0].arguments["command"] == "cat f"


def test_text_unterminated_fence_cut_by_max_tokens_still_runs() -> None:
    p = parse_text_reply("```bash\nwc -l /app/a.log", "DONE", turn=1)
    assert p.invocations[0].arguments["command"] == "wc -l /app/a.log"


def test_text_finish_word_alone_ends() -> None:
    p = parse_text_reply("DONE", "DONE", turn=2)
    assert p.finish and p.invocations == [] and p.error is None
    assert parse_text_reply("All good.\nDONE.\n", "DONE", turn=2).finish


def test_text_finish_word_inside_prose_or_fence_does_not_end() -> None:
    assert parse_text_reply("I am not DONE yet", "DONE", turn=1).error is not None
    p = parse_text_reply("```bash\necho DONE\n```", "DONE", turn=1)
    assert not p.finish and p.invocations[0].arguments["command"] == "echo DONE"


def test_text_command_and_finish_word_runs_then_finishes() -> None:
    p = parse_text_reply("```bash\ntouch /app/x\n```\nDONE", "DONE", turn=1)
    assert p.finish and p.invocations[0].arguments["command"] == "touch /app/x"


def test_text_no_action_is_an_error_observation_naming_the_format() -> None:
    for reply in ("Sure, I can help with that.", "", None, "```bash\n\n```"):
        p = parse_text_reply(reply, "FINISHED", turn=1)
        assert p.invocations == [] and not p.finish
        assert p.error is not None and "```bash" in p.error and "FINISHED" in p.error


def test_tool_calls_valid_and_submit() -> None:
    calls = [
        ToolCall("c1", "bash", {"command": "ls"}, '{"command": "ls"}'),
        ToolCall("c2", "submit", {}, "{}"),
    ]
    p = parse_tool_calls(None, calls, SCHEMAS)
    assert p.finish and [i.error for i in p.invocations] == [None, None]


def test_tool_calls_bad_arguments_are_per_call_errors() -> None:
    calls = [
        ToolCall("c1", "bash", {}, '{"command": "ls"'),  # not JSON: the client leaves arguments {}
        ToolCall("c2", "bash", {"cmd": "ls"}, '{"cmd": "ls"}'),
        ToolCall("c3", "write_file", {"path": "a", "content": 3}, '{"path": "a", "content": 3}'),
        ToolCall("c4", "rm_rf", {}, "{}"),
    ]
    p = parse_tool_calls("", calls, SCHEMAS)
    errs = [i.error or "" for i in p.invocations]
    assert "not a JSON object" in errs[0]
    assert "needs argument(s): command" in errs[1]
    assert "'content' of write_file must be a string" in errs[2]
    assert "unknown tool 'rm_rf'" in errs[3] and "bash" in errs[3]
    assert not p.finish and p.error is None


def test_tool_calls_none_is_an_error_observation() -> None:
    p = parse_tool_calls("I think the answer is 4", [], SCHEMAS)
    assert p.error is not None and "submit" in p.error and "bash" in p.error


def test_truncate_middle_keeps_head_and_tail_within_bound() -> None:
    text = "HEAD" + "x" * 5000 + "TAIL"
    out = truncate_middle(text, 300)
    assert len(out) <= 300
    assert out.startswith("HEAD") and out.endswith("TAIL") and "characters cut" in out
    assert truncate_middle("short", 300) == "short"
    assert len(truncate_middle("y" * 50, 10)) == 10  # too small for the marker: hard cut


def test_resolve_path_against_workdir() -> None:
    assert resolve_path("notes.txt", "/app") == "/app/notes.txt"
    assert resolve_path("../etc/x", "/app") == "/etc/x"
    assert resolve_path("/tmp/a", "/app") == "/tmp/a"


def test_run_invocations_map_to_sandbox() -> None:
    sb = ScriptedSandbox(outputs={"ls": ExecResult(2, "out\n", "err\n")}, files={"/app/a.txt": b"alpha"})
    calls = [
        ToolCall("1", "bash", {"command": "ls"}, ""),
        ToolCall("2", "read_file", {"path": "a.txt"}, ""),
        ToolCall("3", "write_file", {"path": "sub/b.txt", "content": "beta"}, ""),
        ToolCall("4", "read_file", {"path": "/nope"}, ""),
    ]
    schemas = dict(
        SCHEMAS,
        read_file={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    )
    invs = parse_tool_calls(None, calls, schemas).invocations
    outs = [run_invocation(sb, i, workdir="/app", command_timeout=7) for i in invs]
    assert outs[0].content == "out\nerr\n[exit code 2]" and outs[0].exit_code == 2
    assert sb.commands[0] == ("ls", 7, "/app")
    assert outs[1].content == "alpha"
    assert sb.files["/app/sub/b.txt"] == b"beta" and "4 bytes" in outs[2].content
    assert outs[3].is_error and "/nope" in outs[3].content


def test_bash_timeout_is_reported_to_the_model() -> None:
    sb = ScriptedSandbox(outputs={"sleep 99": ExecResult(137, "", "", timed_out=True)})
    inv = parse_text_reply("```bash\nsleep 99\n```", "DONE", turn=1).invocations[0]
    out = run_invocation(sb, inv, workdir="/app", command_timeout=5)
    assert out.timed_out and out.content == "(no output)\n[timed out after 5s]"


def test_text_non_shell_block_is_not_run_and_the_error_says_why() -> None:
    reply = '```python\nprint("hi")\n```\nThis script prints "hi" when run.\n'
    p = parse_text_reply(reply, "DONE", turn=1)
    assert p.invocations == [] and p.error is not None
    assert "```python" in p.error and "only ```bash" in p.error
    p = parse_text_reply("```python\nx = 1\n```\n```bash\npython3 a.py\n```", "DONE", turn=1)
    assert p.invocations[0].arguments["command"] == "python3 a.py"


def test_text_closing_fence_on_the_command_line() -> None:
    p = parse_text_reply("```bash\nls /app```\nDONE", "DONE", turn=1)
    assert p.invocations[0].arguments["command"] == "ls /app" and p.finish


STRICT: dict[str, dict[str, Any]] = {
    "run": {
        "type": "object",
        "properties": {
            "command": {"type": "string"},
            "timeout": {"type": "integer", "minimum": 1},
            "shell": {"type": "string", "enum": ["bash", "sh"]},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
    "submit": {"type": "object", "properties": {}},
}


def _err(name: str, args: dict[str, Any], schemas: dict[str, dict[str, Any]] = STRICT) -> str | None:
    return parse_tool_calls(None, [ToolCall("c", name, args, json.dumps(args))], schemas).invocations[0].error


def test_tool_call_arguments_are_checked_with_json_schema() -> None:
    assert _err("run", {"command": "ls", "timeout": 5, "shell": "sh"}) is None
    assert _err("run", {"command": 7}) == "argument 'command' of run must be a string"
    assert _err("run", {"command": "ls", "timeout": "5"}) == "argument 'timeout' of run must be an integer"
    assert _err("run", {"command": "ls", "timeout": 0}) == "argument 'timeout' of run: 0 is less than the minimum of 1"
    assert _err("run", {"command": "ls", "shell": "zsh"}) == 'argument \'shell\' of run must be one of: "bash", "sh"'
    assert _err("run", {"command": "ls", "cwd": "/"}) == (
        "run does not take argument(s): cwd; it takes: command, shell, timeout"
    )
    # missing required arguments come first, all of them, whatever else is wrong
    assert _err("run", {"cwd": "/"}) == "run needs argument(s): command"


def test_extra_arguments_are_fine_unless_the_schema_forbids_them() -> None:
    assert _err("bash", {"command": "ls", "cwd": "/"}, SCHEMAS) is None
    assert _err("submit", {"reason": "done"}) is None


def test_a_bad_contract_schema_is_a_config_error_not_the_models() -> None:
    bad = {"bash": {"type": "object", "properties": {"command": {"type": "strung"}}}}
    with pytest.raises(ConfigError, match="not valid JSON Schema"):
        _err("bash", {"command": "ls"}, bad)
