"""Workspace settings (`rsi.yaml` at the workspace root)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from rsi.core.model import RsiModel
from rsi.core.training import TrainSettings


class SandboxSettings(RsiModel):
    model_config = ConfigDict(extra="forbid")

    provider: str = "docker"
    base_image: str | None = None  # RSI_BASE_IMAGE overrides; default rsi-base:bookworm


class ExecutorSettings(RsiModel):
    """Where trial logic runs: `local` (this process) or `ray` (one Ray task per trial on a cluster
    whose nodes declare `rsi_slot` resources; `address` as for `ray.init`, default: RAY_ADDRESS, else
    the cluster this machine joined)."""

    model_config = ConfigDict(extra="forbid")

    name: str = "local"
    address: str | None = None


class ProposerSettings(RsiModel):
    """An endpoint a proposer model is asked on: `discover.proposer` for `rsi discover --generator
    model` (tasks), `expand.proposer` for `rsi expand`'s reflective config proposals (default for
    both: the current generation's own model on its own endpoint). `model` is the served name;
    `api_key_env` names an env variable."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str = "embedded"
    model: str | None = None
    api_key_env: str | None = None
    temperature: float = Field(default=0.8, ge=0, le=2)
    max_tokens: int = Field(default=768, gt=0)


class DiscoverSettings(RsiModel):
    model_config = ConfigDict(extra="forbid")

    proposer: ProposerSettings | None = None


class ExpandSettings(RsiModel):
    model_config = ConfigDict(extra="forbid")

    proposer: ProposerSettings | None = None


class MlflowSettings(RsiModel):
    """MLflow: `tracking_uri` as for `mlflow.set_tracking_uri` (an http:// server, a sqlite:/// store, a
    file path); default: a SQLite store at .rsi/mlflow.db in the workspace, so `mlflow ui --backend-store-uri
    sqlite:///.rsi/mlflow.db` shows it. Artifacts go where the store says (a local store: .rsi/mlartifacts)."""

    model_config = ConfigDict(extra="forbid")

    tracking_uri: str | None = None
    experiment: str = "rsi"


class TensorBoardSettings(RsiModel):
    """TensorBoard: event files under `log_dir` (relative to the workspace), one directory per run."""

    model_config = ConfigDict(extra="forbid")

    log_dir: str = ".rsi/tensorboard"


class WandbSettings(RsiModel):
    """Weights & Biases: `mode` offline unless the user asks for online (then WANDB_API_KEY or `wandb login`);
    offline runs land in `dir` (relative to the workspace) for a later `wandb sync`."""

    model_config = ConfigDict(extra="forbid")

    project: str = "rsi"
    entity: str | None = None
    mode: Literal["offline", "online", "disabled"] = "offline"
    dir: str = ".rsi/wandb"


class TrackingSettings(RsiModel):
    """Where a cycle's params, per-step metrics and artifacts go besides the store (DESIGN §13): `report_to`
    names the trackers (mlflow, tensorboard, wandb; any subset); `--report-to` on a command overrides it."""

    model_config = ConfigDict(extra="forbid")

    report_to: list[str] = Field(default_factory=list)
    mlflow: MlflowSettings = Field(default_factory=MlflowSettings)
    tensorboard: TensorBoardSettings = Field(default_factory=TensorBoardSettings)
    wandb: WandbSettings = Field(default_factory=WandbSettings)


class WorkspaceSettings(RsiModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = 1
    contract: str = "contracts/hcp-1.0.yaml"
    harness_config: str = "harness_configs/default.yaml"
    base_model: str = "SmolLM2-135M-Instruct"
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    executor: ExecutorSettings = Field(default_factory=ExecutorSettings)
    discover: DiscoverSettings = Field(default_factory=DiscoverSettings)
    expand: ExpandSettings = Field(default_factory=ExpandSettings)
    train: TrainSettings = Field(default_factory=TrainSettings)
    tracking: TrackingSettings = Field(default_factory=TrackingSettings)
