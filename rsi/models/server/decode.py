"""The engine's decoding: per-request rows, their stop rules, and a batch of rows stepped together.

A `Row` is one request being decoded: its prompt ids, the tokens generated so far, the text they
decode to, and why it ended (end-of-sequence token, a stop string, a complete tool call, max_tokens,
or cancellation). A `Batch` holds the KV of several rows left-padded into one tensor per layer, so
one forward pass advances all of them (continuous batching: rows join after their own prefill and
leave as soon as they finish). With one row there is no padding and no mask.

A row with a grammar (a forced tool call, a JSON `response_format`) takes only the tokens the grammar
allows (constrain.py) and ends as soon as nothing more can follow. Logprobs are the model's own
(before any constraint, temperature or top-p), as vLLM reports them by default.
"""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedTokenizerBase

from rsi.models.server.constrain import Constrained, Vocab
from rsi.models.server.grammar import Node
from rsi.models.server.kv_cache import LayerKV, cache_layers

TOOL_CLOSE = "</tool_call>"


@dataclass
class GenRequest:
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    logprobs: bool = False  # record each sampled token's logprob (raw model distribution, as vLLM)
    top_logprobs: int = 0  # and the k most likely tokens at each step
    choice: list[str] | None = None  # a choice constraint: the answer is the best-scored label
    tool_choice: str = "auto"  # "auto" | "none" (tools stay in the prompt, no call is parsed) | "required"
    grammar: Node | None = None  # every token must keep the text a prefix of this grammar (constrain.py)
    prompt: str | list[int] | None = None  # a text completion's raw prompt (no chat template), else None
    prompt_logprobs: int | None = None  # a text completion's echo: each prompt token's logprob (+ top k)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def parses_tools(self) -> bool:
        """Tool calls are looked for in the answer (tools offered and tool_choice is not "none")."""
        return bool(self.tools) and self.tool_choice != "none"


@dataclass
class TokenLogprob:
    """One token of OpenAI's `logprobs.content`: its text, bytes, logprob and the top alternatives."""

    token: str
    bytes: list[int]
    logprob: float | None  # None: a prompt's first token (nothing before it to predict it)
    top: list[tuple[str, list[int], float]] = field(default_factory=list)


@dataclass
class GenResult:
    text: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # prompt tokens whose KV came from the prefix cache
    queue_sec: float = 0.0  # waited in the queue before its prefill started
    prefill_sec: float = 0.0  # its prompt's prefill (from the cached prefix on)
    # from the end of its prefill to its last token: decode steps shared with the batch, and other rows' prefills
    # admitted in between (or, for a choice, the labels' scoring)
    decode_sec: float = 0.0
    # vLLM's `choices[].stop_reason`: the stop string that ended the text (it is not in `text`),
    # else None (end-of-sequence token, max_tokens or a complete tool call).
    stop_reason: str | None = None
    completion_ids: list[int] = field(default_factory=list)
    prompt_ids: list[int] = field(default_factory=list)  # the exact prompt tokens (vLLM `prompt_token_ids`)
    logprobs: list[float] | None = None  # per completion token, when the request asked for them
    tokens: list[str] | None = None  # the completion tokens as strings, with `logprobs`
    logprob_content: list[TokenLogprob] | None = None  # the same with bytes and top alternatives
    prompt_text: str | None = None  # a text completion's prompt as text (for `echo`)
    prompt_logprob_content: list[TokenLogprob] | None = None  # echo: every prompt token (the first: logprob None)
    # a choice request: label -> summed log-probability of its tokens after the prompt
    choice_scores: dict[str, float] | None = None


def complete_json_call(text: str) -> bool:
    """True when `text` (stripped, maybe in a ```json fence) starts with a whole JSON object naming a tool."""
    body = text.strip()
    if body.startswith("```"):
        body = body.split("\n", 1)[1] if "\n" in body else ""
    if not body.startswith("{"):
        return False
    try:
        obj, _ = json.JSONDecoder().raw_decode(body)
    except ValueError:
        return False
    return isinstance(obj, dict) and isinstance(obj.get("name"), str)


class Row:
    """One request being decoded."""

    def __init__(
        self,
        request: GenRequest,
        prompt_ids: torch.Tensor,
        tok: PreTrainedTokenizerBase,
        eos_ids: list[int],
        *,
        cancel: threading.Event,
        on_delta: Callable[[str], object] | None = None,
        vocab: Vocab | None = None,
    ) -> None:
        self.request = request
        self.prompt_ids = prompt_ids
        self.tok = tok
        self.eos_ids = set(eos_ids)
        self.cancel = cancel
        self.on_delta = on_delta if not request.parses_tools else None  # tool replies are parsed whole at the end
        self.constrained: Constrained | None = None
        if request.grammar is not None:
            assert vocab is not None, "a grammar needs the vocabulary"
            self.constrained = Constrained(request.grammar, vocab)
        self.ids: list[int] = []
        self.logprobs: list[float] = []
        self.top: list[list[tuple[int, float]]] = []  # the top_logprobs alternatives at each step
        self.prompt_logprobs: list[TokenLogprob] | None = None  # echo: the prompt's own logprobs (from token 2)
        self.text = ""
        self.emitted = 0
        self.finish: str | None = None
        self.stop_reason: str | None = None
        self.cached_tokens = 0
        self.kv_len = 0  # tokens whose KV this row holds (prompt + generated[:-1])
        self.pad = 0  # left padding inside the batch
        self.generator: torch.Generator | None = None
        self.lookup: Any = None  # speculate.PromptLookup, made at the row's first speculative step
        self.job: Any = None  # the engine's Job this row answers
        self.queue_sec = 0.0
        self.prefill_sec = 0.0
        self.prefilled_at = 0.0  # time.monotonic() at the end of its prefill
        if not request.greedy:
            self.generator = torch.Generator()
            self.generator.manual_seed(request.seed if request.seed is not None else random.getrandbits(62))

    @property
    def adapter(self) -> str:
        return self.request.model

    @property
    def last(self) -> int:
        return self.ids[-1]

    def choose(self, logits: torch.Tensor, guess: int | None = None) -> int:
        """The next token from one row of logits (greedy, or temperature + top-p with the row's seed).

        With a `guess` (speculative decoding), a sampled row keeps it with probability p(guess) and
        otherwise draws from p with the guess taken out: the token is distributed exactly as p, as
        speculative sampling with a draft that puts all its mass on the guess. Greedy: the argmax."""
        req = self.request
        if self.constrained is not None:  # never speculated
            token = self.constrained.pick(logits, temperature=req.temperature, top_p=req.top_p,
                                          generator=self.generator)
        elif guess is None or req.greedy:
            token = self._choose(logits)
        else:
            token = self._keep_or_redraw(logits, guess)
        if req.logprobs:
            lp = torch.log_softmax(logits.float(), dim=-1)
            self.logprobs.append(float(lp[token]))
            if req.top_logprobs > 0:
                vals, idx = torch.topk(lp, min(req.top_logprobs, int(lp.numel())))
                self.top.append(list(zip(idx.tolist(), vals.tolist(), strict=True)))
        return token

    def _choose(self, logits: torch.Tensor) -> int:
        req = self.request
        if req.greedy:
            return int(torch.argmax(logits))
        probs = torch.softmax(logits.float() / req.temperature, dim=-1)
        if req.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < req.top_p
            sorted_p = sorted_p * keep
            pick = torch.multinomial(sorted_p / sorted_p.sum(), 1, generator=self.generator)
            return int(order[pick])
        return int(torch.multinomial(probs, 1, generator=self.generator))

    def dist(self, logits: torch.Tensor) -> torch.Tensor:
        """The sampling distribution over the whole vocabulary: temperature, then top-p, renormalized."""
        req = self.request
        probs = torch.softmax(logits.float() / req.temperature, dim=-1)
        if req.top_p < 1.0:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_p, dim=-1) - sorted_p < req.top_p
            kept = torch.zeros_like(probs)
            kept[order[keep]] = probs[order[keep]]
            probs = kept / kept.sum()
        return probs

    def _keep_or_redraw(self, logits: torch.Tensor, guess: int) -> int:
        p = self.dist(logits)
        if float(torch.rand((), generator=self.generator)) < float(p[guess]):
            return guess
        rest = p.clone()
        rest[guess] = 0.0
        total = float(rest.sum())
        return guess if total <= 0.0 else int(torch.multinomial(rest / total, 1, generator=self.generator))

    def advance(self, token: int) -> bool:
        """Take one generated token; True when the row is finished."""
        self.ids.append(token)
        req = self.request
        if self.constrained is not None:
            self.constrained.advance(token)
        if token in self.eos_ids:
            self.finish = "stop"
        else:
            self.text = str(self.tok.decode(self.ids, skip_special_tokens=True))
            hits = [(self.text.find(s), s) for s in req.stop if s and s in self.text]
            if hits:
                cut, self.stop_reason = min(hits)
                self.text, self.finish = self.text[:cut], "stop"
            elif self.constrained is not None and self.constrained.finished:
                self.finish = "stop"  # the grammar is complete: nothing may follow
            elif req.parses_tools and (TOOL_CLOSE in self.text or complete_json_call(self.text)):
                if TOOL_CLOSE in self.text:  # stop after the call: nothing after it is ever used
                    self.text = self.text[: self.text.index(TOOL_CLOSE) + len(TOOL_CLOSE)]
                self.finish = "stop"
        if self.finish is None and len(self.ids) >= req.max_tokens:
            self.finish = "length"
        self._stream()
        return self.finish is not None

    def _stream(self) -> None:
        """Send the text that can no longer change: not a possible stop-string start, no partial UTF-8."""
        if self.on_delta is None:
            return
        safe = len(self.text)
        if self.finish is None:
            while safe > 0 and self.text[safe - 1] == "\ufffd":
                safe -= 1
            for s in self.request.stop:
                for k in range(min(len(s) - 1, safe), 0, -1):
                    if self.text[:safe].endswith(s[:k]):
                        safe -= k
                        break
        if safe > self.emitted:
            self.on_delta(self.text[self.emitted : safe])
            self.emitted = safe


class Batch:
    """KV of the running rows, left-padded to one length per layer."""

    def __init__(self) -> None:
        self.rows: list[Row] = []
        self.kv: list[LayerKV] = []
        self.cache: DynamicCache | None = None

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def length(self) -> int:
        """Columns of the batch's KV (read from the live cache: its tensors are replaced every step)."""
        if self.cache is not None:
            return int(self.cache.get_seq_length())
        return int(self.kv[0][0].shape[2]) if self.kv else 0

    def _sync_from_cache(self) -> None:
        if self.cache is not None:
            self.kv = cache_layers(self.cache)

    def _rebuild(self, kv: list[LayerKV]) -> None:
        self.kv = kv
        self.cache = DynamicCache(ddp_cache_data=kv) if kv else None

    def add(self, row: Row, kv: list[LayerKV]) -> None:
        """Join `row` whose own KV (batch 1, unpadded) is `kv`."""
        self._sync_from_cache()
        if not self.rows:
            row.pad = 0
            self.rows = [row]
            self._rebuild(kv)
            return
        n_new, n_old = int(kv[0][0].shape[2]), self.length
        width = max(n_new, n_old)

        def pad(t: torch.Tensor, by: int) -> torch.Tensor:
            return t if by == 0 else torch.nn.functional.pad(t, (0, 0, by, 0))

        merged = [
            (
                torch.cat([pad(ko, width - n_old), pad(kn, width - n_new)]),
                torch.cat([pad(vo, width - n_old), pad(vn, width - n_new)]),
            )
            for (ko, vo), (kn, vn) in zip(self.kv, kv, strict=True)
        ]
        for r in self.rows:
            r.pad += width - n_old
        row.pad = width - n_new
        self.rows.append(row)
        self._rebuild(merged)

    def row_kv(self, row: Row) -> list[LayerKV]:
        """A private, unpadded copy of one row's KV (for the prefix cache)."""
        self._sync_from_cache()
        i = self.rows.index(row)
        return [(k[i : i + 1, :, row.pad :].clone(), v[i : i + 1, :, row.pad :].clone()) for k, v in self.kv]

    def remove(self, gone: list[Row]) -> None:
        if not gone:
            return
        self._sync_from_cache()
        keep = [i for i, r in enumerate(self.rows) if r not in gone]
        self.rows = [self.rows[i] for i in keep]
        if not self.rows:
            self._rebuild([])
            return
        trim = min(r.pad for r in self.rows)  # columns that are padding for every row left
        idx = torch.tensor(keep)
        self._rebuild([(k[idx, :, trim:], v[idx, :, trim:]) for k, v in self.kv])
        for r in self.rows:
            r.pad -= trim

    def step(self, model: Any, adapter_names: list[str] | None) -> torch.Tensor:
        """Feed every row its last token; return next-token logits [rows, vocab]."""
        length = self.length
        tokens = torch.tensor([[r.last] for r in self.rows])
        kwargs: dict[str, Any] = {}
        if len(self.rows) > 1 or any(r.pad for r in self.rows):
            mask = torch.ones(len(self.rows), length + 1, dtype=torch.long)
            for i, r in enumerate(self.rows):
                mask[i, : r.pad] = 0
            kwargs["attention_mask"] = mask
            kwargs["position_ids"] = torch.tensor([[length - r.pad] for r in self.rows])
        if adapter_names is not None:
            kwargs["adapter_names"] = adapter_names
        out = model(input_ids=tokens, cache=self.cache, use_cache=True, logits_to_keep=1, **kwargs)
        for r in self.rows:
            r.kv_len += 1
        return out.logits[:, -1, :]


def timing_headers(results: list[GenResult]) -> dict[str, str]:
    """What a response says of its time in the engine (the slowest choice's): queued (the harness does not charge
    it to the agent), prefilling and decoding (the cycle profile reads them)."""
    return {"X-Queue-Seconds": f"{max(r.queue_sec for r in results):.3f}",
            "X-Prefill-Seconds": f"{max(r.prefill_sec for r in results):.4f}",
            "X-Decode-Seconds": f"{max(r.decode_sec for r in results):.4f}"}


__all__ = ["Batch", "GenRequest", "GenResult", "Row", "TokenLogprob", "complete_json_call", "timing_headers"]
