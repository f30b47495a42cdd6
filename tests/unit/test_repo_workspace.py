"""The repository is itself a workspace: its committed gen-0000 must match what it ships."""

from __future__ import annotations

from pathlib import Path

from rsi.core.harness_config import contract_violations
from rsi.loop.context import WorkspaceContext
from rsi.store.files import load_contract, load_harness_config, load_manifest
from rsi.store.paths import Workspace

REPO = Path(__file__).resolve().parents[2]


def test_gen0_points_at_the_shipped_default_config() -> None:
    m = load_manifest(REPO / "generations" / "gen-0000.yaml")
    cfg = load_harness_config(REPO / "harness_configs" / f"{m.harness_config.name}.yaml")
    assert m.harness_config.digest == cfg.digest(), "harness_configs/default.yaml changed: regenerate gen-0000"
    contract = load_contract(REPO / "contracts" / "hcp-1.0.yaml")
    assert m.contract == contract.hcp
    assert contract_violations(cfg, contract) == []
    assert m.adapters == {} and m.parent is None


def test_a_fresh_clone_registers_gen0_from_its_manifest(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    # the DB of a fresh clone is empty: the first command registers the committed manifests
    monkeypatch.setenv("RSI_DATABASE_URL", f"sqlite:///{tmp_path / 'clone.db'}")
    ctx = WorkspaceContext(Workspace(REPO))
    gen = ctx.generation()
    assert gen.id == "gen-0000"
    assert ctx.harness_config_for(gen).name == "default"
