"""The one seam for paths: a workspace root and everything under it.

The root is, in order: an explicit path (`--workspace`), `RSI_HOME`, the nearest directory
upwards from the cwd holding `rsi.yaml`, else the cwd. Tests point `RSI_HOME` at `tmp_path`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from rsi.core.errors import InputError, first_validation_error
from rsi.core.settings import WorkspaceSettings

SETTINGS_FILE = "rsi.yaml"


def find_root(explicit: Path | None = None) -> Path:
    if explicit is not None:
        return explicit.resolve()
    env = os.environ.get("RSI_HOME")
    if env:
        return Path(env).resolve()
    here = Path.cwd().resolve()
    for d in (here, *here.parents):
        if (d / SETTINGS_FILE).is_file():
            return d
    return here


def cache_dir() -> Path:
    """rsi's cache root: `RSI_CACHE_DIR`, else `$XDG_CACHE_HOME/rsi`, else `~/.cache/rsi`."""
    if os.environ.get("RSI_CACHE_DIR"):
        return Path(os.environ["RSI_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "rsi"


@dataclass(frozen=True)
class Workspace:
    root: Path

    @classmethod
    def locate(cls, explicit: Path | None = None) -> Workspace:
        return cls(find_root(explicit))

    @property
    def settings_path(self) -> Path:
        return self.root / SETTINGS_FILE

    @property
    def contracts_dir(self) -> Path:
        return self.root / "contracts"

    @property
    def harness_configs_dir(self) -> Path:
        return self.root / "harness_configs"

    @property
    def tasks_dir(self) -> Path:
        return self.root / "tasks"

    @property
    def generations_dir(self) -> Path:
        return self.root / "generations"

    @property
    def state_dir(self) -> Path:
        return self.root / ".rsi"

    @property
    def db_path(self) -> Path:
        return self.state_dir / "rsi.db"

    @property
    def jobs_dir(self) -> Path:
        return self.state_dir / "jobs"

    @property
    def logs_dir(self) -> Path:
        return self.state_dir / "logs"

    def job_dir(self, job_id: str) -> Path:
        return self.jobs_dir / job_id

    def exists(self) -> bool:
        return self.settings_path.is_file()

    def settings(self) -> WorkspaceSettings:
        if not self.settings_path.is_file():
            return WorkspaceSettings()
        try:
            raw = yaml.safe_load(self.settings_path.read_text()) or {}
        except yaml.YAMLError as e:
            raise InputError(str(self.settings_path), None, f"invalid YAML: {e}") from None
        try:
            return WorkspaceSettings.model_validate(raw)
        except ValidationError as e:
            raise first_validation_error(str(self.settings_path), e) from None

    def resolve(self, rel: str) -> Path:
        p = Path(rel)
        return p if p.is_absolute() else self.root / p
