"""Pydantic models of the API subset the embedded server speaks (OpenAI / vLLM chat completions, vLLM's
LoRA routes), and their conversion to engine requests. Unknown fields are accepted and ignored, as
vLLM does, so a harness config written for vLLM works here unchanged — except *constraint* fields.

Constraints: `structured_outputs: {"choice": [...]}` (vLLM's current spelling) is served by scoring the
labels (engine.score_choice); SGLang's `regex` is accepted when it is an alternation of literal labels
(rsi.core.mol.choice_regex) and served the same way. Every other constraint field — vLLM's legacy
`guided_choice`/`guided_regex`/`guided_json`/..., any other key under `structured_outputs`, a JSON
`response_format` — is answered with 400: a server that ignored it would answer unconstrained, and a
router reading such an answer would route on free text."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rsi.core.mol import regex_labels
from rsi.models.server.decode import GenRequest

DEFAULT_MAX_TOKENS = 256
# Constraint fields other servers understand and this one does not: refused, never ignored.
REFUSED_CONSTRAINTS = ("guided_choice", "guided_regex", "guided_json", "guided_grammar", "guided_decoding_backend",
                       "guided_whitespace_pattern", "structural_tag", "json_schema", "ebnf", "guided_options")


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    # vLLM's stop strings: generation ends at the first one, which is left out of the text
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    # OpenAI's logprobs (per sampled token) and vLLM's `return_token_ids` (prompt_token_ids on the
    # response, token_ids on the choice): what a trainer needs to train on exactly the served tokens.
    logprobs: bool = False
    top_logprobs: int | None = None  # accepted; alternatives are not returned (top_logprobs: [])
    return_token_ids: bool = False
    structured_outputs: dict[str, Any] | None = None
    regex: str | None = None  # SGLang's constraint spelling; only a literal alternation is served
    response_format: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _constraints(self) -> ChatCompletionRequest:
        extra = self.model_extra or {}
        refused = [k for k in REFUSED_CONSTRAINTS if k in extra]
        if refused:
            raise ValueError(f"unsupported constraint field(s) {', '.join(refused)}: this server serves only "
                             "structured_outputs.choice (vLLM's current spelling); a constraint it ignored "
                             "would be answered unconstrained")
        so = self.structured_outputs
        if so is not None:
            unknown = sorted(k for k, v in so.items() if k != "choice" and v is not None)
            if unknown:
                raise ValueError(f"structured_outputs: unsupported constraint(s) {', '.join(unknown)} "
                                 "(only choice is served)")
            ch = so.get("choice")
            if not isinstance(ch, list) or not ch or not all(isinstance(x, str) and x for x in ch):
                raise ValueError("structured_outputs.choice: a non-empty list of non-empty strings")
            if len(set(ch)) != len(ch):
                raise ValueError("structured_outputs.choice: labels must be distinct")
        if self.regex is not None and regex_labels(self.regex) is None:
            raise ValueError("regex: only an alternation of literal labels, (A|B|...), is served")
        if self.regex is not None and so is not None:
            raise ValueError("regex and structured_outputs: one constraint per request")
        rf = self.response_format
        if rf is not None and rf.get("type", "text") != "text":
            raise ValueError(f"response_format: type {rf.get('type')!r} is not served (only text)")
        if self.choice() is not None and (self.stream or self.tools):
            raise ValueError("a choice constraint is answered whole: no stream, no tools")
        return self

    def choice(self) -> list[str] | None:
        """The labels of the request's choice constraint (either spelling), else None."""
        if self.structured_outputs is not None:
            return list(self.structured_outputs["choice"])
        return regex_labels(self.regex) if self.regex is not None else None

    def to_gen_request(self) -> GenRequest:
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return GenRequest(
            model=self.model,
            messages=[m.model_dump(exclude_none=True) for m in self.messages],
            tools=self.tools or None,
            temperature=self.temperature if self.temperature is not None else 0.0,
            top_p=self.top_p if self.top_p is not None else 1.0,
            max_tokens=self.max_tokens or self.max_completion_tokens or DEFAULT_MAX_TOKENS,
            stop=[s for s in stop if s],
            seed=self.seed,
            logprobs=self.logprobs,
            choice=self.choice(),
        )


class LoadLoraRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)


class UnloadLoraRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    lora_name: str = Field(min_length=1)


__all__ = [
    "ChatCompletionRequest",
    "ChatMessage",
    "LoadLoraRequest",
    "UnloadLoraRequest",
]
