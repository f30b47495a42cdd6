"""Harbor-format task specification (`task.toml`) as pydantic models.

Harbor's sections are kept (`[task]`, `[metadata]`, `[agent]`, `[verifier]`, `[environment]`);
rsi's own fields live under `[metadata.rsi]`. Unknown keys in Harbor's sections are tolerated
(so Harbor tasks load as they are); rsi's own section is strict so typos are caught.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from rsi.core.errors import InputError, first_validation_error
from rsi.core.model import RsiModel

# Harbor's spellings (public | no-network | allowlist) and rsi's older aliases (none | bridge).
NetworkMode = Literal["public", "no-network", "allowlist", "none", "bridge"]
Network = Literal["public", "no-network", "allowlist"]
_ALIASES: dict[str, Network] = {"none": "no-network", "bridge": "public"}


def _resolve(mode: str | None) -> Network | None:
    if mode is None:
        return None
    return _ALIASES.get(mode, mode)  # type: ignore[arg-type, return-value]
Split = Literal["train", "holdout"]
HoldoutPart = Literal["in_skill", "unseen"]
# The side a generated instance was drawn for: its names, data and reference come from a random stream keyed by
# it (and the cycle), so one (template, seed, level) gives other instances for train, each holdout part and a suite.
InstanceSide = Literal["train", "in_skill", "unseen", "suite"]


class _Loose(RsiModel):
    model_config = ConfigDict(extra="allow")


class RsiMetadata(RsiModel):
    """rsi's own task fields (`[metadata.rsi]`)."""

    model_config = ConfigDict(extra="forbid")

    family: str = "misc"
    template: str | None = None  # `<family>/<template>`: the unit of evaluation (DESIGN §4.1)
    difficulty: int = Field(default=1, ge=0, le=10)
    split: Split = "train"
    # which wording of the template's instruction the task uses (0-based), and how many it has: the last
    # `promotion.holdout_phrasings` wordings of a template are never trained on (the in-skill holdout's)
    phrasing: int | None = Field(default=None, ge=0)
    phrasings: int | None = Field(default=None, ge=1)
    # a holdout task's part: `in_skill` (a train template in a held-out phrasing: the superiority gate) or
    # `unseen` (a template never trained on: non-inferiority, reported as transfer); None on train tasks
    holdout_part: HoldoutPart | None = None
    # a composed task's operations: the templates it chains, in order (`text/sort`, `text/head`)
    ops: list[str] | None = None
    generator: str | None = None
    seed: int | None = None
    # the stream a generated instance was drawn from: the side the request drew for and the cycle (with generator,
    # seed and difficulty they reproduce the task byte for byte); None on tasks written before streams existed
    instance_side: InstanceSide | None = None
    instance_cycle: int | None = Field(default=None, ge=0)
    parent_task: str | None = None
    discovered_by: str | None = None
    origin: str | None = None  # where `rsi tasks import` took it from (tb1:/path, harbor:/path)


class Metadata(_Loose):
    author_name: str | None = None
    author_email: str | None = None
    difficulty: str | None = None
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    rsi: RsiMetadata = Field(default_factory=RsiMetadata)


class AgentSection(_Loose):
    timeout_sec: float = Field(default=300.0, gt=0)
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)


class VerifierSection(_Loose):
    timeout_sec: float = Field(default=120.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] = Field(default_factory=list)
    # Harbor: `shared` runs test.sh in the agent's container (integrity level 3), `separate` in a
    # fresh one. Unset (Harbor's own default is shared): the contract's `grading.verifier_mode`, so a
    # Harbor-format task is graded at the snapshot level unless it asks for `shared` by name.
    environment_mode: Literal["shared", "separate"] | None = None
    # Harbor's separate verifier environment of its own (an image/Dockerfile table): refused, see refusals().
    environment: dict[str, Any] | None = None
    # The paths the verifier reads (rsi's field). When set, the verifier starts from the pristine
    # image with only these paths copied in from the agent's container (integrity level 1).
    reads: list[str] | None = None


class SolutionSection(_Loose):
    env: dict[str, str] = Field(default_factory=dict)


class EnvironmentSection(_Loose):
    build_timeout_sec: float = Field(default=600.0, gt=0)
    docker_image: str | None = None  # rsi builds environment/Dockerfile instead (offline), and says so
    docker_image_archive: str | None = None  # likewise not loaded: the Dockerfile is built, and the trial says so
    docker_image_archive_expected_sha256: str | None = None
    os: str | None = None
    cpus: float = Field(default=1.0, gt=0)
    memory_mb: int = Field(default=1024, gt=0)
    storage_mb: int | None = None  # not enforceable on overlay2 without xfs quotas: recorded, not applied
    memory: str | None = None  # Harbor's deprecated spellings ("2G", "512M"), mapped to memory_mb / storage_mb
    storage: str | None = None
    gpus: int = Field(default=0, ge=0)
    gpu_types: list[str] | None = None
    pids: int = Field(default=256, gt=0)
    # Unset with no allow_internet: no network (rsi's safe default); the contract's ceiling rules.
    network_mode: NetworkMode | None = None
    allow_internet: bool | None = None  # Harbor's deprecated spelling: true -> public, false -> no-network
    allowed_hosts: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)  # ${VAR} / ${VAR:-default} resolved from the host
    healthcheck: dict[str, Any] | None = None
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)
    skills_dir: str | None = None
    artifacts: list[str] = Field(default_factory=list)  # copied to the trial dir after the agent phase
    workdir: str = "/app"
    # Roots added to the contract's writable allow-list, for work that must install system-wide;
    # a trial graded under a widened policy says so in its result.
    writable_roots_add: list[str] = Field(default_factory=list)
    # Paths no change may touch even under a writable root. `protected_paths` replaces the
    # contract's list; `protected_paths_add` / `protected_paths_remove` adjust it.
    protected_paths: list[str] | None = None
    protected_paths_add: list[str] = Field(default_factory=list)
    protected_paths_remove: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _deprecated_sizes(self) -> EnvironmentSection:
        if self.memory is not None:
            self.memory_mb = _size_mb(self.memory, "environment.memory")
        if self.storage is not None:
            self.storage_mb = _size_mb(self.storage, "environment.storage")
        return self


def _size_mb(text: str, field: str) -> int:
    """Harbor's deprecated size strings: a number with G, M or K."""
    t = text.strip().upper()
    scale = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}.get(t[-1:])
    try:
        if scale is None:
            raise ValueError
        return int(float(t[:-1]) * scale)
    except ValueError:
        raise ValueError(f"{field}: '{text}' is not a size like '2G' or '512M'") from None


class TaskSection(_Loose):
    name: str | None = None
    description: str | None = None
    authors: list[dict[str, Any]] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


class TaskSpec(RsiModel):
    """The parsed `task.toml` of one task."""

    model_config = ConfigDict(extra="allow")

    version: str = "1.0"
    schema_version: str | None = None  # Harbor 1.1-1.4; its presence marks a Harbor-schema task
    task: TaskSection = Field(default_factory=TaskSection)
    metadata: Metadata = Field(default_factory=Metadata)
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    solution: SolutionSection = Field(default_factory=SolutionSection)
    steps: list[dict[str, Any]] | None = None
    multi_step_reward_strategy: str | None = None  # only meaningful with [[steps]], which are refused
    source: str | None = None  # Harbor's provenance string: kept in the spec, not acted on
    # Harbor's top-level artifacts: a path, or {source, destination, exclude}; copied out after the agent.
    artifacts: list[str | dict[str, Any]] = Field(default_factory=list)

    def artifact_sources(self) -> list[str]:
        """Every artifact path to copy out: `[environment] artifacts` and the top-level list."""
        out = list(self.environment.artifacts)
        for a in self.artifacts:
            out.append(a if isinstance(a, str) else str(a.get("source", "")))
        return [p for p in out if p]

    def network(self, phase: Literal["agent", "verifier"] = "agent") -> Network:
        """The network a phase asks for: its own `network_mode`, else the environment's, else
        `allow_internet`, else none. (The contract's ceiling still decides what it gets.)"""
        env = self.environment
        own = self.agent.network_mode if phase == "agent" else self.verifier.network_mode
        for mode in (own, env.network_mode):
            if (r := _resolve(mode)) is not None:
                return r
        if env.allow_internet is not None:
            return "public" if env.allow_internet else "no-network"
        return "no-network"

    @property
    def environment_mode(self) -> Literal["shared", "separate"] | None:
        """The verifier mode the task asks for by name; None leaves it to the contract."""
        return self.verifier.environment_mode

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


_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def resolve_env(template: dict[str, str], host: Mapping[str, str]) -> dict[str, str]:
    """Harbor's env tables: `${VAR}` and `${VAR:-default}` filled from the host's environment."""
    def fill(value: str) -> str:
        return _VAR.sub(lambda m: host.get(m.group(1), m.group(2) or ""), value)

    return {k: fill(str(v)) for k, v in template.items()}


def refusals(spec: TaskSpec) -> list[tuple[str, str]]:
    """(field, why) for each Harbor field rsi cannot honour: refused, never dropped silently."""
    out: list[tuple[str, str]] = []
    env = spec.environment
    if env.os is not None and env.os.lower() != "linux":
        out.append(("environment.os", f"'{env.os}': rsi runs Linux containers only"))
    if env.gpus > 0:
        out.append(("environment.gpus", f"{env.gpus}: rsi's sandboxes get no GPUs"))
    for fld, mode, hosts in (("environment", env.network_mode, env.allowed_hosts),
                             ("agent", spec.agent.network_mode, spec.agent.allowed_hosts),
                             ("verifier", spec.verifier.network_mode, spec.verifier.allowed_hosts)):
        if mode == "allowlist" or hosts:
            out.append((f"{fld}.network_mode", "allowlist: rsi has no egress filter; use no-network or public"))
    if spec.steps:
        out.append(("steps", "multi-step tasks are not built in rsi"))
    if spec.verifier.environment is not None:
        out.append(("verifier.environment", "a verifier environment of its own is not built: rsi's separate "
                                            "verifier starts from the task's image or the agent's snapshot"))
    for i, a in enumerate(spec.artifacts):
        if isinstance(a, dict) and not a.get("source"):
            out.append((f"artifacts[{i}].source", "missing: an artifact names the path to copy out"))
        elif isinstance(a, dict) and (a.get("destination") or a.get("exclude")):
            key = "destination" if a.get("destination") else "exclude"
            out.append((f"artifacts[{i}].{key}", "rsi copies an artifact to artifacts/ as it is (no renaming "
                                                 "or exclude patterns)"))
    if env.mcp_servers:
        out.append(("environment.mcp_servers", "rsi does not provide MCP servers to agents"))
    if env.healthcheck is not None:
        out.append(("environment.healthcheck", "rsi does not run healthchecks before the agent starts"))
    if env.skills_dir is not None:
        out.append(("environment.skills_dir", "rsi does not install agent skills"))
    for fld, user in (("agent.user", spec.agent.user), ("verifier.user", spec.verifier.user)):
        if user not in (None, "root", 0, "0"):
            out.append((fld, f"'{user}': rsi runs agent and verifier commands as the image's default user"))
    return out


def parse_task_toml(text: str, file: str) -> TaskSpec:
    """Parse `task.toml` text; errors name the file and the field (refusals included)."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(file, None, f"invalid TOML: {e}") from None
    try:
        spec = TaskSpec.model_validate(raw)
    except ValidationError as e:
        raise first_validation_error(file, e) from None
    refused = refusals(spec)
    if refused:
        field, why = refused[0]
        raise InputError(file, field, f"cannot be honoured: {why}")
    return spec


REQUIRED_FILES = ("instruction.md", "task.toml", "environment/Dockerfile", "tests/test.sh")


class Task(RsiModel):
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
