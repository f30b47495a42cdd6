"""Generation manifest (`generations/gen-NNNN.yaml`): one model-harness pair under a contract."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer, model_validator

from rsi.core.model import RsiModel
from rsi.core.mol import ROUTER, domain_problems, label_index


class GenerationState(StrEnum):
    CANDIDATE = "candidate"
    PROMOTED = "promoted"
    SUPERSEDED = "superseded"
    REJECTED = "rejected"


class AdapterRef(RsiModel):
    """One adapter revision. `role` and `domains` are set in a Mixture-of-LoRA generation (label -> the
    task families it serves) and left out of the written form otherwise, so a one-adapter manifest
    reads and writes exactly as before."""

    model_config = ConfigDict(extra="forbid")

    path: str
    sha256: str
    serve_name: str
    role: str | None = None
    domains: list[str] | None = None

    @model_serializer(mode="wrap")
    def _drop_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in ("role", "domains"):
            if data.get(key) is None:
                data.pop(key, None)
        return data


class BaseModelRef(RsiModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    digest: str | None = None


class HarnessRef(RsiModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    digest: str


class Provenance(RsiModel):
    model_config = ConfigDict(extra="forbid")

    discover_jobs: list[str] = Field(default_factory=list)
    expand_jobs: list[str] = Field(default_factory=list)
    training_run: str | None = None
    dataset_digest: str | None = None
    # `rsi update`: backend, objective, hyper-parameters, steps, loss curve summary, dataset counts.
    training: dict[str, Any] | None = None


class GenerationManifest(RsiModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = Field(default=1, ge=1, le=2)  # 2: written with MoL adapters
    id: str
    parent: str | None = None
    state: GenerationState = GenerationState.CANDIDATE
    contract: str
    base_model: BaseModelRef
    adapters: dict[str, AdapterRef] = Field(default_factory=dict)
    harness_config: HarnessRef
    provenance: Provenance = Field(default_factory=Provenance)
    metrics: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _mol_shape(self) -> GenerationManifest:
        if not self.is_mol:
            return self
        problems = domain_problems({k: v.domains or [] for k, v in self.adapters.items()})
        names = [a.serve_name for a in self.adapters.values()]
        if len(set(names)) != len(names):
            problems.append("adapters: two adapters share a serve name")
        if problems:
            raise ValueError("; ".join(problems))
        self.adapters = {k: self.adapters[k] for k in sorted(self.adapters, key=label_index)}
        return self

    @property
    def is_mol(self) -> bool:
        """A Mixture-of-LoRA generation: its adapters declare the domains they serve."""
        return any(ref.domains is not None for ref in self.adapters.values())

    def mol_domains(self) -> dict[str, list[str]]:
        """label -> families, L0 first (empty for a one-adapter generation)."""
        return {k: list(v.domains or []) for k, v in self.adapters.items()} if self.is_mol else {}

    def serve_name(self, label: str | None = None) -> str:
        """The `model` a request names: the adapter `label`'s serve name; without a label the router's
        (MoL) or the first adapter's; the base model id when the generation has no adapter."""
        if label is not None:
            return self.adapters[label].serve_name
        if self.is_mol and ROUTER in self.adapters:
            return self.adapters[ROUTER].serve_name
        for ref in self.adapters.values():
            return ref.serve_name
        return self.base_model.id


def generation_id(n: int) -> str:
    return f"gen-{n:04d}"
