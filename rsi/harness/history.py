"""History policies: what the model sees of the turns so far.

Both policies keep the prompt *prefix-stable*: the serialized prompt of call i+1 begins with the
serialized prompt of call i followed by the reply of call i, byte for byte. That is what lets a
serving engine's prefix cache (vLLM, SGLang) reuse the KV of every earlier turn. Observations are
truncated once, by the loop, before they enter the history; no older turn is ever rewritten,
re-truncated or dropped. (Dropping old turns to bound the context would change the beginning of
the prompt and miss the cache on every call, so neither policy does it.)

How they differ, honestly:

- `full` keeps the list of messages as exchanged: each assistant message with the tool-call ids
  the *server* assigned, each observation as produced. The list itself is the state.
- `own_view` keeps an append-only timeline of turn events and renders the prompt from it with a
  pure function (`render_own_view`), so any call's prompt can be rebuilt from the timeline (and
  from trajectory.json). Tool-call ids are rsi's own (`call_<turn>_<k>`), so two trials that make
  the same moves send byte-identical prompts — servers' random ids would make them differ and
  cost cross-trial prefix sharing. Turns written by another model (`author` != viewer, e.g. a
  timeline continued from another adapter) are shown as one-line summaries; the viewer's own
  turns are verbatim. In a single-model text-format trial both policies send the same bytes.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from rsi.core.digest import canonical_json

Format = Literal["text", "tool_calls"]


@dataclass(frozen=True)
class CallRecord:
    """One tool call as the model made it: the server's id, the name, the raw argument text."""

    server_id: str
    name: str
    raw_arguments: str
    arguments: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class TurnEvent:
    """One turn, appended once and never changed: the reply verbatim and its (truncated) observations.

    `observations` pairs with `calls` by position in tool_calls format; in text format it holds the
    single command's output. `note` is the observation of a reply with no usable action.
    """

    turn: int
    author: str
    format: Format
    content: str | None
    calls: tuple[CallRecord, ...] = ()
    observations: tuple[str, ...] = ()
    note: str | None = None


class History(Protocol):
    policy: str

    def messages(self) -> list[dict[str, Any]]:
        """The prompt of the next call (a fresh copy the caller may keep)."""
        ...

    def append(self, turn: TurnEvent) -> None: ...


def _own_id(turn: int, k: int) -> str:
    return f"call_{turn}_{k}"


def _arguments_text(call: CallRecord) -> str:
    return call.raw_arguments if call.raw_arguments else json.dumps(call.arguments, sort_keys=True)


def render_turn(turn: TurnEvent, *, server_ids: bool) -> list[dict[str, Any]]:
    """The messages of one turn: the assistant reply, then what the harness answered."""
    ids = [
        (c.server_id if server_ids and c.server_id else _own_id(turn.turn, k))
        for k, c in enumerate(turn.calls)
    ]
    assistant: dict[str, Any] = {"role": "assistant", "content": turn.content}
    if turn.format == "tool_calls" and turn.calls:
        assistant["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": c.name, "arguments": _arguments_text(c)}}
            for cid, c in zip(ids, turn.calls, strict=True)
        ]
    out = [assistant]
    if turn.format == "tool_calls" and turn.calls:
        out += [
            {"role": "tool", "tool_call_id": cid, "content": obs}
            for cid, obs in zip(ids, turn.observations, strict=False)
        ]
    else:
        out += [{"role": "user", "content": obs} for obs in turn.observations]
    if turn.note is not None:
        out.append({"role": "user", "content": turn.note})
    return out


def summarize_turn(turn: TurnEvent) -> list[dict[str, Any]]:
    """A foreign turn as the viewer sees it: one line of what was done, then the observations."""
    done = "; ".join(f"{c.name} {_arguments_text(c)}" for c in turn.calls) or "no action"
    out: list[dict[str, Any]] = [
        {"role": "assistant", "content": f"[turn {turn.turn} by {turn.author}] {done}"}
    ]
    obs = [o for o in turn.observations] + ([turn.note] if turn.note is not None else [])
    if obs:
        out.append({"role": "user", "content": "\n".join(obs)})
    return out


def render_own_view(
    head: Sequence[dict[str, Any]], timeline: Sequence[TurnEvent], viewer: str
) -> list[dict[str, Any]]:
    """The prompt `viewer` sees: a pure function of the head messages and the timeline."""
    msgs = copy.deepcopy(list(head))
    for turn in timeline:
        msgs += render_turn(turn, server_ids=False) if turn.author == viewer else summarize_turn(turn)
    return msgs


class FullHistory:
    """Every assistant message and observation, appended verbatim (server tool-call ids kept)."""

    policy = "full"

    def __init__(self, head: Sequence[dict[str, Any]]) -> None:
        self._messages = copy.deepcopy(list(head))

    def messages(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._messages)

    def append(self, turn: TurnEvent) -> None:
        self._messages += render_turn(turn, server_ids=True)


class OwnViewHistory:
    """The prompt rebuilt from an append-only timeline on every call (see module docstring)."""

    policy = "own_view"

    def __init__(
        self, head: Sequence[dict[str, Any]], viewer: str, timeline: Sequence[TurnEvent] = ()
    ) -> None:
        self._head = tuple(copy.deepcopy(list(head)))
        self.viewer = viewer
        self.timeline: list[TurnEvent] = list(timeline)

    def messages(self) -> list[dict[str, Any]]:
        return render_own_view(self._head, self.timeline, self.viewer)

    def append(self, turn: TurnEvent) -> None:
        self.timeline.append(turn)


def make_history(policy: str, head: Sequence[dict[str, Any]], *, viewer: str) -> History:
    if policy == "full":
        return FullHistory(head)
    if policy == "own_view":
        return OwnViewHistory(head, viewer)
    raise ValueError(f"unknown history policy {policy!r} (known: full, own_view)")


def serialize_messages(messages: Sequence[dict[str, Any]]) -> str:
    """Canonical serialization of a prompt: one canonical JSON object per line, so prefixes compose."""
    return "".join(canonical_json(m).decode() + "\n" for m in messages)


def chatml(messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
    """The ChatML text a SmolLM2/Qwen-style server builds from `messages` (content only)."""
    out = "".join(f"<|im_start|>{m['role']}\n{m.get('content') or ''}<|im_end|>\n" for m in messages)
    return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")


def common_prefix_len(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
