"""Mixture-of-LoRA in the harness: route each user turn, let the chosen adapter act, have it summarise.

One `MolSession` per trial keeps an **append-only timeline** of events:

- `UserEvent`: a user message (a task's instruction is one user turn);
- `RouteEvent`: L0's route question after that message and the label it chose (with the margin);
- `ActEvent`: one agent turn of the answering adapter (rsi.harness.history.TurnEvent);
- `SummaryEvent`: the summary request after the user turn and the answering adapter's summary.

Each adapter's prompt is `render_mol_view(head, timeline, label)`, a pure function that renders every
event on its own, in order, with no look-ahead: user messages verbatim; L0 sees its own route questions
and answers; an adapter sees its own agent turns verbatim (rsi's own tool-call ids) and its own summary
exchange; it sees another adapter's user turn only as that adapter's summary (`[L2] ...`). Because
events are only appended and rendered independently, every call's prompt is the previous call's prompt
of the same adapter plus that call's reply plus what happened since: the beginning is byte-identical, so
the serving engine's prefix cache hits (BACKGROUND "own-view").

**Lazy summaries** (`summaries="lazy"`, issue 41: what a served conversation uses): a user turn ends with a
`SummarySlot`, not a summary. A slot is filled only when a view that shows it is rendered (another adapter's: the
owner sees its own turns verbatim and never its summary), or earlier, between user turns (`settle`, called when
the answer is out); never before the answer. Its prompt is the owner's view *as of the slot* plus the request,
so when it is computed changes nothing it says. A turn of actions alone (`finish_word` given) is filled at once
by `rsi.harness.mol_digest.action_digest` (commands, outcomes, files; no model call). A view is rendered only
with every slot it shows filled, and a filled slot never changes: each adapter's prompt still extends its
previous one byte for byte. `prewarm` puts L0's view into the prefix cache between user turns, so the next
route prefills only the new user message and the route question.

Every model call is recorded (`HopRecord`): user turn, adapter label, hop (route / answer / summary / warm),
serve name, prompt / cached / completion tokens, wall seconds, and the route's margin. A route answered
outside the label set, a refused or failed summary call: `MolInfraError` (infra: the trial is retried,
never graded as the model's failure).
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol

from rsi.core.contract import Contract
from rsi.core.errors import InfraError
from rsi.core.harness_config import HarnessConfig
from rsi.core.limits import effective_limits
from rsi.core.mol import ROUTER, MolSpec, route_question, summary_request, with_legend
from rsi.core.task import Task
from rsi.core.trial import Usage
from rsi.harness.history import TurnEvent, render_turn
from rsi.harness.mol_digest import action_digest
from rsi.harness.prompts import initial_messages, prompt_variables
from rsi.models.client import ChatResult, ChoiceResult, ModelRequestError

Hop = Literal["route", "answer", "summary", "warm"]
SummaryPolicy = Literal["inline", "lazy"]


class MolInfraError(InfraError):
    """A route or summary hop that failed after its retries: infra, never a model verdict."""


class MolModel(Protocol):
    """What a MoL session needs of the endpoint: chat and a constrained choice (`ChatClient` fits)."""

    def chat(self, model: str, messages: list[dict[str, Any]], **kw: Any) -> ChatResult: ...

    def choose(self, model: str, messages: list[dict[str, Any]], labels: list[str], *,
               constraint: str = "choice", deadline: float | None = None) -> ChoiceResult: ...


@dataclass(frozen=True)
class UserEvent:
    index: int
    content: str


@dataclass(frozen=True)
class RouteEvent:
    index: int
    question: str
    label: str
    margin: float | None = None


@dataclass(frozen=True)
class ActEvent:
    label: str
    turn: TurnEvent


@dataclass(frozen=True)
class SummaryEvent:
    index: int
    label: str
    request: str
    text: str


@dataclass(eq=False)
class SummarySlot:
    """A lazy summary of user turn `index` by `label`: `text` is filled once (by the model or the action
    digest) and never changed; `upto` is the timeline length before the slot (the owner's view it summarises)."""

    index: int
    label: str
    request: str
    upto: int
    text: str | None = None
    source: Literal["model", "digest"] | None = None


Event = UserEvent | RouteEvent | ActEvent | SummaryEvent | SummarySlot


def render_event(ev: Event, viewer: str) -> list[dict[str, Any]]:
    """The messages one event adds to `viewer`'s prompt (a function of the event and viewer alone)."""
    if isinstance(ev, UserEvent):
        return [{"role": "user", "content": ev.content}]
    if isinstance(ev, RouteEvent):
        if viewer != ROUTER:
            return []
        return [{"role": "user", "content": ev.question}, {"role": "assistant", "content": ev.label}]
    if isinstance(ev, ActEvent):
        return render_turn(ev.turn, server_ids=False) if ev.label == viewer else []
    if isinstance(ev, SummarySlot):
        if ev.label == viewer:
            return []  # the owner has its turn verbatim; its summary is for the others
        if ev.text is None:
            raise MolInfraError(f"mol: the summary of user turn {ev.index} by {ev.label} is not settled before "
                                f"{viewer}'s view (call settle)")
        return [{"role": "assistant", "content": f"[{ev.label}] {ev.text}"}]
    if ev.label == viewer:
        return [{"role": "user", "content": ev.request}, {"role": "assistant", "content": ev.text}]
    return [{"role": "assistant", "content": f"[{ev.label}] {ev.text}"}]


def render_mol_view(head: Sequence[dict[str, Any]], timeline: Sequence[Event], viewer: str,
                    legend: Mapping[str, Sequence[str]] | None = None) -> list[dict[str, Any]]:
    """`viewer`'s prompt: the head (system + few-shot), then every event as that adapter sees it. `legend`
    (the domains, under MolSpec.route_legend): L0's system message explains the labels."""
    msgs = with_legend(copy.deepcopy(list(head)), legend) if legend and viewer == ROUTER else copy.deepcopy(list(head))
    for ev in timeline:
        msgs += render_event(ev, viewer)
    return msgs


@dataclass
class HopRecord:
    user_turn: int
    label: str
    hop: Hop
    serve_name: str
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    wall_sec: float
    margin: float | None = None
    # of wall_sec, the seconds the call waited in the model server's queue (its X-Queue-Seconds header):
    # the hop's own cost is wall_sec - queue_sec
    queue_sec: float = 0.0


@dataclass
class MolSession:
    """One trial's timeline, routes, summaries and per-call records (also a History for the agent loop:
    `messages()` is the acting adapter's view, `append` adds its turn)."""

    spec: MolSpec
    serve_names: Mapping[str, str]  # label -> the generation's serve name for it
    head: Sequence[dict[str, Any]]
    timeline: list[Event] = field(default_factory=list)
    records: list[HopRecord] = field(default_factory=list)
    label: str = ROUTER  # the adapter acting now
    policy: str = "mol"
    # the acting adapter's view when its answer turns ended (before the summary hop): what trains it
    answer_messages: list[dict[str, Any]] | None = None
    # wall seconds of the user turn from the route hop through the last answer call and its tool runs
    turn_sec: float | None = None
    # "inline": the caller summarises each turn (`summarize`); "lazy": slots settled when a view needs them
    summaries: SummaryPolicy = "inline"
    # lazy only: an action-only turn gets the deterministic digest (None: every summary is the model's)
    finish_word: str | None = None
    # lazy only: user turn -> seconds its route waited for summaries no idle time had settled (on the path)
    summary_wait: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.head = tuple(copy.deepcopy(list(self.head)))
        self._lock = threading.RLock()  # one settle at a time: idle-time settling and a route's own
        missing = [lab for lab in self.spec.labels if lab not in self.serve_names]
        if missing:
            raise MolInfraError(f"mol: no adapter for label(s) {', '.join(missing)} in the generation")

    @property
    def labels(self) -> list[str]:
        return self.spec.labels

    @property
    def user_turn(self) -> int:
        return sum(1 for ev in self.timeline if isinstance(ev, UserEvent))

    # -- History -----------------------------------------------------------------------------------

    def messages(self) -> list[dict[str, Any]]:
        return self.view(self.label)

    def append(self, turn: TurnEvent) -> None:
        with self._lock:
            self.timeline.append(ActEvent(self.label, turn))

    def view(self, label: str, upto: int | None = None) -> list[dict[str, Any]]:
        """`label`'s prompt from the timeline (its first `upto` events when given)."""
        events = self.timeline if upto is None else self.timeline[:upto]
        return render_mol_view(self.head, events, label, self.spec.domains if self.spec.route_legend else None)

    # -- lazy summaries ------------------------------------------------------------------------------

    def end_turn(self) -> SummarySlot | None:
        """Close the acting adapter's user turn (lazy policy): append its summary slot, filled at once with
        the action digest when the turn was actions alone. Inline policy: nothing (call `summarize`)."""
        if self.summaries != "lazy":
            return None
        idx = self.user_turn
        turns: list[TurnEvent] = []
        for ev in reversed(self.timeline):
            if isinstance(ev, RouteEvent) and ev.index == idx:
                break
            if isinstance(ev, ActEvent) and ev.label == self.label:
                turns.insert(0, ev.turn)
        slot = SummarySlot(idx, self.label, summary_request(self.spec.summary_tokens), len(self.timeline))
        digest = action_digest(turns, self.finish_word) if self.finish_word else None
        if digest is not None:
            slot.text, slot.source = digest, "digest"
        with self._lock:
            self.timeline.append(slot)
        return slot

    def pending(self, viewer: str | None = None) -> list[SummarySlot]:
        """Unfilled slots `viewer`'s view shows (another adapter's), or every unfilled slot (None)."""
        return [ev for ev in self.timeline
                if isinstance(ev, SummarySlot) and ev.text is None and (viewer is None or ev.label != viewer)]

    def settle(self, client: MolModel, viewer: str | None = None, *, deadline: float | None = None) -> float:
        """Fill the slots `viewer` needs (None: all), each from its owner's view as of the slot; the
        seconds it took (0.0 when idle-time settling had done it). Failures are MolInfraError."""
        t0 = time.monotonic()
        with self._lock:
            for slot in self.pending(viewer):
                head = self.view(slot.label, slot.upto)
                slot.text = self._summary_call(client, head, slot.label, slot.request, slot.index, deadline)
                slot.source = "model"
        return time.monotonic() - t0

    def prewarm(self, client: MolModel, *, deadline: float | None = None) -> None:
        """Between user turns: prefill L0's view (every slot it shows settled) with a one-token request, so
        its KV is in the prefix cache and the next route computes only the new message and the question."""
        with self._lock:
            if self.pending(ROUTER):
                self.settle(client, ROUTER, deadline=deadline)
            msgs = self.view(ROUTER)
        t0 = time.monotonic()
        try:
            res = client.chat(self.serve_names[ROUTER], msgs, temperature=0.0, max_tokens=1, deadline=deadline)
        except (InfraError, ModelRequestError):
            return  # a warm-up is an optimisation: the route hop itself still works without it
        self._record(ROUTER, "warm", res.usage, time.monotonic() - t0, queue=getattr(res, "queue_sec", 0.0))

    # -- hops --------------------------------------------------------------------------------------

    def add_user(self, content: str) -> int:
        with self._lock:  # idle-time work (settle, prewarm) reads the timeline from another thread
            self.timeline.append(UserEvent(self.user_turn + 1, content))
            return self.user_turn

    def route(self, client: MolModel, *, deadline: float | None = None) -> ChoiceResult:
        """Ask L0 for the label of the last user message; the answer is checked and appended."""
        question = route_question(self.spec.domains, legend=self.spec.route_legend)
        if self.summaries == "lazy":  # what idle time did not settle is settled now, on the path
            self.summary_wait[self.user_turn] = self.settle(client, ROUTER, deadline=deadline)
        msgs = self.view(ROUTER) + [{"role": "user", "content": question}]
        last: Exception | None = None
        for _ in range(self.spec.hop_retries + 1):
            t0 = time.monotonic()
            try:
                got = client.choose(self.serve_names[ROUTER], msgs, self.labels, constraint=self.spec.constraint,
                                    deadline=deadline)
            except (InfraError, ModelRequestError) as e:
                last = e
                continue
            if got.label not in self.labels:  # a client that did not check: fail closed all the same
                last = MolInfraError(f"route answered {got.label!r}, not one of {', '.join(self.labels)}")
                continue
            self._record(ROUTER, "route", got.usage, time.monotonic() - t0, margin=got.margin,
                         queue=getattr(got, "queue_sec", 0.0))
            with self._lock:
                self.timeline.append(RouteEvent(self.user_turn, question, got.label, got.margin))
                self.label = got.label
            if self.summaries == "lazy" and self.pending(got.label):  # the chosen adapter's view must render
                self.summary_wait[self.user_turn] += self.settle(client, got.label, deadline=deadline)
            return got
        raise MolInfraError(f"mol: the route hop failed after {self.spec.hop_retries + 1} attempt(s): {last}")

    def set_route(self, label: str) -> None:
        """Route without asking L0 (oracle routing in benchmarks): the same event, no margin, no call."""
        if label not in self.labels:
            raise MolInfraError(f"route {label!r} is not one of {', '.join(self.labels)}")
        question = route_question(self.spec.domains, legend=self.spec.route_legend)
        self.timeline.append(RouteEvent(self.user_turn, question, label, None))
        self.label = label

    def summarize(self, client: MolModel, *, deadline: float | None = None) -> str:
        """The acting adapter's summary of its user turn (≤ summary_tokens), appended to the timeline."""
        request = summary_request(self.spec.summary_tokens)
        text = self._summary_call(client, self.view(self.label), self.label, request, self.user_turn, deadline)
        self.timeline.append(SummaryEvent(self.user_turn, self.label, request, text))
        return text

    def _summary_call(self, client: MolModel, view: list[dict[str, Any]], label: str, request: str, index: int,
                      deadline: float | None) -> str:
        msgs = view + [{"role": "user", "content": request}]
        last: Exception | None = None
        for _ in range(self.spec.hop_retries + 1):
            t0 = time.monotonic()
            try:
                res = client.chat(self.serve_names[label], msgs, temperature=0.0,
                                  max_tokens=self.spec.summary_tokens, deadline=deadline)
            except (InfraError, ModelRequestError) as e:
                last = e
                continue
            self._record(label, "summary", res.usage, time.monotonic() - t0, queue=getattr(res, "queue_sec", 0.0),
                         user_turn=index)
            return (res.content or "").strip()
        raise MolInfraError(f"mol: the summary hop of {label} failed after {self.spec.hop_retries + 1} "
                            f"attempt(s): {last}")

    def record_answer(self, res: ChatResult, wall_sec: float) -> None:
        self._record(self.label, "answer", res.usage, wall_sec, queue=getattr(res, "queue_sec", 0.0))

    def _record(self, label: str, hop: Hop, usage: Usage, wall: float, margin: float | None = None,
                queue: float = 0.0, user_turn: int | None = None) -> None:
        self.records.append(HopRecord(
            user_turn=self.user_turn if user_turn is None else user_turn, label=label, hop=hop,
            serve_name=self.serve_names[label],
            prompt_tokens=usage.prompt_tokens, cached_tokens=usage.cached_tokens,
            completion_tokens=usage.completion_tokens, wall_sec=round(wall, 4), margin=margin,
            queue_sec=round(min(max(float(queue or 0.0), 0.0), wall), 4)))

    # -- what the trial keeps ------------------------------------------------------------------------

    def usage(self, hops: Sequence[Hop] = ("route", "summary")) -> Usage:
        out = Usage()
        for r in self.records:
            if r.hop in hops:
                out = out.add(Usage(prompt_tokens=r.prompt_tokens, completion_tokens=r.completion_tokens,
                                    cached_tokens=r.cached_tokens, calls=1))
        return out

    def as_json(self) -> dict[str, Any]:
        routes = [{"user_turn": e.index, "label": e.label, "margin": e.margin}
                  for e in self.timeline if isinstance(e, RouteEvent)]
        summaries: list[dict[str, Any]] = [{"user_turn": e.index, "label": e.label, "text": e.text}
                                           for e in self.timeline if isinstance(e, SummaryEvent)]
        summaries += [{"user_turn": e.index, "label": e.label, "text": e.text, "source": e.source or "pending"}
                      for e in self.timeline if isinstance(e, SummarySlot)]
        wall = {h: round(sum(r.wall_sec for r in self.records if r.hop == h), 4)
                for h in ("route", "answer", "summary")}
        return {"domains": self.spec.domains, "serve_names": dict(self.serve_names),
                "summary_tokens": self.spec.summary_tokens, "constraint": self.spec.constraint,
                "routes": routes, "summaries": summaries, "calls": [asdict(r) for r in self.records],
                "wall_sec": wall, "turn_sec": self.turn_sec}


class RecordingModel:
    """Wraps the endpoint for the answer hops: every chat call is recorded on the session."""

    def __init__(self, inner: Any, session: MolSession) -> None:
        self.inner = inner
        self.session = session

    def chat(self, model: str, messages: list[dict[str, Any]], **kw: Any) -> ChatResult:
        t0 = time.monotonic()
        res: ChatResult = self.inner.chat(model, messages, **kw)
        self.session.record_answer(res, time.monotonic() - t0)
        return res


def mol_spec_for(domains: Mapping[str, Sequence[str]], config_mol: MolSpec | None) -> MolSpec:
    """The session's spec: the generation's domains (authoritative), the config's hop settings."""
    base = {k: list(v) for k, v in domains.items()}
    if config_mol is None:
        return MolSpec(domains=base)
    return config_mol.model_copy(update={"domains": MolSpec(domains=base).domains})


def route_prompt(config: HarnessConfig, contract: Contract, task: Task, domains: Mapping[str, Sequence[str]],
                 *, config_dir: Any = None, legend: bool | None = None) -> list[dict[str, Any]]:
    """L0's route prompt for a task's instruction, exactly as a trial's first route hop sends it (the
    head rendered for the task, the instruction, the route question): routing examples for training L0
    and the holdout instructions of the routing-accuracy gate are built with it. `legend`: the form of
    MolSpec.route_legend (None: the config's mol section says)."""
    lim = effective_limits(task.spec, contract, config)
    variables = prompt_variables(config, instruction=task.instruction, workdir=task.spec.environment.workdir,
                                 tools=contract.openai_tools(config.tools), max_turns=lim.max_turns, task=task.name)
    head = initial_messages(config, variables, config_dir=config_dir)
    legend = legend if legend is not None else bool(config.mol and config.mol.route_legend)
    if legend:
        head = with_legend(head, domains)
    return head + [{"role": "user", "content": route_question(domains, legend=legend)}]


__all__ = [
    "ActEvent",
    "Event",
    "HopRecord",
    "MolInfraError",
    "MolModel",
    "MolSession",
    "RecordingModel",
    "RouteEvent",
    "SummaryEvent",
    "SummaryPolicy",
    "SummarySlot",
    "UserEvent",
    "mol_spec_for",
    "render_event",
    "render_mol_view",
    "route_prompt",
]
