"""`rsi demo --mol` settings: the workspace's config gets the mol section, gen-0000 is re-registered under it
(the store and the manifest agree), so `rsi update` makes a mixture candidate."""

from __future__ import annotations

from pathlib import Path

import yaml

from rsi.loop.context import WorkspaceContext
from rsi.loop.cycle.demo import DEMO_FAMILIES, DEMO_MOL_DOMAINS, demo_mol_settings
from rsi.loop.init import init_workspace


def test_demo_mol_settings_register_the_mixture_config(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    init_workspace(root, starter_tasks=False)
    digest = demo_mol_settings(root)
    ctx = WorkspaceContext.open(root)
    try:
        g0 = ctx.generation("gen-0000")
        assert g0.harness_config.digest == digest and not g0.is_mol
        cfg = ctx.harness_config_for(g0)
        assert cfg.mol is not None and cfg.mol.domains == DEMO_MOL_DOMAINS and cfg.mol.route_legend
        assert cfg.mol.check_families(DEMO_FAMILIES) == []
        on_disk = yaml.safe_load((root / "generations" / "gen-0000.yaml").read_text())
        assert on_disk["harness_config"]["digest"] == digest
    finally:
        ctx.store.close()
