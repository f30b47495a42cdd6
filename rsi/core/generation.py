"""Generation manifest (`generations/gen-NNNN.yaml`): one model-harness pair under a contract."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class GenerationState(StrEnum):
    CANDIDATE = "candidate"
    PROMOTED = "promoted"
    SUPERSEDED = "superseded"
    REJECTED = "rejected"


class AdapterRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    sha256: str
    serve_name: str


class BaseModelRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    digest: str | None = None


class HarnessRef(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    digest: str


class Provenance(BaseModel):
    model_config = ConfigDict(extra="forbid")

    discover_jobs: list[str] = Field(default_factory=list)
    expand_jobs: list[str] = Field(default_factory=list)
    training_run: str | None = None
    dataset_digest: str | None = None
    # `rsi update`: backend, objective, hyper-parameters, steps, loss curve summary, dataset counts.
    training: dict[str, Any] | None = None


class GenerationManifest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    id: str
    parent: str | None = None
    state: GenerationState = GenerationState.CANDIDATE
    contract: str
    base_model: BaseModelRef
    adapters: dict[str, AdapterRef] = Field(default_factory=dict)
    harness_config: HarnessRef
    provenance: Provenance = Field(default_factory=Provenance)
    metrics: dict[str, float] = Field(default_factory=dict)

    def serve_name(self) -> str:
        """The `model` a request names: the first adapter's serve name, else the base model id."""
        for ref in self.adapters.values():
            return ref.serve_name
        return self.base_model.id


def generation_id(n: int) -> str:
    return f"gen-{n:04d}"
