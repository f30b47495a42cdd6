"""Mixture-of-LoRA (BACKGROUND "Two goals", "Serving ideas"; DESIGN §6): the pure part.

A generation may hold several LoRA adapters on one frozen base. `L0` is the chat adapter and the
router; every other label is a specialist serving a set of task families (its *domains*). Exactly one
adapter answers each user turn; `L0` picks it with a constrained choice of one label.

`MolSpec` is the `mol` section of a harness config: the grouping of families into adapters
(`domains`), how many tokens a summary may take (`summary_tokens`), which constraint spelling the
endpoint speaks (`constraint`: vLLM's `structured_outputs.choice`, or SGLang's `regex`), and how often
a route or summary hop is retried before the trial is recorded as infra. Validation here is what every
caller relies on: labels unique and of the form `L<k>`, `L0` present, no family served twice, and
(`check_families`) every family of the task pool served once.

The prompts of the route and summary hops are fixed text built from the labels and domains alone, so
two trials with equal timelines send byte-identical prompts (the engine's prefix cache keys on bytes).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from pydantic import (
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from rsi.core.model import RsiModel

ROUTER = "L0"
ROUTER_ROLE = "chat+router"
SPECIALIST_ROLE = "specialist"
LABEL_RE = re.compile(r"^L(0|[1-9][0-9]?)$")
DEFAULT_SUMMARY_TOKENS = 192
Constraint = Literal["choice", "regex"]


class MolSpec(RsiModel):
    """The `mol` section: label -> families it serves. `L0` (chat + router) may serve families too."""

    model_config = ConfigDict(extra="forbid")

    domains: dict[str, list[str]]
    summary_tokens: int = Field(default=DEFAULT_SUMMARY_TOKENS, gt=0, le=1024)
    constraint: Constraint = "choice"
    hop_retries: int = Field(default=2, ge=0, le=5)
    # issue 41: the labels' legend once, in L0's system message (prefilled with the head, cached across turns
    # and conversations), and a short route question after each user message: a route prefills ~40 fewer
    # tokens. L0 must be trained on the same form (route_prompt follows it). Left out of the JSON form when
    # false, so a config without it keeps its digest.
    route_legend: bool = False

    @model_serializer(mode="wrap")
    def _drop_default_legend(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        data: dict[str, object] = handler(self)
        if data.get("route_legend") is False:
            data.pop("route_legend")
        return data

    @field_validator("domains")
    @classmethod
    def _valid_domains(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        problems = domain_problems(v)
        if problems:
            raise ValueError("; ".join(problems))
        # L0 first, then by number: the order labels are offered to the router in
        return {k: list(v[k]) for k in sorted(v, key=label_index)}

    @model_validator(mode="after")
    def _two_adapters(self) -> MolSpec:
        if len(self.domains) < 2:
            raise ValueError("domains: a mixture needs L0 and at least one specialist")
        return self

    @property
    def labels(self) -> list[str]:
        return list(self.domains)

    def label_of(self, family: str) -> str:
        """The adapter serving `family`; a family nobody lists goes to the chat adapter L0."""
        for label, fams in self.domains.items():
            if family in fams:
                return label
        return ROUTER

    def check_families(self, families: Iterable[str]) -> list[str]:
        """Problems with serving exactly these families (each served once; none unknown)."""
        fams = set(families)
        served = {f for fs in self.domains.values() for f in fs}
        out = [f"mol.domains: family '{f}' is served by no adapter" for f in sorted(fams - served)]
        out += [f"mol.domains: family '{f}' is not a family of the task pool" for f in sorted(served - fams)]
        return out


def label_index(label: str) -> int:
    m = LABEL_RE.match(label)
    return int(m.group(1)) if m else 10_000


def domain_problems(domains: Mapping[str, Sequence[str]]) -> list[str]:
    """Every problem with a label -> families map: label syntax, L0 present, a family served twice."""
    out: list[str] = []
    for label in domains:
        if not LABEL_RE.match(label):
            out.append(f"domains: label '{label}' is not of the form L<k> (L0..L99)")
    if ROUTER not in domains:
        out.append("domains: L0 (the chat adapter, which routes) is missing")
    seen: dict[str, str] = {}
    for label in sorted(domains, key=label_index):
        fams = domains[label]
        if len(set(fams)) != len(fams):
            out.append(f"domains.{label}: a family is listed twice")
        for f in fams:
            if not f or not f.strip():
                out.append(f"domains.{label}: an empty family name")
            elif f in seen and seen[f] != label:
                out.append(f"domains: family '{f}' is served by both {seen[f]} and {label} (each family once)")
            seen.setdefault(f, label)
    return out


SHORT_ROUTE_QUESTION = "Route the last user message: one label."


def _legend_lines(domains: Mapping[str, Sequence[str]]) -> list[str]:
    return [f"{label}: {'chat; ' if label == ROUTER else ''}{', '.join(fams) if fams else 'conversation'}"
            for label, fams in domains.items()]


def route_question(domains: Mapping[str, Sequence[str]], *, legend: bool = False) -> str:
    """The router's question after each user message: fixed text from the labels and domains alone. With
    `legend` (MolSpec.route_legend) the labels are explained once in L0's system message (`route_legend`), and
    the question is short."""
    if legend:
        return SHORT_ROUTE_QUESTION
    return "\n".join(["Which adapter should answer the last user message? Reply with exactly one label.",
                      *_legend_lines(domains)])


def route_legend(domains: Mapping[str, Sequence[str]]) -> str:
    """What L0's system message gains under `route_legend`: the labels and what each serves."""
    return "\n".join(["When asked to route, reply with exactly one label: the adapter that should answer "
                      "the last user message.", *_legend_lines(domains)])


def with_legend(head: Sequence[dict[str, object]], domains: Mapping[str, Sequence[str]]) -> list[dict[str, object]]:
    """`head` with the route legend at the end of its system message (a system message first if none)."""
    out = [dict(m) for m in head]
    legend = route_legend(domains)
    if out and out[0].get("role") == "system" and isinstance(out[0].get("content"), str):
        out[0]["content"] = f"{out[0]['content']}\n\n{legend}"
    else:
        out.insert(0, {"role": "system", "content": legend})
    return out


def summary_request(summary_tokens: int) -> str:
    """What the answering adapter is asked after its user turn (the summary others will see)."""
    return (f"Summarize what you did for the last user message and its result in at most {summary_tokens} "
            "tokens, for the other assistants.")


def choice_regex(labels: Sequence[str]) -> str:
    """SGLang's spelling of the same constraint: an alternation of the literal labels."""
    return "(" + "|".join(re.escape(lab) for lab in labels) + ")"


def regex_labels(pattern: str) -> list[str] | None:
    """The labels of a pattern `choice_regex` wrote (`(A|B)`, optionally anchored), else None."""
    p = pattern.strip()
    p = p[1:] if p.startswith("^") else p
    p = p[:-1] if p.endswith("$") and not p.endswith("\\$") else p
    if not (p.startswith("(") and p.endswith(")")):
        return None
    parts = p[1:-1].split("|")
    out = [re.sub(r"\\(.)", r"\1", x) for x in parts]
    if any(not x or re.escape(x) != y for x, y in zip(out, parts, strict=True)):
        return None
    return out


def keyword_route(instruction: str, domains: Mapping[str, Sequence[str]]) -> str:
    """A baseline router (benchmarks/mol.py E1): the label whose family names occur most, else L0."""
    text = instruction.lower()
    best, best_n = ROUTER, 0
    for label, fams in domains.items():
        n = sum(text.count(f.lower()) for f in fams)
        if n > best_n:
            best, best_n = label, n
    return best




# --- routing accuracy (the promotion gate, rsi diff, benchmarks/mol.py E1) --------------------------------


class RoutingScore(RsiModel):
    """Routing accuracy of one router on instructions with gold labels (label infra failures excluded)."""

    model_config = ConfigDict(extra="forbid")

    correct: int = 0
    total: int = 0
    infra: int = 0  # instructions whose route hop failed (never counted as wrong)
    confusion: dict[str, dict[str, int]] = Field(default_factory=dict)  # gold -> predicted -> count
    margins: list[float] = Field(default_factory=list)

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0

    def add(self, gold: str, predicted: str, margin: float | None = None) -> None:
        self.total += 1
        self.correct += int(gold == predicted)
        row = self.confusion.setdefault(gold, {})
        row[predicted] = row.get(predicted, 0) + 1
        if margin is not None:
            self.margins.append(round(margin, 4))

    def recall(self) -> dict[str, float]:
        return {g: row.get(g, 0) / sum(row.values()) for g, row in sorted(self.confusion.items()) if row}


def routing_gate_problem(parent: RoutingScore | None, candidate: RoutingScore, margin: float) -> str | None:
    """Why the candidate's routing fails the gate (None: it passes): it may not fall below the parent's
    accuracy by more than `margin`; with no parent mixture there is nothing to regress from."""
    if candidate.total == 0:
        return "no holdout instruction could be routed (every route hop failed)"
    if parent is None or parent.total == 0:
        return None
    if candidate.accuracy < parent.accuracy - margin:
        return (f"routing accuracy {candidate.accuracy:.3f} is below the parent's {parent.accuracy:.3f} "
                f"by more than {margin:g}")
    return None


__all__ = [
    "DEFAULT_SUMMARY_TOKENS",
    "ROUTER",
    "ROUTER_ROLE",
    "SPECIALIST_ROLE",
    "Constraint",
    "MolSpec",
    "RoutingScore",
    "choice_regex",
    "domain_problems",
    "keyword_route",
    "label_index",
    "regex_labels",
    "route_question",
    "routing_gate_problem",
    "summary_request",
]
