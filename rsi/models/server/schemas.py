"""Pydantic models of the API subset the embedded server speaks (OpenAI / vLLM chat completions, vLLM's
LoRA routes), and their conversion to engine requests. Unknown fields are accepted and ignored, as
vLLM does, so a harness config written for vLLM works here unchanged."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rsi.models.server.decode import GenRequest

DEFAULT_MAX_TOKENS = 256


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
