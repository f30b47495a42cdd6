"""How the local backend lays training samples out for the model: rows (token sequences) and forwards.

A policy turn's sample is `prompt + completion`. The turns of one trajectory repeat each other: turn k+1's
prompt is turn k's prompt, its completion, the observation and the next user message. When those tokens chain
exactly (turn k's prompt + completion is a token prefix of turn k+1's prompt), the turns share one **row**: the
last turn's tokens, with every turn's completion marked as a span. Under causal attention each completion token
then sees exactly the tokens it saw in its own sample, so every turn's log-probabilities are the ones its own
forward would give, and the shared prefix is computed once instead of once per turn. Turns whose tokens do not
chain (the server rendered a prompt differently) keep rows of their own.

Rows are then grouped into **forwards**: sorted by length (longest first, so rows of similar length pad
together) and filled while the padded size (rows x longest row) stays within a token budget.

Pure: token ids in, index plans out; torch is the caller's (rsi.train.local).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol


class HasTokens(Protocol):
    prompt: list[int]
    completion: list[int]
    trial: str


@dataclass
class Span:
    """Sample `index` (of the list given to `chain_rows`): its completion is row.ids[start:end]."""

    index: int
    start: int
    end: int


@dataclass
class Row:
    ids: list[int]
    spans: list[Span] = field(default_factory=list)


def chain_rows(samples: Sequence[HasTokens]) -> list[Row]:
    """Rows for `samples` (in order): a sample joins the open row of its trajectory (same `trial`) when the row's
    tokens are a prefix of its prompt, and the row grows to its prompt + completion; otherwise it opens a row."""
    rows: list[Row] = []
    open_row: dict[str, Row] = {}
    for i, x in enumerate(samples):
        full = list(x.prompt) + list(x.completion)
        row = open_row.get(x.trial) if x.trial else None
        if row is not None and len(row.ids) <= len(x.prompt) and x.prompt[: len(row.ids)] == row.ids:
            row.ids = full
        else:
            row = Row(ids=full)
            rows.append(row)
            if x.trial:
                open_row[x.trial] = row
        row.spans.append(Span(i, len(x.prompt), len(full)))
    return rows


def plan_forwards(rows: Sequence[Row], max_tokens: int) -> list[list[Row]]:
    """Rows grouped into forwards: longest first, each forward as many rows as fit `max_tokens` once padded to
    its longest row (a row longer than the budget gets a forward of its own)."""
    out: list[list[Row]] = []
    cur: list[Row] = []
    for r in sorted(rows, key=lambda r: -len(r.ids)):
        width = len(cur[0].ids) if cur else len(r.ids)
        if cur and (len(cur) + 1) * width > max_tokens:
            out.append(cur)
            cur = []
        cur.append(r)
    if cur:
        out.append(cur)
    return out


def trajectory_batches(samples: Sequence[HasTokens]) -> list[list[int]]:
    """Indices of `samples` grouped by trajectory (first appearance order, turn order kept within each)."""
    by: dict[str, list[int]] = {}
    for i, x in enumerate(samples):
        by.setdefault(x.trial or f"#{i}", []).append(i)
    return list(by.values())


def padded_tokens(forward: Sequence[Row]) -> int:
    """Tokens a forward computes: rows x its longest row."""
    return len(forward) * max((len(r.ids) for r in forward), default=0)


__all__ = ["Row", "Span", "chain_rows", "padded_tokens", "plan_forwards", "trajectory_batches"]
