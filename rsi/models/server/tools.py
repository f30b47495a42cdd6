"""Text <-> tool calls for models without a native tool-call parser (pure; no torch).

Small chat models write tool calls as text. We accept the Hermes/Qwen spelling
`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` and, when the request offered tools, a bare
JSON object with `name` and `arguments` (optionally in a ```json fence), and turn them into OpenAI
`tool_calls`. The same spelling renders past assistant tool calls back into the prompt, so the model
sees its own history in the form it is asked to write.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from typing import Any

_TAG = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)

TOOLS_SYSTEM_TEMPLATE = (
    "You may call these tools. To call one, answer with exactly\n"
    '<tool_call>{{"name": "<tool name>", "arguments": {{...}}}}</tool_call>\n'
    "Tools (JSON):\n{tools}"
)


def _as_call(obj: Any) -> dict[str, Any] | None:
    """An OpenAI tool_call dict from a parsed `{"name", "arguments"}` object, else None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    raw = args if isinstance(args, str) else json.dumps(args)
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": obj["name"], "arguments": raw},
    }


def parse_tool_calls(text: str, *, tools_offered: bool) -> tuple[str | None, list[dict[str, Any]]]:
    """Split generated `text` into (content, OpenAI tool_calls). Content is None when nothing remains."""
    calls: list[dict[str, Any]] = []
    if "<tool_call>" in text:
        for m in _TAG.finditer(text):
            try:
                call = _as_call(json.loads(m.group(1)))
            except ValueError:
                call = None
            if call:
                calls.append(call)
        if calls:
            rest = _TAG.sub("", text).strip()
            return (rest or None), calls
    if tools_offered:
        body = text.strip()
        fence = _FENCE.match(body)
        if fence:
            body = fence.group(1)
        if body.startswith("{"):
            try:
                call = _as_call(json.loads(body))
            except ValueError:
                call = None
            if call:
                return None, [call]
    return text, []


def render_tool_calls(tool_calls: list[dict[str, Any]]) -> str:
    """Past assistant tool calls as the `<tool_call>` text the model is asked to write."""
    parts = []
    for tc in tool_calls:
        fn = tc.get("function") or {}
        args = fn.get("arguments", {})
        if isinstance(args, str):
            with contextlib.suppress(ValueError):
                args = json.loads(args)
        parts.append("<tool_call>" + json.dumps({"name": fn.get("name"), "arguments": args}) + "</tool_call>")
    return "\n".join(parts)


def tools_system_text(tools: list[dict[str, Any]]) -> str:
    """The tool list as system-prompt text, for chat templates that cannot render `tools`."""
    return TOOLS_SYSTEM_TEMPLATE.format(tools=json.dumps(tools, indent=None))
