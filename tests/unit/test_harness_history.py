"""History policies: the prompt of call i+1 must begin with the prompt of call i plus its reply."""

from __future__ import annotations

from rsi.harness.history import (
    CallRecord,
    FullHistory,
    OwnViewHistory,
    TurnEvent,
    chatml,
    render_own_view,
    serialize_messages,
)

HEAD = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]


def _tool_turn(n: int, server_id: str) -> TurnEvent:
    return TurnEvent(
        turn=n,
        author="m",
        format="tool_calls",
        content=None,
        calls=(CallRecord(server_id, "bash", f'{{"command": "echo {n}"}}'),),
        observations=(f"{n}\n[exit code 0]",),
    )


def test_both_policies_are_prefix_stable_over_turns() -> None:
    for hist in (FullHistory(HEAD), OwnViewHistory(HEAD, viewer="m")):
        prev = hist.messages()
        for n in range(1, 6):
            turn = (
                _tool_turn(n, f"srv-{n}")
                if n % 2
                else TurnEvent(turn=n, author="m", format="tool_calls", content="no tool", note="call a tool")
            )
            hist.append(turn)
            now = hist.messages()
            reply = now[len(prev)]
            assert reply["role"] == "assistant"
            assert serialize_messages(now).startswith(serialize_messages(prev + [reply])), hist.policy
            assert chatml(now).startswith(chatml(prev, add_generation_prompt=True) + (reply["content"] or ""))
            prev = now


def test_full_keeps_server_ids_own_view_uses_its_own() -> None:
    full, own = FullHistory(HEAD), OwnViewHistory(HEAD, viewer="m")
    for h in (full, own):
        h.append(_tool_turn(1, "chatcmpl-tool-9f3a"))
    assert full.messages()[2]["tool_calls"][0]["id"] == "chatcmpl-tool-9f3a"
    assert full.messages()[3]["tool_call_id"] == "chatcmpl-tool-9f3a"
    assert own.messages()[2]["tool_calls"][0]["id"] == "call_1_0"
    assert own.messages()[3]["tool_call_id"] == "call_1_0"


def test_own_view_is_identical_across_trials_with_different_server_ids() -> None:
    a, b = OwnViewHistory(HEAD, viewer="m"), OwnViewHistory(HEAD, viewer="m")
    a.append(_tool_turn(1, "id-a"))
    b.append(_tool_turn(1, "id-b"))
    assert serialize_messages(a.messages()) == serialize_messages(b.messages())
    fa, fb = FullHistory(HEAD), FullHistory(HEAD)
    fa.append(_tool_turn(1, "id-a"))
    fb.append(_tool_turn(1, "id-b"))
    assert serialize_messages(fa.messages()) != serialize_messages(fb.messages())


def test_own_view_is_a_pure_function_of_the_timeline() -> None:
    h = OwnViewHistory(HEAD, viewer="m")
    h.append(_tool_turn(1, "x"))
    mutated = h.messages()
    mutated[0]["content"] = "changed by a caller"
    assert h.messages()[0]["content"] == "sys"
    assert render_own_view(HEAD, h.timeline, "m") == h.messages()


def test_own_view_summarises_turns_of_another_model_and_keeps_own_verbatim() -> None:
    foreign = TurnEvent(
        turn=1,
        author="other-adapter",
        format="text",
        content="long reasoning ...\n```bash\nls\n```",
        calls=(CallRecord("", "bash", "", {"command": "ls"}),),
        observations=("a b\n[exit code 0]",),
    )
    own = TurnEvent(
        turn=2,
        author="m",
        format="text",
        content="```bash\ncat a\n```",
        calls=(CallRecord("", "bash", "", {"command": "cat a"}),),
        observations=("hi\n[exit code 0]",),
    )
    msgs = render_own_view(HEAD, [foreign, own], "m")
    assert msgs[2] == {"role": "assistant", "content": '[turn 1 by other-adapter] bash {"command": "ls"}'}
    assert msgs[3] == {"role": "user", "content": "a b\n[exit code 0]"}
    assert msgs[4] == {"role": "assistant", "content": "```bash\ncat a\n```"}
    assert "long reasoning" not in serialize_messages(msgs)


def test_text_turn_renders_reply_then_output_as_user_message() -> None:
    h = FullHistory(HEAD)
    h.append(
        TurnEvent(
            turn=1,
            author="m",
            format="text",
            content=" ```bash\nls\n``` ",
            calls=(CallRecord("", "bash", "", {"command": "ls"}),),
            observations=("x\n[exit code 0]",),
        )
    )
    assert h.messages()[2:] == [
        {"role": "assistant", "content": " ```bash\nls\n``` "},  # verbatim: not even stripped
        {"role": "user", "content": "x\n[exit code 0]"},
    ]
