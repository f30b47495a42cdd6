"""Few-shot demonstrations (rsi.core.fewshot): the draw (seeded, diverse across templates), the rendering in
each action format, and how a config carrying them is validated and rendered into a prompt."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rsi.core.errors import ConfigError
from rsi.core.fewshot import MAX_STEPS, Demo, Step, draw, render
from rsi.core.harness_config import HarnessConfig, config_violations
from rsi.core.reflection import parse_patch
from rsi.core.variants import apply_variant
from rsi.harness.prompts import initial_messages
from rsi.store.files import load_contract

REPO = Path(__file__).resolve().parents[2]
CONTRACT = load_contract(REPO / "contracts" / "hcp-1.0.yaml")


def demo(task: str, template: str, *steps: tuple[str, str], tool: str = "bash") -> Demo:
    return Demo(task=task, template=template, instruction=f"Task: do {task}",
                steps=tuple(Step(tool, {"command": c} if tool == "bash" else {"path": c}, o) for c, o in steps),
                trial_id=f"trial-{task}-{len(steps)}")


POOL = [demo(f"{tpl.split('/')[1]}-{i}", tpl, ("true", "[exit code 0]"))
        for tpl in ("text/lines", "text/words", "files/copy") for i in range(3)]


def config(action_format: str = "text", tools: tuple[str, ...] = ("bash", "submit")) -> HarnessConfig:
    return HarnessConfig.model_validate({
        "name": "c", "action_format": action_format, "tools": list(tools),
        "prompt": {"system": "sys", "instruction": "Task: {{ instruction }}",
                   "few_shot": [{"role": "user", "content": "EXAMPLE"}, {"role": "assistant", "content": "DONE"}]}})


def test_the_draw_covers_templates_before_repeating_one_and_never_repeats_a_task() -> None:
    three = draw(POOL, 3, seed=0)
    assert len({d.template for d in three}) == 3
    five = draw(POOL, 5, seed=0)
    assert len({d.task for d in five}) == 5 and five[:3] == three
    counts = sorted(sum(d.template == t for d in five) for t in {d.template for d in POOL})
    assert counts == [1, 2, 2]  # the second round of templates starts only after every template gave one
    assert len(draw(POOL, 50, seed=0)) == len(POOL) and draw(POOL, 0, seed=0) == []
    # two trajectories of one task: only one of them is ever drawn
    twice = [*POOL, Demo("lines-0", "text/lines", "Task: again", (Step("bash", {"command": "x"}, ""),), "other")]
    assert len(draw(twice, 50, seed=1)) == len(POOL)


def test_the_draw_is_reproducible_and_the_seed_matters() -> None:
    shuffled = list(POOL)
    random.Random(7).shuffle(shuffled)
    assert draw(POOL, 3, seed="0:1") == draw(shuffled, 3, seed="0:1")  # the input's order does not matter
    assert len({tuple(d.task for d in draw(POOL, 3, seed=s)) for s in range(8)}) > 1


def test_text_rendering_is_the_shipped_example_shape() -> None:
    d = demo("count", "text/lines", ("wc -l < a.txt > b.txt && cat b.txt", "3\n[exit code 0]"))
    assert render([d], "text") == [
        {"role": "user", "content": "Task: do count"},
        {"role": "assistant", "content": "```bash\nwc -l < a.txt > b.txt && cat b.txt\n```"},
        {"role": "user", "content": "3\n[exit code 0]"},
        {"role": "assistant", "content": "{{ finish_word }}"},
    ]


def test_tool_calls_rendering_is_the_tool_call_message_shape() -> None:
    d = demo("count", "text/lines", ("wc -l a.txt", "3 a.txt\n[exit code 0]"))
    shots = render([d], "tool_calls")
    assert [m["role"] for m in shots] == ["user", "assistant", "tool", "assistant", "tool"]
    call = shots[1]["tool_calls"][0]
    assert call == {"id": "demo0_0", "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "wc -l a.txt"}'}}
    assert shots[2] == {"role": "tool", "content": "3 a.txt\n[exit code 0]", "tool_call_id": "demo0_0"}
    assert shots[3]["tool_calls"][0]["function"] == {"name": "submit", "arguments": "{}"}
    assert shots[4] == {"role": "tool", "content": "submitted", "tool_call_id": "demo0_1"}


def test_demos_become_a_valid_prompt_in_either_format() -> None:
    d = demo("braces", "text/awk", ("awk '{{print $1}}' a.txt", "{{ not a variable }}\n[exit code 0]"))
    text = apply_variant(config(), {"prompt.few_shot": render([d], "text")}, CONTRACT)
    msgs = initial_messages(text, {"instruction": "real task", "finish_word": "DONE", "workdir": "/app",
                                   "max_turns": 4, "tools": [], "tool_names": [], "task": "t"})
    assert msgs[2]["content"] == "```bash\nawk '{{print $1}}' a.txt\n```"  # template syntax kept verbatim
    assert msgs[3]["content"] == "{{ not a variable }}\n[exit code 0]" and msgs[4]["content"] == "DONE"
    assert msgs[-1] == {"role": "user", "content": "Task: real task"}
    tc = apply_variant(config("tool_calls"), {"prompt.few_shot": render([d], "tool_calls")}, CONTRACT)
    msgs = initial_messages(tc, {"instruction": "x", "finish_word": "DONE", "workdir": "/app", "max_turns": 4,
                                 "tools": [], "tool_names": [], "task": "t"})
    assert msgs[2]["tool_calls"][0]["function"]["name"] == "bash" and msgs[3]["tool_call_id"] == "demo0_0"
    assert config_violations(tc, CONTRACT) == []


def test_few_shot_patches_are_validated() -> None:
    calls = render([demo("a", "t/a", ("ls", ""))], "tool_calls")
    with pytest.raises(ConfigError, match="action_format tool_calls"):
        apply_variant(config(), {"prompt.few_shot": calls}, CONTRACT)  # tool calls in a text config
    with pytest.raises(ConfigError, match="prompt.few_shot"):
        apply_variant(config(), {"prompt.few_shot": [{"role": "system", "content": "x"}]}, CONTRACT)
    with pytest.raises(ConfigError, match="tool_call_id"):
        apply_variant(config("tool_calls"), {"prompt.few_shot": [{"role": "tool", "content": "x"}]}, CONTRACT)
    # a demonstration that calls a tool the config does not have breaks the contract check
    reads = render([demo("r", "t/r", ("/app/a", "hi"), tool="read_file")], "tool_calls")
    with pytest.raises(ConfigError, match="read_file"):
        apply_variant(config("tool_calls"), {"prompt.few_shot": reads}, CONTRACT)
    # a reflective proposal or --candidate may set few_shot as a list (it is not flattened)
    patch = parse_patch("prompt:\n  few_shot:\n    - {role: user, content: hi}\n"
                        "    - {role: assistant, content: DONE}\n")
    assert patch == {"prompt.few_shot": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "DONE"}]}
    assert apply_variant(config(), patch, CONTRACT).prompt.few_shot[0].content == "hi"


def test_a_config_without_tool_fields_keeps_its_json_form() -> None:
    shots = config().identity()["prompt"]["few_shot"]
    assert shots == [{"role": "user", "content": "EXAMPLE"}, {"role": "assistant", "content": "DONE"}]


def test_usable_demos_fit_the_config() -> None:
    short = demo("a", "t/a", ("ls", ""))
    assert short.usable("text", ["bash", "submit"]) and short.usable("tool_calls", ["bash", "submit"])
    assert not demo("r", "t/r", ("/app/a", ""), tool="read_file").usable("text", ["bash", "read_file"])
    assert demo("r", "t/r", ("/app/a", ""), tool="read_file").usable("tool_calls", ["bash", "read_file"])
    assert not demo("long", "t/l", *[("ls", "")] * (MAX_STEPS + 1)).usable("text", ["bash"])
    assert not demo("none", "t/n").usable("text", ["bash"])
    assert not demo("raw", "t/x", ("echo '{% endraw %}'", "")).usable("text", ["bash"])
