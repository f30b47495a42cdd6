"""Constrained decoding: each next token is one a grammar (grammar.py) allows, as vLLM's guided decoding.

`Vocab` holds every token's text and bytes once per engine (for the grammar and for OpenAI's logprobs
`token` / `bytes`). `Constrained` follows one row: the candidates are the tokens whose first character
may come next (an index by first character, so a number's step looks at digit tokens only), and a
candidate is allowed when the grammar accepts its whole text. Special tokens and tokens that are only
part of a UTF-8 character are never candidates; an end-of-sequence token is one once the text is a
whole match. Decoding stops by itself when nothing can follow (the grammar is finished).

- greedy: the most likely allowed token (the argmax of the masked logits, as vLLM);
- sampled, top_p = 1: drawn from the temperature distribution restricted to the allowed tokens (a draw
  that is not allowed is taken out and drawn again: exactly the masked, renormalised distribution);
- sampled, top_p < 1: top-p over the allowed tokens (mask first, then top-p, as vLLM), the allowed mass
  found by checking candidates most likely first until 1e-4 of the mass or 4096 candidates are left.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

import torch

from rsi.models.server.grammar import Node, State, accepts, feed, finished, next_chars, start

log = logging.getLogger("rsi.models.server")

REJECT_TRIES = 64
WALK_MAX = 4096
WALK_REST = 1e-4


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, character -> byte."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


class Vocab:
    """Every token's text and bytes; tokens grouped by their first character (for constrained decoding)."""

    def __init__(self, tokenizer: Any, eos_ids: list[int]) -> None:
        n = len(tokenizer)
        raw = tokenizer.convert_ids_to_tokens(list(range(n)))
        texts = tokenizer.batch_decode([[i] for i in range(n)], clean_up_tokenization_spaces=False)
        dec = _byte_decoder()
        byte_level = all(r is None or all(c in dec for c in r) for r in raw)
        self.bytes: list[bytes] = [bytes(dec[c] for c in (r or "")) if byte_level else str(t).encode()
                                   for r, t in zip(raw, texts, strict=True)]
        self.texts: list[str] = [str(t) for t in texts]
        self.eos_ids = sorted(set(eos_ids))
        special = set(getattr(tokenizer, "all_special_ids", [])) | set((tokenizer.get_added_vocab() or {}).values())
        groups: dict[str, list[int]] = {}
        usable: list[int] = []
        for i, t in enumerate(self.texts):
            if i in special or not t or "\ufffd" in t:
                continue
            usable.append(i)
            groups.setdefault(t[0], []).append(i)
        self.usable = torch.tensor(usable, dtype=torch.long)
        self.by_first = {c: torch.tensor(ids, dtype=torch.long) for c, ids in groups.items()}
        self._unions: dict[frozenset[str], torch.Tensor] = {}

    def starting_with(self, chars: set[str] | None) -> torch.Tensor:
        """Ids of the usable tokens whose text starts with one of `chars` (None: all usable tokens)."""
        if chars is None:
            return self.usable
        key = frozenset(chars)
        got = self._unions.get(key)
        if got is None:
            parts = [self.by_first[c] for c in sorted(key) if c in self.by_first]
            got = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.long)
            if len(self._unions) < 4096:
                self._unions[key] = got
        return got

    def piece(self, token_id: int) -> tuple[str, list[int]]:
        """OpenAI's logprobs `token` and `bytes` for one token id."""
        b = self.bytes[token_id] if 0 <= token_id < len(self.bytes) else b""
        return b.decode("utf-8", errors="replace"), list(b)


class Constrained:
    """One row's grammar state; picks allowed tokens and follows the ones taken."""

    def __init__(self, node: Node, vocab: Vocab) -> None:
        self.vocab = vocab
        self.state: State = start(node)

    @property
    def finished(self) -> bool:
        return finished(self.state)

    def allowed(self, token_id: int) -> bool:
        if token_id in self.vocab.eos_ids:
            return accepts(self.state)
        return feed(self.state, self.vocab.texts[token_id]) is not None

    def candidates(self) -> torch.Tensor:
        ids = self.vocab.starting_with(next_chars(self.state))
        if accepts(self.state) and self.vocab.eos_ids:
            ids = torch.cat([ids, torch.tensor(self.vocab.eos_ids, dtype=torch.long)])
        return ids

    def advance(self, token_id: int) -> None:
        if token_id in self.vocab.eos_ids:
            return
        nxt = feed(self.state, self.vocab.texts[token_id])
        assert nxt is not None, f"token {token_id} was not allowed"
        self.state = nxt

    def pick(self, logits: torch.Tensor, *, temperature: float, top_p: float,
             generator: torch.Generator | None) -> int:
        """The next token: allowed by the grammar, chosen as the request's sampling settings say."""
        cands = self.candidates()
        if cands.numel():
            scores = logits.float()[cands]
            if temperature <= 0.0:
                got = self._greedy(cands, scores)
            else:
                probs = torch.softmax(scores / temperature, dim=-1)
                got = self._sample(cands, probs, generator) if top_p >= 1.0 else \
                    self._nucleus(cands, probs, top_p, generator)
            if got is not None:
                return got
        # no token fits (a grammar character no usable token starts with): end the row rather than break it
        log.warning("constrained decoding: no allowed token; ending the answer")
        return self.vocab.eos_ids[0] if self.vocab.eos_ids else int(torch.argmax(logits))

    def _greedy(self, cands: torch.Tensor, scores: torch.Tensor) -> int | None:
        best = int(torch.argmax(scores))
        if self.allowed(int(cands[best])):
            return int(cands[best])
        for j in torch.argsort(scores, descending=True).tolist():
            if self.allowed(int(cands[j])):
                return int(cands[j])
        return None

    def _sample(self, cands: torch.Tensor, probs: torch.Tensor, generator: torch.Generator | None) -> int | None:
        p = probs.clone()
        for _ in range(REJECT_TRIES):
            total = float(p.sum())
            if total <= 0.0:
                return None
            j = int(torch.multinomial(p / total, 1, generator=generator))
            if self.allowed(int(cands[j])):
                return int(cands[j])
            p[j] = 0.0
        return self._nucleus(cands, p, 1.0, generator)

    def _nucleus(self, cands: torch.Tensor, probs: torch.Tensor, top_p: float,
                 generator: torch.Generator | None) -> int | None:
        order = torch.argsort(probs, descending=True)
        ids: list[int] = []
        mass: list[float] = []
        seen = 0.0
        total = float(probs.sum())
        for n, j in enumerate(order.tolist()):
            pj = float(probs[j])
            if pj <= 0.0 or n >= WALK_MAX or total - seen < WALK_REST * total:
                break
            seen += pj
            if self.allowed(int(cands[j])):
                ids.append(int(cands[j]))
                mass.append(pj)
        if not ids:
            return None
        p = torch.tensor(mass)
        p = p / p.sum()
        keep = torch.cumsum(p, dim=-1) - p < top_p  # already sorted, most likely first
        p = p * keep
        return ids[int(torch.multinomial(p / p.sum(), 1, generator=generator))]


__all__ = ["Constrained", "Vocab"]
