"""A deterministic summary of a MoL user turn made only of tool actions (issue 41).

A turn whose replies are nothing but actions (fenced commands in text format, tool calls with no prose in
tool_calls format), ending with the finish word or a submit, says nothing a summary model could add: what other
adapters need of it is what was run, how each command ended and which files it touched. `action_digest` writes
that from the turn's events alone (no model call, so no hop on anyone's path), byte-identical for equal turns;
a turn with prose, a format error or no action at all gets None, and its summary is the model's.

Files touched are read from the commands (redirections, tee, touch, mkdir, cp/mv targets, sed -i, rm, write_file),
not from the sandbox: the digest is a pure function of the timeline, so every render of it is the same bytes.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from rsi.harness.actions import split_fences
from rsi.harness.history import TurnEvent

MAX_COMMAND_CHARS = 120
MAX_FILES = 12
_EXIT = re.compile(r"\[(exit code (-?\d+)|timed out after [^\]]*)\]\s*$")
_REDIRECT = re.compile(r"(?<![0-9&<>])>>?\s*([^\s;&|<>()]+)")


def _outcome(observation: str) -> str:
    m = _EXIT.search(observation or "")
    if m is None:
        return "ran"
    return f"exit {m.group(2)}" if m.group(2) is not None else "timed out"


def _words(cmd: str) -> list[list[str]]:
    """The command's simple commands as word lists (split at ; && || |), best effort."""
    out: list[list[str]] = []
    for part in re.split(r"\s*(?:;|&&|\|\||\||\n)\s*", cmd):
        try:
            words = shlex.split(part, comments=True)
        except ValueError:
            words = part.split()
        if words:
            out.append(words)
    return out


def touched_files(cmd: str) -> list[str]:
    """Paths a shell command writes, as far as its text shows (in order, no duplicates)."""
    found = [m.group(1).strip("'\"") for m in _REDIRECT.finditer(cmd)]
    for w in _words(cmd):
        name, args = w[0], [a for a in w[1:] if not a.startswith("-") and not re.search(r"[<>]", a)]
        if name in ("touch", "mkdir", "rm") or (name == "tee" and args):
            found += args
        else:
            copies = name in ("cp", "mv", "install", "ln") and len(args) >= 2
            edits = name == "sed" and any(a.startswith("-i") for a in w[1:]) and bool(args)
            if copies or edits:
                found.append(args[-1])
    return list(dict.fromkeys(f for f in found if f and f != "/dev/null" and not f.startswith("&")))


def is_action_only(turns: Sequence[TurnEvent], finish_word: str) -> bool:
    """Whether every reply of the turn is actions alone (and the finish word), with no format error."""
    if not turns or not any(t.calls for t in turns):
        return False
    for t in turns:
        if t.note is not None:
            return False
        blocks, outside = split_fences(t.content or "")
        prose = [line.strip() for line in outside if line.strip()]
        if any(p.rstrip(".!") != finish_word for p in prose):
            return False
        if t.format == "text" and len(blocks) > 1:
            return False
    return True


def action_digest(turns: Sequence[TurnEvent], finish_word: str) -> str | None:
    """The deterministic summary of an action-only turn: its commands with their outcomes, the files they
    touched; None when the turn has prose (the model summarises it)."""
    if not is_action_only(turns, finish_word):
        return None
    steps: list[str] = []
    files: list[str] = []
    for t in turns:
        for call, obs in zip(t.calls, t.observations, strict=False):
            args = call.arguments
            if call.name == "bash":
                cmd = str(args.get("command", call.raw_arguments)).strip()
                files += touched_files(cmd)
                shown = " ".join(cmd.split())
                shown = shown if len(shown) <= MAX_COMMAND_CHARS else shown[: MAX_COMMAND_CHARS - 3] + "..."
                steps.append(f"`{shown}` ({_outcome(obs)})")
            else:
                path = str(args.get("path", ""))
                if call.name == "write_file" and path:
                    files.append(path)
                steps.append(f"{call.name} {path}".strip())
    files = list(dict.fromkeys(files))
    text = f"Ran {len(steps)} command(s): " + "; ".join(steps) + "."
    if files:
        more = f" (+{len(files) - MAX_FILES} more)" if len(files) > MAX_FILES else ""
        text += " Files touched: " + ", ".join(files[:MAX_FILES]) + more + "."
    return text


__all__ = ["action_digest", "is_action_only", "touched_files"]
