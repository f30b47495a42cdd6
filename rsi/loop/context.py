"""Opening a workspace: settings, contract, store, generations and harness configs in one place."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from rsi.core.contract import Contract
from rsi.core.errors import ConfigError, InputError, NotFoundError
from rsi.core.generation import GenerationManifest
from rsi.core.harness_config import HarnessConfig, contract_violations
from rsi.core.settings import WorkspaceSettings
from rsi.store.files import load_contract, load_harness_config, load_manifest
from rsi.store.paths import Workspace

if TYPE_CHECKING:
    from rsi.store.queries_diff import DiffQueries
    from rsi.store.repo import Store


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
        # imported here: SQLAlchemy and the tables cost ~0.7 s, which a report reading through `reader` never pays
        from rsi.store.repo import Store

        store = Store.for_path(self.ws.db_path)
        if not store.list_generations():
            sync_generations(store, self.ws)
        return store

    @cached_property
    def reader(self) -> DiffQueries:
        """What reports read (rsi.store.queries_diff): the store when it is open, else a plain read-only SQLite
        connection when the database is a SQLite file at this rsi's schema (rsi.store.lite), else the store."""
        if "store" not in self.__dict__:
            from rsi.store.lite import open_lite

            lite = open_lite(self.ws.db_path)
            if lite is not None:
                return lite
        return self.store

    def generation(self, gen_id: str | None = None) -> GenerationManifest:
        return self.store.get_generation(gen_id) if gen_id else self.store.current_generation()

    def harness_config_path(self, name: str) -> Path:
        return self.ws.harness_configs_dir / f"{name}.yaml"

    def register_config(
        self, cfg: HarnessConfig, *, origin: str = "file", source: str | None = None, parent: str | None = None
    ) -> str:
        """Store `cfg` by digest (idempotent) so it can be shown and run again after files change."""
        digest = cfg.digest()
        self.store.put_config(digest, cfg.name, cfg.canonical_yaml(), parent_digest=parent,
                              origin=origin, source=source)  # type: ignore[arg-type]
        return digest

    def config_by_digest(self, digest: str) -> HarnessConfig:
        """A harness config by digest: from the store, else from a file under harness_configs/ that
        has that digest (a fresh clone), which is then stored."""
        try:
            row = self.store.get_config(digest)
        except NotFoundError:
            row = None
        if row is not None:
            return HarnessConfig.model_validate(yaml.safe_load(row.canonical_yaml))
        for path in sorted(self.ws.harness_configs_dir.glob("*.yaml")):
            try:
                cfg = load_harness_config(path)
            except InputError:
                continue
            if cfg.digest() == digest:
                self.register_config(cfg, source=str(path))
                return cfg
        raise ConfigError(
            f"harness config {digest[:12]} is not in the store and no file under "
            f"{self.ws.harness_configs_dir} has that digest"
        )

    def harness_config_for(self, gen: GenerationManifest) -> HarnessConfig:
        """The generation's harness config by its digest (never by file name), checked against the contract."""
        cfg = self.config_by_digest(gen.harness_config.digest)
        check_config(cfg, self.contract, Path(f"config {gen.harness_config.digest[:12]} of {gen.id}"))
        return cfg


def sync_generations(store: Store, ws: Workspace) -> int:
    """Register manifests under generations/ that the database lacks (a fresh clone of a workspace)."""
    known = {g.id for g in store.list_generations()}
    added = 0
    if ws.generations_dir.is_dir():
        for p in sorted(ws.generations_dir.glob("gen-*.yaml")):
            m = load_manifest(p)
            if m.id not in known:
                store.put_generation(m)
                added += 1
    return added


def check_config(cfg: HarnessConfig, contract: Contract, path: Path) -> None:
    problems = contract_violations(cfg, contract)
    if problems:
        field, _, msg = problems[0].partition(": ")
        raise InputError(str(path), field, msg)
