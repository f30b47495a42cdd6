"""Action formats: turning one model reply into tool invocations, and running them in a sandbox.

Two formats (DESIGN §4.3):

- `text`: the model writes one fenced ```bash block per turn; the configured finish word on a line
  of its own (outside any fence) ends the episode; a reply with both runs the command, then ends.
- `tool_calls`: the model uses OpenAI tool calling with the contract's substrate tools
  (`bash`, `read_file`, `write_file`, `submit`).

A reply without a usable action is never a crash: the parser returns an error the loop shows the
model as the observation of that turn, so a small model can recover on the next turn.
"""

from __future__ import annotations

import functools
import json
import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import jsonschema
import jsonschema.protocols
import jsonschema.validators

from rsi.core.errors import ConfigError
from rsi.sandbox.base import Sandbox


class ToolCallLike(Protocol):
    """What the parser needs of a model tool call (`rsi.models.client.ToolCall` fits)."""

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str


@dataclass
class Invocation:
    """One tool call the harness will run. `error` set means it is not run; the error is its observation."""

    call_id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str = ""
    error: str | None = None


@dataclass
class ParsedReply:
    """The actions found in one reply.

    `finish` is set by the finish word (text) or a `submit` call (tool_calls). `error` is set when the
    reply holds no usable action at all; it becomes the turn's observation.
    """

    invocations: list[Invocation] = field(default_factory=list)
    finish: bool = False
    error: str | None = None


@dataclass
class ToolOutcome:
    content: str
    is_error: bool = False
    submitted: bool = False
    timed_out: bool = False
    exit_code: int | None = None


SHELL_LANGS = frozenset({"", "bash", "sh", "shell", "console"})
_OPEN = re.compile(r"^[ \t]*```[ \t]*([\w+.-]*)[ \t]*$")


@dataclass
class FencedBlock:
    lang: str
    body: str
    closed: bool


def split_fences(text: str) -> tuple[list[FencedBlock], list[str]]:
    """The fenced blocks of a reply, and the lines outside any block.

    A block opens with a line of three backticks and an optional language, and closes with a line of
    three backticks (or a body line ending in them, as small models write). A reply cut by
    max_tokens may lack the closing fence: the block then runs to the end.
    """
    blocks: list[FencedBlock] = []
    outside: list[str] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if m is None:
            outside.append(lines[i])
            i += 1
            continue
        body: list[str] = []
        closed = False
        i += 1
        while i < len(lines):
            line = lines[i].rstrip()
            i += 1
            if line.endswith("```"):
                if line[:-3].strip():
                    body.append(line[:-3])
                closed = True
                break
            body.append(lines[i - 1])
        blocks.append(FencedBlock(m.group(1).lower(), "\n".join(body), closed))
    return blocks, outside


def text_format_help(finish_word: str) -> str:
    """The observation shown after a text-format reply without an action."""
    return (
        "No command found in your reply. Reply with exactly one command in a fenced block:\n"
        "```bash\n<command>\n```\n"
        f"or reply {finish_word} alone on a line when the task is finished."
    )


def tool_calls_help(tool_names: list[str]) -> str:
    """The observation shown after a tool_calls-format reply without a tool call."""
    names = ", ".join(tool_names)
    finish = " Call submit when the task is finished." if "submit" in tool_names else ""
    return f"No tool call found in your reply. Call one of the tools: {names}.{finish}"


def parse_text_reply(content: str | None, finish_word: str, *, turn: int) -> ParsedReply:
    """Parse a text-format reply: the first fenced shell block is the command; the finish word ends.

    Blocks in another language (```python) are not run: the error says so, so the model can retry.
    """
    blocks, outside = split_fences(content or "")
    finish = bool(finish_word) and any(line.strip().rstrip(".!").strip() == finish_word for line in outside)
    shell = [b for b in blocks if b.lang in SHELL_LANGS and b.body.strip()]
    if shell:
        # One command per turn: the first shell block is the one that runs.
        inv = Invocation(call_id=f"call_{turn}_0", name="bash", arguments={"command": shell[0].body.strip()})
        return ParsedReply(invocations=[inv], finish=finish)
    if finish:
        return ParsedReply(finish=True)
    other = sorted({b.lang for b in blocks if b.lang not in SHELL_LANGS})
    hint = f"Your reply had a ```{other[0]} block; only ```bash blocks are run.\n" if other else ""
    return ParsedReply(error=hint + text_format_help(finish_word))


_ARTICLE = {"integer": "an integer", "object": "an object", "array": "an array"}


@functools.lru_cache(maxsize=64)
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    """A checked validator for one tool schema (cached: the same few schemas every turn)."""
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as e:
        raise ConfigError(f"the contract's parameter schema is not valid JSON Schema: {e.message}") from None
    return cls(schema)


def _describe(name: str, err: jsonschema.ValidationError) -> str:
    """One jsonschema error as a short sentence a small model can act on."""
    path = ".".join(str(p) for p in err.absolute_path)
    arg = f"argument '{path}' of {name}" if path else f"arguments of {name}"
    if err.validator == "type":
        types = err.validator_value if isinstance(err.validator_value, list) else [err.validator_value]
        return f"{arg} must be " + " or ".join(_ARTICLE.get(str(t), f"a {t}") for t in types)
    if err.validator == "enum":
        return f"{arg} must be one of: " + ", ".join(json.dumps(v) for v in err.validator_value)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = set((err.schema.get("properties") or {}) if isinstance(err.schema, dict) else {})
        extra = sorted(k for k in err.instance if k not in allowed)
        takes = f"; it takes: {', '.join(sorted(allowed))}" if allowed else ""
        where = f"argument '{path}' of {name}" if path else name
        return f"{where} does not take argument(s): {', '.join(extra)}{takes}"
    return f"{arg}: {err.message}"[:300]


def _schema_error(name: str, args: Any, schema: dict[str, Any]) -> str | None:
    """A short message if `args` does not fit the tool's JSON Schema (from the contract), else None.

    Validated with `jsonschema`, so every keyword counts (types, enums, additionalProperties,
    bounds). Missing required arguments are reported first and together, since that is the
    commonest mistake; otherwise the first error by argument path.
    """
    if not isinstance(args, dict):
        return f"arguments of {name} must be a JSON object"
    errors = list(_validator(json.dumps(schema, sort_keys=True)).iter_errors(args))
    if not errors:
        return None
    missing = [
        str(m)
        for e in errors
        if e.validator == "required" and not e.absolute_path
        for m in e.validator_value
        if m not in args
    ]
    if missing:
        return f"{name} needs argument(s): {', '.join(missing)}"
    first = min(errors, key=lambda e: ([str(p) for p in e.absolute_path], str(e.validator)))
    return _describe(name, first)


def parse_tool_calls(
    content: str | None,
    tool_calls: Sequence[ToolCallLike],
    tools: dict[str, dict[str, Any]],
) -> ParsedReply:
    """Check each tool call against the allowed tools (name -> JSON schema of its parameters).

    A bad call (unknown tool, arguments that are not JSON or do not fit the schema) is kept with an
    `error`, so it still gets its own tool message in the history, as OpenAI's protocol requires.
    """
    if not tool_calls:
        return ParsedReply(error=tool_calls_help(sorted(tools)))
    out: list[Invocation] = []
    finish = False
    for call in tool_calls:
        inv = Invocation(call.id, call.name, dict(call.arguments or {}), call.raw_arguments or "")
        if call.name not in tools:
            inv.error = f"unknown tool '{call.name}'; available: {', '.join(sorted(tools))}"
        elif not call.arguments and call.raw_arguments.strip() not in ("", "{}"):
            inv.error = f"arguments of {call.name} are not a JSON object: {call.raw_arguments[:200]}"
        else:
            inv.error = _schema_error(call.name, call.arguments or {}, tools[call.name])
        if call.name == "submit" and inv.error is None:
            finish = True
        out.append(inv)
    return ParsedReply(invocations=out, finish=finish)


def truncate_middle(text: str, max_chars: int) -> str:
    """Keep the head and the tail of `text` within `max_chars`, marking the cut in the middle.

    Command output usually says what happened at the start and how it ended at the end (the error,
    the summary line), so the middle is what goes. The result is never longer than `max_chars`.
    """
    if len(text) <= max_chars:
        return text
    # Size the marker for the largest number it could show, so the bound holds whatever is cut.
    widest = len(f"\n[... {len(text)} characters cut ...]\n")
    room = max_chars - widest
    if room <= 0:
        return text[:max_chars]
    head, tail = room - room // 2, room // 2
    cut = len(text) - head - tail
    return text[:head] + f"\n[... {cut} characters cut ...]\n" + (text[len(text) - tail :] if tail else "")


def resolve_path(path: str, workdir: str) -> str:
    """Absolute paths stay; relative ones resolve against the sandbox's working directory."""
    return posixpath.normpath(path if path.startswith("/") else posixpath.join(workdir, path))


def format_exec(stdout: str, stderr: str, exit_code: int, timed_out: bool, timeout: float) -> str:
    """The observation of a bash command: its output, then one status line."""
    parts = [p for p in (stdout, stderr) if p]
    body = "".join(p if p.endswith("\n") else p + "\n" for p in parts) if parts else "(no output)\n"
    status = f"[timed out after {timeout:g}s]" if timed_out else f"[exit code {exit_code}]"
    return body + status


def run_invocation(sandbox: Sandbox, inv: Invocation, *, workdir: str, command_timeout: float) -> ToolOutcome:
    """Run one checked invocation in the sandbox. `SandboxError` propagates (infra, retried by the runner)."""
    if inv.error is not None:
        return ToolOutcome(content=f"error: {inv.error}", is_error=True)
    args = inv.arguments
    if inv.name == "bash":
        res = sandbox.exec(str(args["command"]), timeout=command_timeout, workdir=workdir)
        content = format_exec(res.stdout, res.stderr, res.exit_code, res.timed_out, command_timeout)
        return ToolOutcome(content=content, timed_out=res.timed_out, exit_code=res.exit_code)
    if inv.name == "read_file":
        path = resolve_path(str(args["path"]), workdir)
        data = sandbox.get_file(path)
        if data is None:
            return ToolOutcome(content=f"error: no such file: {path}", is_error=True)
        return ToolOutcome(content=data.decode("utf-8", errors="replace"))
    if inv.name == "write_file":
        path = resolve_path(str(args["path"]), workdir)
        data = str(args["content"]).encode()
        sandbox.put_file(path, data)
        return ToolOutcome(content=f"wrote {len(data)} bytes to {path}")
    if inv.name == "submit":
        return ToolOutcome(content="submitted", submitted=True)
    return ToolOutcome(
        content=f"error: tool '{inv.name}' has no implementation in this harness", is_error=True
    )
