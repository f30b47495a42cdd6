"""A choice constraint served by scoring, not by decoding (`structured_outputs: {"choice": [...]}`).

The answer to a choice request is the label with the highest log-probability after the prompt:
score(label) = sum of log p(t_i | prompt, t_<i) over the label's tokens. The prompt is prefilled once
(with the prefix cache, like any request); every label's first token is scored from that prefill's last
logits, and the rest of all labels' tokens in one more forward pass with the prompt's KV repeated over
a batch of one row per distinct label *context* (the label's tokens but its last; rows right-padded: the
causal mask keeps padding out of every real position, so no attention mask is needed). Labels whose
contexts agree, or where one context begins another, share a row: L0..L9 (two tokens on most tokenizers,
`L` then the digit) are all scored from one row of one token, so the prompt's KV is never copied per
label (on a long conversation that copy cost as much as the route's prefill). Labels of one token need no
second pass at all. No token is sampled, so the answer is always in the set,
and the margin (best score minus the runner-up's, in nats) says how sure the router was.

The scores are not length-normalised: labels of equal token length (L0..L9) compare fairly; callers
with labels of very different lengths should know the shorter one is favoured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import DynamicCache

from rsi.models.server.kv_cache import LayerKV


def score_labels(
    model: Any,
    prompt_kv: list[LayerKV],
    last_logits: torch.Tensor,
    label_ids: Sequence[Sequence[int]],
    adapter_name: str | None,
    *,
    shared: bool = True,
) -> list[float]:
    """Summed log-probability of each label's tokens after the prompt (whose KV and last logits are given).
    `shared=False` gives every label a row of its own (the earlier way: kept for benchmarks/mol_turns.py)."""
    first = torch.log_softmax(last_logits.float(), dim=-1)
    scores = [float(first[ids[0]]) for ids in label_ids]
    longest = max(len(ids) for ids in label_ids)
    if longest == 1:
        return scores
    if shared:
        contexts, row_of = label_rows(label_ids)
    else:
        contexts, row_of = [tuple(int(t) for t in ids[:-1]) for ids in label_ids], list(range(len(label_ids)))
    n = len(contexts)
    width = max(len(c) for c in contexts)
    pad = int(label_ids[0][0])
    inputs = torch.tensor([list(c) + [pad] * (width - len(c)) for c in contexts], dtype=torch.long)
    kv = prompt_kv if n == 1 else [(k.expand(n, -1, -1, -1).contiguous(), v.expand(n, -1, -1, -1).contiguous())
                                   for k, v in prompt_kv]
    cache = DynamicCache(ddp_cache_data=kv)  # extended by new tensors: the prompt's KV is left as it was
    start = int(prompt_kv[0][0].shape[2])
    kwargs: dict[str, Any] = {"position_ids": torch.arange(start, start + width).expand(n, -1)}
    if adapter_name is not None:
        kwargs["adapter_names"] = [adapter_name] * n
    out = model(input_ids=inputs, cache=cache, use_cache=True, **kwargs)
    logp = torch.log_softmax(out.logits.float(), dim=-1)
    for i, ids in enumerate(label_ids):
        r = row_of[i]
        for j in range(1, len(ids)):
            scores[i] += float(logp[r, j - 1, ids[j]])
    return scores


def label_rows(label_ids: Sequence[Sequence[int]]) -> tuple[list[tuple[int, ...]], list[int]]:
    """The rows of the second pass and each label's row (-1: a one-token label, scored from the prefill).

    A label's context is its tokens but the last; a context that another one begins with shares that row
    (causal attention: a row's logits at a position depend only on the tokens up to it)."""
    ctx = [tuple(int(t) for t in ids[:-1]) for ids in label_ids]
    rows: list[tuple[int, ...]] = []
    for c in sorted({c for c in ctx if c}, key=len, reverse=True):
        if not any(r[: len(c)] == c for r in rows):
            rows.append(c)
    row_of = [next((k for k, r in enumerate(rows) if c and r[: len(c)] == c), -1) for c in ctx]
    return rows, row_of


def margin(scores: Sequence[float]) -> float:
    """Best score minus the runner-up's (nats); 0.0 with a single label (nothing to compare)."""
    s = sorted(scores, reverse=True)
    return s[0] - s[1] if len(s) > 1 else 0.0


def common_prefix(label_ids: Sequence[Sequence[int]]) -> list[int]:
    """The tokens every label begins with, leaving each label at least one token of its own (`L` of L0..L9):
    the engine prefills them with the prompt, in the same forward pass (one pass for the whole route)."""
    out: list[int] = []
    for col in zip(*[ids[: min(len(x) for x in label_ids) - 1] for ids in label_ids], strict=False):
        if len(set(col)) != 1:
            break
        out.append(int(col[0]))
    return out


def prefilled_scores(model: Any, kv: list[LayerKV], kept_logits: torch.Tensor, common: Sequence[int],
                     label_ids: Sequence[Sequence[int]], adapter_name: str | None) -> list[float]:
    """Each label's log-probability when the prompt was prefilled together with the labels' `common` prefix:
    `kept_logits` are the last len(common) + 1 positions' logits (the prompt's last token, then each common
    token), `kv` covers prompt + common. Labels one token past the prefix need no further pass."""
    logp = torch.log_softmax(kept_logits.float(), dim=-1)
    shared = sum(float(logp[j, t]) for j, t in enumerate(common))
    rest = [list(ids[len(common):]) for ids in label_ids]
    tail = score_labels(model, kv, kept_logits[-1], rest, adapter_name)
    return [shared + x for x in tail]


__all__ = ["common_prefix", "label_rows", "margin", "prefilled_scores", "score_labels"]
