"""Trajectories as the viewer shows them: every ATIF step in full, and two trajectories aligned step by step.

A trajectory is read as plain JSON (not validated), so a file a newer Harbor or an older rsi wrote still
shows. The step-aligned diff aligns two trajectories on their *action sequence*: an agent step's action is
its tool calls (function and command), a system or user step's its text; difflib's matcher pairs equal
actions, and what lies between two pairs is shown side by side as changed, or on one side only.
"""

from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACTION_CHARS = 200
FENCE = re.compile(r"```([\w-]*)\n(.*?)(?:```|$)", re.S)


@dataclass
class ViewStep:
    index: int
    source: str
    message: str
    reasoning: str | None
    calls: list[dict[str, str]]  # {id, function, arguments}
    results: list[dict[str, str]]  # {call, content}
    tokens: dict[str, int | None]
    timestamp: str | None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def action(self) -> str:
        """What the step did, as the alignment compares it: its tool calls, else (the `text` action format) the
        first fenced block of its message, else its text."""
        if self.calls:
            return " | ".join(f"{c['function']}: {c['arguments']}" for c in self.calls)[:ACTION_CHARS]
        fenced = FENCE.search(self.message) if self.source == "agent" else None
        if fenced:
            return f"{fenced.group(1) or 'block'}: {fenced.group(2).strip()}"[:ACTION_CHARS]
        return f"{self.source}: {self.message.strip()}"[:ACTION_CHARS]


def _args(a: Any) -> str:
    if isinstance(a, dict) and set(a) == {"command"}:
        return str(a["command"])
    return json.dumps(a, ensure_ascii=False)


def read_trajectory(path: Path) -> tuple[dict[str, Any], list[ViewStep], str | None]:
    """(header fields, steps, problem): the file as far as it reads; `problem` says why it does not."""
    try:
        raw = json.loads(path.read_text(errors="replace"))
    except FileNotFoundError:
        return {}, [], f"no trajectory at {path}"
    except (OSError, ValueError) as e:
        return {}, [], f"{path} does not read as JSON: {e}"
    if not isinstance(raw, dict):
        return {}, [], f"{path} is not an ATIF object"
    steps: list[ViewStep] = []
    for i, s in enumerate(raw.get("steps") or [], start=1):
        if not isinstance(s, dict):
            continue
        calls = [{"id": str(c.get("tool_call_id") or ""), "function": str(c.get("function_name") or ""),
                  "arguments": _args(c.get("arguments") or {})}
                 for c in s.get("tool_calls") or [] if isinstance(c, dict)]
        obs = s.get("observation") or {}
        results = [{"call": str(r.get("source_call_id") or ""), "content": str(r.get("content") or "")}
                   for r in (obs.get("results") or [] if isinstance(obs, dict) else []) if isinstance(r, dict)]
        m = s.get("metrics") or {}
        steps.append(ViewStep(
            index=int(s.get("step_id") or i), source=str(s.get("source") or "?"), message=str(s.get("message") or ""),
            reasoning=s.get("reasoning_content"), calls=calls, results=results,
            tokens={k: m.get(k) for k in ("prompt_tokens", "completion_tokens", "cached_tokens")}
            if isinstance(m, dict) else {},
            timestamp=s.get("timestamp"), extra=dict(s.get("extra") or {})))
    agent = raw.get("agent") or {}
    extra = (raw.get("extra") or {}).get("rsi") or {}
    fm = raw.get("final_metrics") or {}
    header = {"schema": raw.get("schema_version"), "agent": f"{agent.get('name', '')} {agent.get('version', '')}",
              "model": agent.get("model_name") or extra.get("model_name"), "stop": extra.get("stop_reason"),
              "format": extra.get("action_format"), "history": extra.get("history"),
              "config": extra.get("harness_config_digest"), "final_metrics": fm}
    return header, steps, None


@dataclass
class AlignedRow:
    kind: str  # same | changed | only_a | only_b
    a: ViewStep | None
    b: ViewStep | None


def align(a: list[ViewStep], b: list[ViewStep]) -> list[AlignedRow]:
    """Rows pairing the steps of `a` and `b` on their action sequence (every step of both appears once, in order)."""
    sm = difflib.SequenceMatcher(a=[s.action for s in a], b=[s.action for s in b], autojunk=False)
    rows: list[AlignedRow] = []
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            rows += [AlignedRow("same", a[i1 + k], b[j1 + k]) for k in range(i2 - i1)]
        elif op == "delete":
            rows += [AlignedRow("only_a", s, None) for s in a[i1:i2]]
        elif op == "insert":
            rows += [AlignedRow("only_b", None, s) for s in b[j1:j2]]
        else:  # replace: side by side as far as both go, the rest on its own side
            n = min(i2 - i1, j2 - j1)
            rows += [AlignedRow("changed", a[i1 + k], b[j1 + k]) for k in range(n)]
            rows += [AlignedRow("only_a", s, None) for s in a[i1 + n:i2]]
            rows += [AlignedRow("only_b", None, s) for s in b[j1 + n:j2]]
    return rows


def verifier_output(trial_dir: Path) -> dict[str, str]:
    """The verifier's files (stdout, stderr, reward), whole."""
    out: dict[str, str] = {}
    vdir = trial_dir / "verifier"
    if vdir.is_dir():
        for p in sorted(vdir.iterdir()):
            if p.is_file() and p.stat().st_size <= 2_000_000:
                out[p.name] = p.read_text(errors="replace")
    return out


__all__ = ["AlignedRow", "ViewStep", "align", "read_trajectory", "verifier_output"]
