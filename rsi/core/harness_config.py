"""Harness config (`harness_configs/<name>.yaml`) and its check against a contract.

A config's identity is the digest of its canonical form; a generation points at that digest.
"""

from __future__ import annotations

from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version
from pydantic import BaseModel, ConfigDict, Field, field_validator

from rsi.core.contract import Contract
from rsi.core.digest import digest_obj

EMBEDDED_ENDPOINT = "embedded"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelRef(_Strict):
    # `embedded` means the localhost server `rsi model serve` starts; otherwise an OpenAI-compatible
    # base URL such as http://127.0.0.1:8000/v1.
    endpoint: str = EMBEDDED_ENDPOINT
    api_key_env: str | None = None
    request_timeout_sec: float = Field(default=120.0, gt=0)


class FewShot(_Strict):
    role: Literal["user", "assistant"]
    content: str


class PromptSpec(_Strict):
    system: str
    instruction: str = "{{ instruction }}"
    few_shot: list[FewShot] = Field(default_factory=list)


class Sampling(_Strict):
    temperature: float = Field(default=0.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_tokens: int = Field(default=256, gt=0)
    seed: int | None = None
    stop: list[str] = Field(default_factory=list)


class LoopSpec(_Strict):
    max_turns: int = Field(default=10, gt=0)
    observation_max_chars: int = Field(default=2000, gt=0)
    history: Literal["full", "own_view"] = "full"
    finish_word: str = "DONE"


class ConfigLimits(_Strict):
    """Optional tightenings of the contract's limits; each must not exceed the contract's."""

    agent_timeout_sec: float | None = Field(default=None, gt=0)
    command_timeout_sec: float | None = Field(default=None, gt=0)
    verifier_timeout_sec: float | None = Field(default=None, gt=0)
    cpus: float | None = Field(default=None, gt=0)
    memory_mb: int | None = Field(default=None, gt=0)
    pids: int | None = Field(default=None, gt=0)
    network: bool | None = None


class HarnessConfig(_Strict):
    schema_version: int = 1
    name: str
    contract: str = ">=1.0,<2.0"
    model: ModelRef = Field(default_factory=ModelRef)
    action_format: Literal["tool_calls", "text"] = "text"
    prompt: PromptSpec
    sampling: Sampling = Field(default_factory=Sampling)
    loop: LoopSpec = Field(default_factory=LoopSpec)
    limits: ConfigLimits = Field(default_factory=ConfigLimits)
    tools: list[str] = Field(default_factory=lambda: ["bash", "submit"])
    search_space: dict[str, list[Any]] = Field(default_factory=dict)

    @field_validator("contract")
    @classmethod
    def _valid_range(cls, v: str) -> str:
        try:
            SpecifierSet(v)
        except InvalidSpecifier as e:
            raise ValueError(f"not a version range: {e}") from None
        return v

    def digest(self) -> str:
        return digest_obj(self.model_dump(mode="json"))


def contract_violations(config: HarnessConfig, contract: Contract) -> list[str]:
    """Every way `config` breaks `contract`, each naming the field and both values. Empty = ok."""
    out: list[str] = []
    if Version(contract.hcp) not in SpecifierSet(config.contract):
        out.append(f"contract: config requires HCP {config.contract} but the contract is {contract.hcp}")
    lim = contract.limits

    def ceiling(field: str, value: float | int | None, limit: float | int, what: str) -> None:
        if value is not None and value > limit:
            out.append(f"{field}: {value} loosens the contract's {what} ({limit})")

    ceiling("loop.max_turns", config.loop.max_turns, lim.max_turns, "limits.max_turns")
    ceiling("sampling.max_tokens", config.sampling.max_tokens, lim.max_tokens_per_turn, "limits.max_tokens_per_turn")
    ceiling(
        "loop.observation_max_chars",
        config.loop.observation_max_chars,
        contract.substrate.observation_max_chars,
        "substrate.observation_max_chars",
    )
    cl = config.limits
    ceiling("limits.agent_timeout_sec", cl.agent_timeout_sec, lim.agent_timeout_sec, "limits.agent_timeout_sec")
    ceiling(
        "limits.command_timeout_sec", cl.command_timeout_sec, lim.command_timeout_sec, "limits.command_timeout_sec"
    )
    ceiling(
        "limits.verifier_timeout_sec",
        cl.verifier_timeout_sec,
        lim.verifier_timeout_sec,
        "limits.verifier_timeout_sec",
    )
    ceiling("limits.cpus", cl.cpus, lim.sandbox.cpus, "limits.sandbox.cpus")
    ceiling("limits.memory_mb", cl.memory_mb, lim.sandbox.memory_mb, "limits.sandbox.memory_mb")
    ceiling("limits.pids", cl.pids, lim.sandbox.pids, "limits.sandbox.pids")
    if cl.network and not lim.sandbox.network:
        out.append("limits.network: true loosens the contract's limits.sandbox.network (false)")
    for i, tool in enumerate(config.tools):
        if tool not in contract.substrate.tools:
            known = ", ".join(contract.substrate.tools)
            out.append(f"tools[{i}]: '{tool}' is not in the contract substrate ({known})")
    if config.action_format == "text" and "bash" not in config.tools:
        out.append("tools: action_format 'text' needs the 'bash' tool")
    for key in config.search_space:
        if key.split(".")[0] not in {"prompt", "sampling", "loop", "action_format", "tools", "limits"}:
            out.append(f"search_space.{key}: not a field rsi expand may vary")
    return out
