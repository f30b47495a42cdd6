"""Oracle replays and hinted rollouts (issue 36 items 1-2): the reference as the agent's turns, and the model with a
hint that the stored sample no longer holds. Scripted model and sandbox: no server, no Docker."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rsi.core.contract import Contract
from rsi.core.harness_config import HarnessConfig
from rsi.core.replay import (
    hint_text,
    named_paths,
    reference_actions,
    reference_tools,
    refers_to_hint,
    replay_plan,
)
from rsi.core.task import TaskSpec
from rsi.harness.agent import AgentSetupError
from rsi.harness.agent_loop import HarnessAgent
from rsi.harness.atif import load_trajectory
from rsi.harness.fakes import ScriptedChatModel, ScriptedSandbox, make_context
from rsi.harness.replay import HintedAgent, OracleReplayAgent, hint_level
from rsi.loop.update.data import without_hint
from rsi.sandbox.base import ExecResult

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def contract() -> Contract:
    return Contract.model_validate(yaml.safe_load((ROOT / "contracts" / "hcp-1.0.yaml").read_text()))


def _config(**over: object) -> HarnessConfig:
    raw = yaml.safe_load((ROOT / "harness_configs" / "default.yaml").read_text())
    raw.update(over)
    return HarnessConfig.model_validate(raw)


# -- the reference as actions ------------------------------------------------------------------


def test_a_plain_reference_splits_into_one_action_per_command() -> None:
    script = "#!/bin/bash\nset -euo pipefail\ncd /app\n# sort them\nsort -u a.txt > b.txt\nwc -l < b.txt > n.txt\n"
    assert reference_actions(script) == ["sort -u a.txt > b.txt", "wc -l < b.txt > n.txt"]


def test_a_cd_elsewhere_is_carried_into_the_commands_after_it() -> None:
    script = "#!/bin/bash\ncd /srv/data\nls > /app/list.txt\ncd /app\ncat x\n"
    assert reference_actions(script) == ["cd /srv/data && ls > /app/list.txt", "cat x"]


@pytest.mark.parametrize("body", [
    "cat > /app/a.py <<'EOF'\nimport sys\n\n# a comment inside the file\nprint(1)\nEOF\n",
    "for f in *.txt; do\n  wc -l \"$f\"\ndone > /app/counts.txt\n",
    "python3 -c 'print(1)\nprint(2)' > /app/out.txt\n",
    "grep -c ERROR log.txt \\\n  > /app/n.txt\n",
])
def test_a_reference_that_cannot_be_split_is_one_action_byte_for_byte(body: str) -> None:
    actions = reference_actions("#!/bin/bash\nset -e\ncd /app\n" + body)
    assert actions == [body.rstrip()], "a heredoc's blank and # lines are content: kept exactly"


def test_hints_escalate_from_tools_to_first_command_to_the_whole_reference() -> None:
    actions = ["tail -n +2 /app/s.csv | awk -F, '{s+=$2} END {print s}' > /app/t.txt", "cat /app/t.txt"]
    assert reference_tools(actions) == ["tail", "awk", "cat"]
    one, two, three = (hint_text(lv, actions) for lv in (1, 2, 3))
    assert "`tail`" in one and "awk" in one and "/app/s.csv" not in one
    assert actions[0] in two and actions[1] not in two
    assert all(a in three for a in actions)
    with pytest.raises(ValueError):
        hint_text(4, actions)


@pytest.mark.parametrize(("text", "leaks"), [
    ("```bash\nsort -u a > b\n```", False),
    ("As the hint says, run sort.", True),
    ("Following the hints:\n```bash\nls\n```", True),
    ("I will use the suggested command.", True),
    ("```bash\ngrep -c think log\n```", False),
])
def test_a_reply_that_mentions_the_hint_is_recognised(text: str, leaks: bool) -> None:
    assert refers_to_hint(text) is leaks


def test_the_replay_plan_fits_the_turns_dropping_check_then_look_then_joining_commands() -> None:
    cmds = ["a", "b", "c"]
    full = replay_plan(cmds, inputs=["/app/in.txt"], outputs=["/app/out.txt"], max_actions=5)
    assert full.actions == ["head -n 20 /app/in.txt", "a", "b", "c", "cat /app/out.txt"]
    assert replay_plan(cmds, inputs=[], outputs=["/app/o"], max_actions=4).actions == ["ls -la", "a", "b", "c"]
    assert replay_plan(cmds, inputs=[], outputs=[], max_actions=3).actions == ["a", "b", "c"]
    assert replay_plan(cmds, inputs=[], outputs=[], max_actions=2).actions == ["a", "b\nc"], "the reference runs whole"


def test_paths_named_in_an_instruction() -> None:
    text = "Count the lines of `/app/a.txt` and write it to /app/out.txt. Then see /app/a.txt again."
    assert named_paths(text) == ["/app/a.txt", "/app/out.txt"]


# -- the agents ----------------------------------------------------------------------------------


def _task_dir(tmp_path: Path, solve: str) -> Path:
    d = tmp_path / "task"
    (d / "solution").mkdir(parents=True)
    (d / "solution" / "solve.sh").write_text(solve)
    return d


def _ctx(tmp_path: Path, contract: Contract, config: HarnessConfig, *, solve: str, reads: list[str] | None = None,
         chat_model: object = None, variant: str | None = None) -> object:
    ctx = make_context(tmp_path / "trial", contract=contract, config=config, chat_model=chat_model,
                       instruction="Count the lines of `/app/in.txt` and write the number to `/app/n.txt`.",
                       task_dir=_task_dir(tmp_path, solve))
    spec = TaskSpec.model_validate({"verifier": {"reads": reads or []}})
    ctx.task = ctx.task.model_copy(update={"spec": spec})  # type: ignore[attr-defined]
    ctx.variant = variant  # type: ignore[attr-defined]
    return ctx


def test_an_oracle_replay_is_the_reference_as_harness_turns_with_no_model_call(tmp_path: Path,
                                                                               contract: Contract) -> None:
    config = _config()
    sb = ScriptedSandbox(outputs={"wc -l < /app/in.txt > /app/n.txt": "", "cat /app/n.txt": "3\n",
                                  "head -n 20 /app/in.txt": "a\nb\nc\n",
                                  # the output does not exist before the agent acts: not an input to look at
                                  "test -f /app/n.txt": ExecResult(exit_code=1, stdout="", stderr="")})
    ctx = _ctx(tmp_path, contract, config, solve="#!/bin/bash\nset -e\ncd /app\nwc -l < /app/in.txt > /app/n.txt\n",
               reads=["/app/n.txt"], variant="careful")
    out = OracleReplayAgent().run(sb, ctx)  # type: ignore[arg-type]
    assert out.error_type is None and out.usage.calls == 0 and out.model_name == "oracle-replay"
    run = [c for c, _t, _w in sb.commands if not c.startswith("test -f")]
    assert run == ["head -n 20 /app/in.txt", "wc -l < /app/in.txt > /app/n.txt", "cat /app/n.txt"]
    traj = load_trajectory(out.trajectory_path)  # type: ignore[arg-type]
    msgs = traj.rsi["messages"]
    head = 2 + len(config.prompt.few_shot)
    assert msgs[0]["content"].startswith("You are a shell agent") and msgs[head - 1]["content"].startswith("Task: ")
    replies = [m["content"] for m in msgs[head:] if m["role"] == "assistant"]
    assert replies == ["```bash\nhead -n 20 /app/in.txt\n```\n", "```bash\nwc -l < /app/in.txt > /app/n.txt\n```\n",
                       "```bash\ncat /app/n.txt\n```\n", "DONE"], "the bytes a model's reply leaves in the history"
    assert traj.rsi["source"] == "oracle" and traj.rsi["stop_reason"] == "finish_word"


def test_a_plain_replay_is_the_commands_and_the_finish_word(tmp_path: Path, contract: Contract) -> None:
    """The loop's default: no look and no check (a check followed by the finish word taught the demo's candidate
    to stop after reading any file)."""
    sb = ScriptedSandbox()
    ctx = _ctx(tmp_path, contract, _config(), solve="#!/bin/bash\nsort -u /app/a > /app/b\nwc -l < /app/b > /app/n\n",
               reads=["/app/n"])
    out = OracleReplayAgent().run(sb, ctx)  # type: ignore[arg-type]
    msgs = load_trajectory(out.trajectory_path).rsi["messages"]  # type: ignore[arg-type]
    assert [m["content"] for m in msgs if m["role"] == "assistant"][-3:] == [
        "```bash\nsort -u /app/a > /app/b\n```\n", "```bash\nwc -l < /app/b > /app/n\n```\n", "DONE"]
    assert [c for c, _t, _w in sb.commands if not c.startswith("test -f")] == [
        "sort -u /app/a > /app/b", "wc -l < /app/b > /app/n"]
    with pytest.raises(AgentSetupError):
        OracleReplayAgent().run(sb, _ctx(tmp_path / "x", contract, _config(), solve="#!/bin/bash\nls\n",  # type: ignore[arg-type]
                                         variant="sloppy"))


def test_an_oracle_replay_in_the_tool_calls_format_calls_bash_then_submit(tmp_path: Path,
                                                                         contract: Contract) -> None:
    config = _config(action_format="tool_calls", tools=["bash", "submit"])
    sb = ScriptedSandbox()
    ctx = _ctx(tmp_path, contract, config, solve="#!/bin/bash\necho 3 > /app/n.txt\n", variant="look")
    out = OracleReplayAgent().run(sb, ctx)  # type: ignore[arg-type]
    msgs = load_trajectory(out.trajectory_path).rsi["messages"]  # type: ignore[arg-type]
    calls = [c["function"]["name"] for m in msgs if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    assert calls == ["bash", "bash", "submit"] and out.error_type is None  # the look, the command, submit


def test_a_task_without_a_reference_is_an_agent_error_not_a_crash(tmp_path: Path, contract: Contract) -> None:
    ctx = _ctx(tmp_path, contract, _config(), solve="#!/bin/bash\n# nothing\n")
    out = OracleReplayAgent().run(ScriptedSandbox(), ctx)  # type: ignore[arg-type]
    assert out.error_type is not None and "no reference command" in (out.error_message or "")


def test_a_hinted_rollout_shows_the_hint_and_is_stored_as_the_serving_prompts_render_it(
        tmp_path: Path, contract: Contract) -> None:
    config = _config()
    replies = ["```bash\nwc -l < /app/in.txt > /app/n.txt\n```", "DONE"]
    solve = "#!/bin/bash\nwc -l < /app/in.txt > /app/n.txt\n"
    hinted = ScriptedChatModel(replies=replies)
    out = HintedAgent().run(ScriptedSandbox(), _ctx(tmp_path / "h", contract, config, solve=solve,  # type: ignore[arg-type]
                                                    chat_model=hinted, variant="hint-2"))
    head = 2 + len(config.prompt.few_shot)
    first = hinted.requests[0]["messages"]
    assert first[head]["role"] == "user" and "a good first command" in first[head]["content"], "the model saw it"
    traj = load_trajectory(out.trajectory_path)  # type: ignore[arg-type]
    assert traj.rsi["source"] == "hinted:2" and traj.rsi["hint"]["index"] == head
    stored, why = without_hint(traj.rsi["messages"], traj.rsi["hint"])
    # the same replies without a hint, under the serving config: byte-identical messages
    plain = ScriptedChatModel(replies=replies)
    ref = HarnessAgent().run(ScriptedSandbox(), _ctx(tmp_path / "p", contract, config, solve=solve,  # type: ignore[arg-type]
                                                     chat_model=plain))
    assert why is None and stored == load_trajectory(ref.trajectory_path).rsi["messages"]  # type: ignore[arg-type]
    assert not any("Hint" in str(m.get("content")) for m in stored)


def test_a_hinted_rollout_that_mentions_the_hint_is_dropped(tmp_path: Path, contract: Contract) -> None:
    model = ScriptedChatModel(replies=["Using the hint:\n```bash\nwc -l < /app/in.txt > /app/n.txt\n```", "DONE"])
    out = HintedAgent().run(ScriptedSandbox(), _ctx(tmp_path, contract, _config(), chat_model=model,  # type: ignore[arg-type]
                                                    solve="#!/bin/bash\nwc -l < /app/in.txt > /app/n.txt\n",
                                                    variant="hint-3"))
    traj = load_trajectory(out.trajectory_path)  # type: ignore[arg-type]
    _msgs, why = without_hint(traj.rsi["messages"], traj.rsi["hint"])
    assert why is not None and why.startswith("hint_leak")


def test_a_hint_variant_outside_the_ladder_is_refused() -> None:
    assert hint_level("hint-1") == 1
    for bad in (None, "hint-0", "hint-4", "level-2", "hint-x"):
        with pytest.raises(AgentSetupError):
            hint_level(bad)
