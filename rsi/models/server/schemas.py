"""Pydantic models of the API subset the embedded server speaks (OpenAI / vLLM chat completions, vLLM's
LoRA routes), and their conversion to engine requests. Every field is honoured or refused with 400
naming it, never ignored (fields.py: which extra fields are harmless).

Honoured: sampling (`temperature`, `top_p`, `max_tokens` / `max_completion_tokens`, `stop`, `seed`, `n`),
`logprobs` + `top_logprobs` (0..20), `stream` + `stream_options.include_usage`, vLLM's
`return_token_ids`, tools with `tool_choice` ("auto"; "none": no call is parsed; "required" or a named
function: decoding is constrained to one call of an offered tool whose arguments fit its parameters
schema, schema_grammar.py), `response_format` ("text", "json_object", "json_schema": decoding is
constrained to the schema's subset schema_grammar.py serves; a schema outside it is a 400 naming the
keyword), and choice constraints: `structured_outputs: {"choice": [...]}` (vLLM's current spelling) is
served by scoring the labels (engine.score_choice); SGLang's `regex` is accepted when it is an
alternation of literal labels (rsi.core.mol.choice_regex) and served the same way. Every other
constraint field — vLLM's legacy `guided_choice`/`guided_regex`/`guided_json`/..., any other key under
`structured_outputs` — is answered with 400: a server that ignored it would answer unconstrained, and
a router reading such an answer would route on free text. One constraint per request."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from rsi.core.mol import regex_labels
from rsi.models.server.decode import GenRequest
from rsi.models.server.fields import REFUSED_CONSTRAINTS, check_extra
from rsi.models.server.grammar import Node
from rsi.models.server.schema_grammar import SchemaUnsupported, any_object, schema_node, tool_call_node

DEFAULT_MAX_TOKENS = 256
MAX_N = 16  # choices per request
MAX_TOP_LOGPROBS = 20  # OpenAI's limit


def response_format_grammar(rf: dict[str, Any] | None) -> Node | None:
    """The grammar a `response_format` asks for (None: text); ValueError (a 400) naming what is not served."""
    kind = (rf or {}).get("type", "text")
    if rf is None or kind == "text":
        return None
    if kind == "json_object":
        return any_object()
    if kind != "json_schema":
        raise ValueError(f"response_format: type {kind!r} is not served (text, json_object, json_schema)")
    js = rf.get("json_schema")
    if not isinstance(js, dict) or "schema" not in js:
        raise ValueError("response_format.json_schema: an object with a schema")
    try:
        return schema_node(js["schema"], "response_format.json_schema.schema")
    except SchemaUnsupported as e:
        raise ValueError(str(e)) from e


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
    tool_choice: str | dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    # vLLM's stop strings: generation ends at the first one, which is left out of the text
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None
    # OpenAI's logprobs (per sampled token, with the top_logprobs alternatives) and vLLM's `return_token_ids`
    # (prompt_token_ids on the response, token_ids on the choice): what a trainer needs to train on exactly
    # the served tokens.
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    return_token_ids: bool = False
    structured_outputs: dict[str, Any] | None = None
    regex: str | None = None  # SGLang's constraint spelling; only a literal alternation is served
    response_format: dict[str, Any] | None = None
    _grammar: Node | None = PrivateAttr(default=None)
    _tool_choice: str = PrivateAttr(default="auto")

    @model_validator(mode="after")
    def _constraints(self) -> ChatCompletionRequest:
        check_extra(self.model_extra or {})
        so = self.structured_outputs
        if so is not None:
            unknown = sorted(k for k, v in so.items() if k != "choice" and v is not None)
            if unknown:
                raise ValueError(f"structured_outputs: unsupported constraint(s) {', '.join(unknown)} "
                                 "(only choice is served; use response_format for JSON)")
            ch = so.get("choice")
            if not isinstance(ch, list) or not ch or not all(isinstance(x, str) and x for x in ch):
                raise ValueError("structured_outputs.choice: a non-empty list of non-empty strings")
            if len(set(ch)) != len(ch):
                raise ValueError("structured_outputs.choice: labels must be distinct")
        if self.regex is not None and regex_labels(self.regex) is None:
            raise ValueError("regex: only an alternation of literal labels, (A|B|...), is served")
        if self.regex is not None and so is not None:
            raise ValueError("regex and structured_outputs: one constraint per request")
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs: needs logprobs: true")
        if self.choice() is not None:
            if self.stream or self.tools:
                raise ValueError("a choice constraint is answered whole: no stream, no tools")
            if self.n > 1 or self.logprobs:
                raise ValueError(f"{'n' if self.n > 1 else 'logprobs'}: a choice constraint is scored, not "
                                 "sampled (one answer; the label scores are in choices[].choice)")
        self._tool_choice, tool_grammar = self._tools_constraint()
        json_grammar = response_format_grammar(self.response_format)
        if json_grammar is not None and (self.choice() is not None or (self.tools and self._tool_choice != "none")):
            raise ValueError("response_format: one constraint per request (with tools, set tool_choice to "
                             '"none"; not with structured_outputs or regex)')
        self._grammar = tool_grammar or json_grammar
        return self

    def _tools_constraint(self) -> tuple[str, Node | None]:
        """tool_choice as the engine takes it, and the grammar of a forced call."""
        tc = self.tool_choice
        tools = self.tools or []
        names: list[str] = []
        for i, t in enumerate(tools):
            fn = t.get("function") if isinstance(t, dict) else None
            if t.get("type", "function") != "function" or not isinstance(fn, dict) or \
                    not isinstance(fn.get("name"), str) or not fn["name"]:
                raise ValueError(f"tools[{i}]: a {{\"type\": \"function\", \"function\": {{\"name\": ...}}}} tool")
            names.append(fn["name"])
        if tc is None:
            return ("auto" if tools else "none"), None
        if isinstance(tc, str):
            if tc not in ("auto", "none", "required"):
                raise ValueError(f"tool_choice: {tc!r} is not one of auto, none, required or a named function")
            if tc != "required":
                return tc, None
            wanted = names
        else:
            fn = tc.get("function") if tc.get("type") == "function" else None
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                raise ValueError('tool_choice: a named function is {"type": "function", "function": {"name": ...}}')
            if fn["name"] not in names:
                raise ValueError(f"tool_choice: no tool named {fn['name']!r} among tools "
                                 f"({', '.join(names) or 'none offered'})")
            wanted = [fn["name"]]
        if not tools:
            raise ValueError("tool_choice: a forced tool call needs tools")
        offered = [(i, t["function"]) for i, t in enumerate(tools) if t["function"]["name"] in wanted]
        try:
            return "required", tool_call_node([(f["name"], f.get("parameters")) for _, f in offered], "tools")
        except SchemaUnsupported as e:
            raise ValueError(f"tool_choice: the forced call's arguments cannot be constrained: {e}") from e

    def choice(self) -> list[str] | None:
        """The labels of the request's choice constraint (either spelling), else None."""
        if self.structured_outputs is not None:
            return list(self.structured_outputs["choice"])
        return regex_labels(self.regex) if self.regex is not None else None

    def to_gen_request(self, index: int = 0) -> GenRequest:
        """The engine request for choice `index` (of `n`): a seeded request's choices use seed + index."""
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        return GenRequest(
            model=self.model,
            messages=[m.model_dump(exclude_none=True) for m in self.messages],
            tools=self.tools or None,
            temperature=self.temperature if self.temperature is not None else 0.0,
            top_p=self.top_p if self.top_p is not None else 1.0,
            max_tokens=self.max_tokens or self.max_completion_tokens or DEFAULT_MAX_TOKENS,
            stop=[s for s in stop if s],
            seed=self.seed + index if self.seed is not None else None,
            logprobs=self.logprobs,
            top_logprobs=self.top_logprobs or 0,
            choice=self.choice(),
            tool_choice=self._tool_choice,
            grammar=self._grammar,
        )


class LoadLoraRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)


class UnloadLoraRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    lora_name: str = Field(min_length=1)


__all__ = [
    "DEFAULT_MAX_TOKENS",
    "MAX_N",
    "REFUSED_CONSTRAINTS",
    "ChatCompletionRequest",
    "ChatMessage",
    "StreamOptions",
    "LoadLoraRequest",
    "UnloadLoraRequest",
    "response_format_grammar",
]
