"""Verified demonstrations from a task's reference solution (DESIGN §12): pure rules, no I/O.

An admitted task carries `solution/solve.sh`, which passed its verifier. Two training-data sources use it:

- **oracle replay**: the reference replayed through the harness as the agent's turns, one command per action
  (`reference_actions`), with a look at the inputs first and a check of the output last, as a careful agent works
  (`replay_plan`). A reference that cannot be split into commands (a heredoc, a loop, a line continuation) becomes
  one action holding the whole script.
- **hinted rollout** (STaR's rationalisation): the model acts with a hint it will not have in production
  (`hint_text`: 1 names the commands the reference uses, 2 gives its first command, 3 the whole reference). The
  rollout is stored with the hint removed; one whose text refers to the hint (`refers_to_hint`) is dropped, since
  the model would be learning to answer a message it never sees.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

HINT_LEVELS = (1, 2, 3)
SHELL_OPTIONS = re.compile(r"^set\s+[-+][a-zA-Z]+(\s+[-+]?[a-zA-Z]+)*\s*$")
COMPOUND = re.compile(r"^(if|for|while|until|case|function|select)\b|^\{|^\(|\b(then|do|else)\s*$|^\w+\s*\(\)\s*\{?")
# builtins and glue that say nothing about which tool does the work
NOT_TOOLS = {"cd", "set", "then", "do", "done", "fi", "else", "true", "false", "exit", "export", "local"}
HINT_WORDS = re.compile(r"\b(hint(s|ed)?|as suggested|the suggestion|suggested command|you (were|are) told)\b",
                        re.IGNORECASE)


def script_body(solve_sh: str) -> list[str]:
    """The script's lines without the shebang, comments, blank lines and shell-option lines (`set -e`)."""
    out: list[str] = []
    for raw in solve_sh.splitlines():
        line = raw.rstrip()
        s = line.strip()
        if not s or s.startswith("#") or SHELL_OPTIONS.match(s):
            continue
        out.append(line)
    return out


def _splittable(lines: list[str]) -> bool:
    for line in lines:
        s = line.strip()
        if "<<" in s or s.endswith("\\") or s.endswith("|") or s.endswith("&&") or COMPOUND.search(s):
            return False
        try:
            shlex.split(s, comments=True)
        except ValueError:  # an open quote: the command goes on over the next line
            return False
    return True


def _whole(solve_sh: str, workdir: str) -> str:
    """The script as one action, byte for byte (a heredoc's blank and `#` lines are content), less its preamble:
    the shebang, and leading comment, blank, shell-option and `cd <workdir>` lines."""
    raw = solve_sh.splitlines()
    i = 0
    while i < len(raw):
        s = raw[i].strip()
        if not s or s.startswith("#") or SHELL_OPTIONS.match(s) or s in (f"cd {workdir}", f"cd {workdir}/"):
            i += 1
            continue
        break
    return "\n".join(raw[i:]).rstrip()


def reference_actions(solve_sh: str, workdir: str = "/app") -> list[str]:
    """The reference as a list of shell actions: one per command line where the script is a plain sequence of
    one-line commands, else the whole body as one action. `cd <workdir>` is dropped (every action starts there);
    another `cd DIR` is carried as a prefix of the commands after it (each action runs in a fresh shell)."""
    lines = script_body(solve_sh)
    if not lines:
        return []
    if not _splittable(lines):
        return [_whole(solve_sh, workdir)]
    actions: list[str] = []
    prefix = ""
    for line in lines:
        s = line.strip()
        m = re.fullmatch(r"cd\s+(\S+)", s)
        if m:
            target = m.group(1).rstrip("/") or "/"
            prefix = "" if target == workdir.rstrip("/") else f"cd {target} && "
            continue
        actions.append(prefix + s)
    return actions


def reference_tools(actions: list[str]) -> list[str]:
    """The programs the reference runs, in first-use order (for the level-1 hint)."""
    seen: list[str] = []
    for a in actions:
        for part in re.split(r"\|\||&&|[|;\n]|\$\(", a):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                words = part.split()
            words = [w for w in words if not re.fullmatch(r"\w+=.*", w)]  # VAR=value prefixes
            if not words:
                continue
            prog = words[0].rsplit("/", 1)[-1]
            if re.fullmatch(r"[A-Za-z_][\w.+-]*", prog) and prog not in NOT_TOOLS and prog not in seen:
                seen.append(prog)
    return seen


def hint_text(level: int, actions: list[str]) -> str:
    """The hint message of one level, written from the reference's actions."""
    if level not in HINT_LEVELS:
        raise ValueError(f"hint level {level} is not one of {HINT_LEVELS}")
    if not actions:
        raise ValueError("the reference has no command to hint at")
    if level == 1:
        tools = reference_tools(actions) or ["bash"]
        return "Hint: this can be done with " + ", ".join(f"`{t}`" for t in tools) + "."
    if level == 2:
        return f"Hint: a good first command is\n```bash\n{actions[0]}\n```"
    return "Hint: these commands solve it:\n```bash\n" + "\n".join(actions) + "\n```"


def refers_to_hint(text: str) -> bool:
    """Whether a reply mentions the hint (then the rollout is dropped: it answers a message production lacks)."""
    return bool(HINT_WORDS.search(text or ""))


@dataclass(frozen=True)
class ReplayPlan:
    """The actions of one oracle replay: an optional look, the reference's commands, an optional check."""

    look: str | None
    commands: list[str]
    check: str | None

    @property
    def actions(self) -> list[str]:
        return [a for a in (self.look, *self.commands, self.check) if a]


def look_command(inputs: list[str]) -> str:
    """A careful agent's first look: the input files the instruction names (the first lines), else the workdir."""
    if not inputs:
        return "ls -la"
    if len(inputs) == 1:
        return f"head -n 20 {shlex.quote(inputs[0])}"
    return "head -n 20 " + " ".join(shlex.quote(p) for p in inputs[:3])


def check_command(outputs: list[str]) -> str | None:
    """A careful agent's last check: the output files the verifier reads."""
    if not outputs:
        return None
    return "cat " + " ".join(shlex.quote(p) for p in outputs[:3])


# How a replay frames the reference's commands (the `oracle-replay` arm's variant):
# - plain: the commands, then the finish word (the recipe the issue checked before filing: 8/60 -> 29/60);
# - look: a look at the inputs first;
# - careful: a look first and a check of the output last. Measured on the demo (6 December): a candidate trained on
#   careful replays learned the look and the check and not the command between them (40 of its 48 holdout trials
#   ran only head/cat and said the finish word): the check's observation (a file's text) followed by the finish
#   word teaches a 135M model to stop after any file's text. So the loop replays `plain` unless asked.
REPLAY_STYLES = ("plain", "look", "careful")


def replay_plan(actions: list[str], *, inputs: list[str], outputs: list[str], max_actions: int,
                style: str = "careful") -> ReplayPlan:
    """Fit look + commands + check (as `style` asks) into `max_actions` turns (the finish word needs one more): the
    check goes first, then the look; commands beyond the limit are joined into the last action so the reference
    still runs whole."""
    if max_actions < 1:
        raise ValueError("a replay needs at least one action turn")
    if style not in REPLAY_STYLES:
        raise ValueError(f"replay style {style!r} is not one of {', '.join(REPLAY_STYLES)}")
    look: str | None = look_command(inputs) if style in ("look", "careful") else None
    check = check_command(outputs) if style == "careful" else None
    cmds = list(actions)

    def turns() -> int:
        return len(cmds) + (look is not None) + (check is not None)

    if turns() > max_actions:
        check = None
    if turns() > max_actions:
        look = None
    if len(cmds) > max_actions:
        keep = max_actions - 1
        cmds = cmds[:keep] + ["\n".join(cmds[keep:])]
    return ReplayPlan(look=look, commands=cmds, check=check)


PATH_IN_TEXT = re.compile(r"`(/[^`\s]+)`|(?<![\w`/])(/(?:app|data|srv|tmp|var|home|root|etc)/[\w./-]*\w)")


def named_paths(instruction: str) -> list[str]:
    """Absolute paths an instruction names (in backticks or bare), in order, without repeats."""
    out: list[str] = []
    for m in PATH_IN_TEXT.finditer(instruction):
        p = m.group(1) or m.group(2)
        if p and p not in out:
            out.append(p)
    return out


__all__ = ["HINT_LEVELS", "REPLAY_STYLES", "ReplayPlan", "check_command", "hint_text", "look_command", "named_paths",
           "reference_actions", "reference_tools", "refers_to_hint", "replay_plan", "script_body"]
