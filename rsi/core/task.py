"""Harbor-format task specification (`task.toml`) as pydantic models.

Harbor's sections are kept (`[task]`, `[metadata]`, `[agent]`, `[verifier]`, `[environment]`);
rsi's own fields live under `[metadata.rsi]`. Unknown keys in Harbor's sections are tolerated
(so Harbor tasks load as they are); rsi's own section is strict so typos are caught.
"""

from __future__ import annotations

import tomllib
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rsi.core.errors import InputError, first_validation_error

NetworkMode = Literal["none", "bridge"]
Split = Literal["train", "holdout"]


class _Loose(BaseModel):
    model_config = ConfigDict(extra="allow")


class RsiMetadata(BaseModel):
    """rsi's own task fields (`[metadata.rsi]`)."""

    model_config = ConfigDict(extra="forbid")

    family: str = "misc"
    difficulty: int = Field(default=1, ge=0, le=10)
    split: Split = "train"
    generator: str | None = None
    seed: int | None = None
    parent_task: str | None = None
    discovered_by: str | None = None


class Metadata(_Loose):
    author_name: str | None = None
    author_email: str | None = None
    difficulty: str | None = None
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    rsi: RsiMetadata = Field(default_factory=RsiMetadata)


class AgentSection(_Loose):
    timeout_sec: float = Field(default=300.0, gt=0)


class VerifierSection(_Loose):
    timeout_sec: float = Field(default=120.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    # The paths the verifier reads (rsi's field). When set, the verifier starts from the pristine
    # image with only these paths copied in from the agent's container (integrity level 1).
    reads: list[str] | None = None


class EnvironmentSection(_Loose):
    build_timeout_sec: float = Field(default=600.0, gt=0)
    cpus: float = Field(default=1.0, gt=0)
    memory_mb: int = Field(default=1024, gt=0)
    storage_mb: int | None = None
    pids: int = Field(default=256, gt=0)
    network_mode: NetworkMode = "none"
    workdir: str = "/app"
    # Roots added to the contract's writable allow-list, for work that must install system-wide;
    # a trial graded under a widened policy says so in its result.
    writable_roots_add: list[str] = Field(default_factory=list)
    # Paths no change may touch even under a writable root. `protected_paths` replaces the
    # contract's list; `protected_paths_add` / `protected_paths_remove` adjust it.
    protected_paths: list[str] | None = None
    protected_paths_add: list[str] = Field(default_factory=list)
    protected_paths_remove: list[str] = Field(default_factory=list)


class TaskSection(_Loose):
    name: str | None = None
    description: str | None = None


class TaskSpec(BaseModel):
    """The parsed `task.toml` of one task."""

    model_config = ConfigDict(extra="allow")

    version: str = "1.0"
    task: TaskSection = Field(default_factory=TaskSection)
    metadata: Metadata = Field(default_factory=Metadata)
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)

    @property
    def family(self) -> str:
        return self.metadata.rsi.family

    @property
    def split(self) -> Split:
        return self.metadata.rsi.split

    def protected_paths(self, contract_default: list[str]) -> list[str]:
        """The protected paths for this task: the contract's default, narrowed or widened."""
        env = self.environment
        base = list(env.protected_paths) if env.protected_paths is not None else list(contract_default)
        base += [p for p in env.protected_paths_add if p not in base]
        return [p for p in base if p not in env.protected_paths_remove]


def parse_task_toml(text: str, file: str) -> TaskSpec:
    """Parse `task.toml` text; errors name the file and the field."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(file, None, f"invalid TOML: {e}") from None
    try:
        return TaskSpec.model_validate(raw)
    except ValidationError as e:
        raise first_validation_error(file, e) from None


REQUIRED_FILES = ("instruction.md", "task.toml", "environment/Dockerfile", "tests/test.sh")


class Task(BaseModel):
    """A loaded task: its name, where it lives, its spec, instruction and content digest."""

    name: str
    path: str
    spec: TaskSpec
    instruction: str
    digest: str
    env_digest: str
    has_solution: bool

    @property
    def family(self) -> str:
        return self.spec.family

    @property
    def split(self) -> Split:
        return self.spec.split
