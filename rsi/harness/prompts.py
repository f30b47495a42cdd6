"""Prompt rendering: the config's jinja2 templates become the first messages of every call.

Templates are inline in the config YAML, or `file:NAME.j2` naming a file next to the config.
`StrictUndefined` turns a misspelt variable into an error at the first render instead of a
silently empty prompt. Variables: `instruction`, `workdir`, `tools` (list of {name, description,
parameters}), `tool_names`, `finish_word`, `max_turns`, `task`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from rsi.core.errors import ConfigError
from rsi.core.harness_config import HarnessConfig

FILE_PREFIX = "file:"

_ENV = jinja2.Environment(
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=False,
    autoescape=False,  # prompts are plain text, never HTML
)


def load_template_source(source: str, config_dir: Path | None) -> str:
    """Inline template text, or the content of `file:NAME` resolved against `config_dir`."""
    if not source.startswith(FILE_PREFIX):
        return source
    name = source[len(FILE_PREFIX) :].strip()
    base = config_dir or Path("harness_configs")
    path = (base / name).resolve()
    if not path.is_file():
        raise ConfigError(f"prompt template {source!r}: no file {path}")
    return path.read_text()


def render(source: str, variables: dict[str, Any], *, config_dir: Path | None = None, what: str) -> str:
    """Render one template; a template error names the prompt field it came from."""
    text = load_template_source(source, config_dir)
    try:
        return _ENV.from_string(text).render(**variables)
    except jinja2.TemplateError as e:
        raise ConfigError(f"prompt.{what}: {e}") from None


def prompt_variables(
    config: HarnessConfig,
    *,
    instruction: str,
    workdir: str,
    tools: list[dict[str, Any]],
    max_turns: int,
    task: str,
) -> dict[str, Any]:
    """The variables every template sees. `tools` is the OpenAI tools list, flattened for templates."""
    flat = [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description", ""),
            "parameters": t["function"].get("parameters", {}),
        }
        for t in tools
    ]
    return {
        "instruction": instruction,
        "workdir": workdir,
        "tools": flat,
        "tool_names": [t["name"] for t in flat],
        "finish_word": config.loop.finish_word,
        "max_turns": max_turns,
        "task": task,
    }


def initial_messages(
    config: HarnessConfig, variables: dict[str, Any], *, config_dir: Path | None = None
) -> list[dict[str, Any]]:
    """System prompt, few-shot messages (with their tool calls in tool_calls format), then the
    instruction: the fixed head of every prompt."""
    msgs: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": render(config.prompt.system, variables, config_dir=config_dir, what="system"),
        }
    ]
    for i, shot in enumerate(config.prompt.few_shot):
        content = render(shot.content, variables, config_dir=config_dir, what=f"few_shot[{i}].content")
        msg: dict[str, Any] = {"role": shot.role, "content": content}
        if shot.tool_calls is not None:  # a tool_calls-format example: the calls as the API carries them
            msg["tool_calls"] = [c.model_dump(mode="json") for c in shot.tool_calls]
        if shot.tool_call_id is not None:
            msg["tool_call_id"] = shot.tool_call_id
        msgs.append(msg)
    instruction = render(config.prompt.instruction, variables, config_dir=config_dir, what="instruction")
    msgs.append({"role": "user", "content": instruction})
    return msgs
