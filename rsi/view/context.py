"""The workspace as the viewer opens it: read-only store, contract, generations and configs.

It offers what `rsi.report.diff.build_diff` reads from a workspace context (`ws`, `reader`, `contract`,
`config_by_digest`) without anything that writes: a config that is not in the store is
read from its file, never registered.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import yaml

from rsi.core.contract import Contract
from rsi.core.errors import ConfigError, InputError, NotFoundError
from rsi.core.generation import GenerationManifest
from rsi.core.harness_config import HarnessConfig
from rsi.store.files import load_contract, load_harness_config
from rsi.store.paths import Workspace
from rsi.store.readonly import ReadOnlyStore


@dataclass
class ViewContext:
    ws: Workspace
    store: ReadOnlyStore

    @classmethod
    def open(cls, root: Path | None = None) -> ViewContext:
        ws = Workspace.locate(root)
        if not ws.exists():
            raise NotFoundError(f"{ws.root} is not an rsi workspace (no rsi.yaml); run `rsi init {ws.root}`")
        return cls(ws, ReadOnlyStore.for_workspace_db(ws.db_path))

    @property
    def reader(self) -> ReadOnlyStore:
        """What reports read (rsi.store.queries_diff): the read-only store itself."""
        return self.store

    @cached_property
    def contract(self) -> Contract:
        return load_contract(self.ws.resolve(self.ws.settings().contract))

    def generation(self, gen_id: str | None = None) -> GenerationManifest:
        return self.store.get_generation(gen_id) if gen_id else self.store.current_generation()

    def config_by_digest(self, digest: str) -> HarnessConfig:
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
                return cfg
        raise ConfigError(f"harness config {digest[:12]} is not in the store and no file has that digest")

    def close(self) -> None:
        self.store.close()
