"""A choice constraint served by scoring, not by decoding (`structured_outputs: {"choice": [...]}`).

The answer to a choice request is the label with the highest log-probability after the prompt:
score(label) = sum of log p(t_i | prompt, t_<i) over the label's tokens. The prompt is prefilled once
(with the prefix cache, like any request); every label's first token is scored from that prefill's last
logits, and the rest of all labels' tokens in one more forward pass with the prompt's KV repeated over
a batch of one row per label (rows right-padded: the causal mask keeps padding out of every real
position, so no attention mask is needed). Labels of one token (the usual case, L0..L9 on most
tokenizers is two) need no second pass at all. No token is sampled, so the answer is always in the set,
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
) -> list[float]:
    """Summed log-probability of each label's tokens after the prompt (whose KV and last logits are given)."""
    first = torch.log_softmax(last_logits.float(), dim=-1)
    scores = [float(first[ids[0]]) for ids in label_ids]
    longest = max(len(ids) for ids in label_ids)
    if longest == 1:
        return scores
    n = len(label_ids)
    width = longest - 1
    pad = int(label_ids[0][0])
    rows = [list(ids[:-1]) + [pad] * (width - (len(ids) - 1)) for ids in label_ids]
    inputs = torch.tensor(rows, dtype=torch.long)
    kv = [(k.expand(n, -1, -1, -1).contiguous(), v.expand(n, -1, -1, -1).contiguous()) for k, v in prompt_kv]
    cache = DynamicCache(ddp_cache_data=kv)
    start = int(prompt_kv[0][0].shape[2])
    kwargs: dict[str, Any] = {"position_ids": torch.arange(start, start + width).expand(n, -1)}
    if adapter_name is not None:
        kwargs["adapter_names"] = [adapter_name] * n
    out = model(input_ids=inputs, cache=cache, use_cache=True, **kwargs)
    logp = torch.log_softmax(out.logits.float(), dim=-1)
    for i, ids in enumerate(label_ids):
        for j in range(1, len(ids)):
            scores[i] += float(logp[i, j - 1, ids[j]])
    return scores


def margin(scores: Sequence[float]) -> float:
    """Best score minus the runner-up's (nats); 0.0 with a single label (nothing to compare)."""
    s = sorted(scores, reverse=True)
    return s[0] - s[1] if len(s) > 1 else 0.0


__all__ = ["margin", "score_labels"]
