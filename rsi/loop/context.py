"""Opening a workspace: settings, contract, store, generations and harness configs in one place."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from rsi.core.contract import Contract
from rsi.core.errors import ConfigError, InputError, NotFoundError
from rsi.core.generation import GenerationManifest
from rsi.core.harness_config import HarnessConfig, contract_violations
from rsi.core.workspace import WorkspaceSettings
from rsi.store.files import load_contract, load_harness_config
from rsi.store.repo import Store
from rsi.store.workspace import Workspace


@dataclass
class WorkspaceContext:
    ws: Workspace

    @classmethod
    def open(cls, root: Path | None = None) -> WorkspaceContext:
        ws = Workspace.locate(root)
        if not ws.exists():
            raise NotFoundError(f"{ws.root} is not an rsi workspace (no rsi.yaml); run `rsi init {ws.root}`")
        return cls(ws)

    @cached_property
    def settings(self) -> WorkspaceSettings:
        return self.ws.settings()

    @cached_property
    def contract_path(self) -> Path:
        return self.ws.resolve(self.settings.contract)

    @cached_property
    def contract(self) -> Contract:
        return load_contract(self.contract_path)

    @cached_property
    def store(self) -> Store:
        store = Store.for_path(self.ws.db_path)
        if not store.list_generations():
            from rsi.loop.workspace import sync_generations

            self.__dict__["store"] = store  # sync_generations reads ctx.store
            sync_generations(self)
        return store

    def generation(self, gen_id: str | None = None) -> GenerationManifest:
        return self.store.get_generation(gen_id) if gen_id else self.store.current_generation()

    def harness_config_path(self, name: str) -> Path:
        return self.ws.harness_configs_dir / f"{name}.yaml"

    def harness_config_for(self, gen: GenerationManifest) -> HarnessConfig:
        """The generation's harness config, checked against its digest and the contract."""
        path = self.harness_config_path(gen.harness_config.name)
        cfg = load_harness_config(path)
        if cfg.digest() != gen.harness_config.digest:
            raise ConfigError(
                f"{path}: digest {cfg.digest()[:12]} differs from {gen.id}'s harness config "
                f"{gen.harness_config.digest[:12]}; restore the file or register a new generation"
            )
        check_config(cfg, self.contract, path)
        return cfg


def check_config(cfg: HarnessConfig, contract: Contract, path: Path) -> None:
    problems = contract_violations(cfg, contract)
    if problems:
        field, _, msg = problems[0].partition(": ")
        raise InputError(str(path), field, msg)
