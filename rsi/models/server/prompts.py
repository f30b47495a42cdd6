"""A request's prompt: chat messages through the model's chat template, or a text completion's raw prompt
(a string, or token ids taken as they are), and a text completion's `echo` logprobs over its prompt."""

from __future__ import annotations

from typing import Any

import torch

from rsi.models.server.constrain import Vocab
from rsi.models.server.decode import GenRequest, TokenLogprob
from rsi.models.server.tools import render_tool_calls, tools_system_text


class PromptError(ValueError):
    """A prompt that cannot be built (the engine answers it with 400)."""


def render_chat(tokenizer: Any, req: GenRequest, template_has_tools: bool) -> str:
    """The request's prompt text via the chat template (tools in the system prompt if needed)."""
    msgs: list[dict[str, Any]] = []
    for m in req.messages:
        content = m.get("content")
        if isinstance(content, list):  # OpenAI content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        content = content or ""
        if m.get("tool_calls"):
            content = "\n".join(x for x in (content, render_tool_calls(m["tool_calls"])) if x)
        msgs.append({"role": m["role"], "content": content})
    kwargs: dict[str, Any] = {}
    if req.tools:
        if template_has_tools:
            kwargs["tools"] = req.tools
        else:
            tool_text = tools_system_text(req.tools)
            if msgs and msgs[0]["role"] == "system":
                msgs[0] = {"role": "system", "content": msgs[0]["content"] + "\n\n" + tool_text}
            else:
                msgs.insert(0, {"role": "system", "content": tool_text})
    try:
        return str(tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kwargs))
    except Exception as e:  # jinja errors from the model's own template
        raise PromptError(f"messages could not be rendered with the chat template: {e}") from e


def encode(tokenizer: Any, req: GenRequest, template_has_tools: bool) -> torch.Tensor:
    """The prompt's token ids: a raw prompt as vLLM's completions take it (a string tokenized with the
    tokenizer's special tokens, or ids as given), else the rendered chat."""
    if isinstance(req.prompt, list):
        n = len(tokenizer)
        bad = [t for t in req.prompt if not 0 <= t < n]
        if bad:
            raise PromptError(f"prompt: token id {bad[0]} is outside the vocabulary (0..{n - 1})")
        if not req.prompt:
            raise PromptError("prompt: no tokens")
        return torch.tensor(req.prompt, dtype=torch.long)
    if req.prompt is not None:
        ids = tokenizer(req.prompt, add_special_tokens=True, return_tensors="pt")["input_ids"][0]
        if not int(ids.numel()):
            raise PromptError("prompt: the text encodes to no token")
        return ids
    return tokenizer(render_chat(tokenizer, req, template_has_tools), add_special_tokens=False,
                     return_tensors="pt")["input_ids"][0]


def logprob_entry(vocab: Vocab, token: int, logprob: float, top: list[tuple[int, float]]) -> TokenLogprob:
    text, raw = vocab.piece(token)
    return TokenLogprob(text, raw, logprob, [(*vocab.piece(t), lp) for t, lp in top])


def completion_entries(vocab: Vocab, ids: list[int], logprobs: list[float],
                       tops: list[list[tuple[int, float]]]) -> list[TokenLogprob]:
    """OpenAI's logprobs content of a completion: each token with its top alternatives (if asked for)."""
    return [logprob_entry(vocab, t, lp, tops[i] if i < len(tops) else [])
            for i, (t, lp) in enumerate(zip(ids, logprobs, strict=True))]


def echo_entries(vocab: Vocab | None, prompt_ids: list[int],
                 scored: list[TokenLogprob] | None) -> list[TokenLogprob] | None:
    """Every prompt token for `echo` with logprobs: the first has none (nothing before it predicts it)."""
    if vocab is None or scored is None or not prompt_ids:
        return None
    first, raw = vocab.piece(prompt_ids[0])
    return [TokenLogprob(first, raw, None), *scored]


Scored = tuple[int, float, list[tuple[int, float]]]  # a token, its logprob, the top alternatives


def chunk_logprobs(logits: torch.Tensor, next_ids: torch.Tensor, k: int) -> list[Scored]:
    """For each position of a prefill chunk whose next prompt token is known: (that token, its logprob, the
    top k). `logits` [positions, vocab]; `next_ids` the tokens that follow (at most one fewer than positions)."""
    n = int(next_ids.numel())
    if n == 0:
        return []
    lp = torch.log_softmax(logits[:n].float(), dim=-1)
    got = lp.gather(1, next_ids[:, None].long())[:, 0].tolist()
    tops: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    if k > 0:
        vals, idx = torch.topk(lp, min(k, int(lp.shape[-1])), dim=-1)
        tops = [list(zip(i, v, strict=True)) for i, v in zip(idx.tolist(), vals.tolist(), strict=True)]
    return [(int(t), float(g), top) for t, g, top in zip(next_ids.tolist(), got, tops, strict=True)]


__all__ = ["PromptError", "chunk_logprobs", "completion_entries", "echo_entries", "encode", "logprob_entry",
           "render_chat"]
