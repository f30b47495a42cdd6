"""Workspace settings (`rsi.yaml` at the workspace root)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SandboxSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    provider: str = "docker"
    base_image: str | None = None  # RSI_BASE_IMAGE overrides; default rsi-base:bookworm


class WorkspaceSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    contract: str = "contracts/hcp-1.0.yaml"
    harness_config: str = "harness_configs/default.yaml"
    base_model: str = "SmolLM2-135M-Instruct"
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
