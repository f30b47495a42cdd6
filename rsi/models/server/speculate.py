"""Prompt-lookup speculative decoding for a request decoded alone.

An agent's reply mostly repeats what its prompt holds: the fence and language tag of the few-shot
answers, the file names of the task, the command it ran a turn ago. So the tokens that follow the
latest occurrence of the reply's last n tokens (n = 3, then 2) in prompt + reply are a good guess of
what comes next (prompt lookup decoding, as transformers' `prompt_lookup_num_tokens` and vLLM's
`ngram` speculator do). One forward pass feeds the row's last token plus up to `k` guessed tokens
and gives logits at every position; greedy decoding keeps each guess while it equals the argmax at
its position, then takes the argmax after the last kept one. The answer is the greedy answer, up to
the rounding of a several-token forward (as in a chunked prefill); decoding is bound by reading the
weights, so checking k + 1 tokens costs little more than one. A sampled request keeps a guess with
the probability its distribution gives it and otherwise draws from the rest (speculative sampling
with a one-point draft, Leviathan et al. 2023): its tokens are distributed exactly as without
speculation, and its seed still reproduces its output (for the same speculation setting).
"""

from __future__ import annotations

from typing import Any

import torch

from rsi.models.server.decode import Batch

NGRAM_MAX = 3
NGRAM_MIN = 2  # a lone matching token guesses badly: a failed guess costs a multi-token forward (~1.7x one)


class PromptLookup:
    """Where each NGRAM_MIN..NGRAM_MAX-gram of a row's prompt + reply last occurred, updated as tokens come."""

    def __init__(self, prompt_ids: list[int]) -> None:
        self.seq: list[int] = []
        self.next_after: dict[tuple[int, ...], int] = {}  # n-gram -> the index right after its latest occurrence
        for tok in prompt_ids:
            self.push(tok)

    def push(self, tok: int) -> None:
        """Append a token; index the n-grams that now have a successor (never the current suffix)."""
        self.seq.append(tok)
        end = len(self.seq) - 1  # the new token's index: n-grams ending just before it get it as successor
        for n in range(NGRAM_MIN, NGRAM_MAX + 1):
            if end - n >= 0:
                self.next_after[tuple(self.seq[end - n : end])] = end

    def draft(self, k: int) -> list[int]:
        """Up to `k` tokens that followed the longest recent match of the current suffix."""
        if k <= 0:
            return []
        for n in range(NGRAM_MAX, NGRAM_MIN - 1, -1):
            if len(self.seq) < n:
                continue
            at = self.next_after.get(tuple(self.seq[-n:]))
            if at is not None:
                return self.seq[at : at + k]
        return []


def speculative_step(batch: Batch, model: Any, adapter_names: list[str] | None, k: int) -> tuple[int, bool]:
    """Advance the batch's single unpadded row by one or more tokens: (tokens taken, finished)."""
    (row,) = batch.rows
    lookup = row.lookup
    if lookup is None:
        lookup = row.lookup = PromptLookup([int(t) for t in row.prompt_ids.tolist()] + row.ids)
    room = row.request.max_tokens - len(row.ids) - 1  # the token after the kept guesses counts too
    guess = lookup.draft(min(k, room))
    kv_before = batch.length
    tokens = torch.tensor([[row.last, *guess]])
    kwargs: dict[str, Any] = {} if adapter_names is None else {"adapter_names": adapter_names}
    out = model(input_ids=tokens, cache=batch.cache, use_cache=True, logits_to_keep=len(guess) + 1, **kwargs)
    logits = out.logits[0]
    taken, finished = 0, False
    for j in range(len(guess) + 1):
        tok = row.choose(logits[j], guess[j] if j < len(guess) else None)
        finished = row.advance(tok)
        lookup.push(tok)
        taken += 1
        if finished or j == len(guess) or tok != guess[j]:
            break
    # KV holds the fed tokens: keep `last` and the guesses that were kept (the newest token is not fed yet)
    extra = len(guess) + 1 - taken  # fed guesses that were not kept
    if extra and batch.cache is not None:
        batch.cache.crop(-extra)  # transformers 5: a negative count drops that many columns from every layer
        assert batch.length == kv_before + taken
    row.kv_len += taken
    return taken, finished


__all__ = ["PromptLookup", "speculative_step"]
