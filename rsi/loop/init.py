"""`rsi init`: make a workspace and register gen-0000 (base model, no adapter, default config)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import yaml

from rsi.core.errors import InputError
from rsi.core.generation import BaseModelRef, GenerationManifest, GenerationState, HarnessRef, generation_id
from rsi.core.settings import WorkspaceSettings
from rsi.loop.context import WorkspaceContext, check_config, sync_generations
from rsi.store.bundled import bundled_contract, bundled_harness_configs, bundled_suites, bundled_tasks
from rsi.store.files import load_harness_config, load_manifest, write_atomic, write_yaml_model
from rsi.store.paths import SETTINGS_FILE, Workspace


def base_model_digest() -> str | None:
    """sha256 of the bundled SmolLM2 GGUF, if the model package is installed."""
    try:
        from rsi.models.embedded import find_default_gguf

        path = find_default_gguf()
    except Exception:  # noqa: BLE001 - the model extra is optional for init
        return None
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def gen0_manifest(ctx: WorkspaceContext) -> GenerationManifest:
    settings = ctx.settings
    cfg_path = ctx.ws.resolve(settings.harness_config)
    cfg = load_harness_config(cfg_path)
    check_config(cfg, ctx.contract, cfg_path)
    return GenerationManifest(
        id=generation_id(0),
        parent=None,
        state=GenerationState.PROMOTED,
        contract=ctx.contract.hcp,
        base_model=BaseModelRef(id=settings.base_model, digest=base_model_digest()),
        adapters={},
        harness_config=HarnessRef(name=cfg.name, digest=cfg.digest()),
    )


def init_workspace(root: Path, *, starter_tasks: bool = True, harness: str | None = None) -> GenerationManifest:
    """Create the workspace layout at `root` (idempotent) and register gen-0000.

    `harness` names the harness config gen-0000 pairs with (`harness_configs/<name>.yaml`, e.g. `mini-swe`, an
    external agent); written to rsi.yaml. A workspace that already has rsi.yaml keeps its own."""
    root = root.resolve()
    if root.exists() and not root.is_dir():
        raise InputError(str(root), None, "exists and is not a directory")
    ws = Workspace(root)
    for d in (ws.contracts_dir, ws.harness_configs_dir, ws.tasks_dir, ws.generations_dir, ws.state_dir):
        d.mkdir(parents=True, exist_ok=True)
    contract = ws.contracts_dir / bundled_contract().name
    if not contract.exists():
        shutil.copy2(bundled_contract(), contract)
    for src in sorted(bundled_harness_configs().iterdir()):
        if src.is_file() and not (ws.harness_configs_dir / src.name).exists():
            shutil.copy2(src, ws.harness_configs_dir / src.name)
    if starter_tasks and not any(ws.tasks_dir.iterdir()) and bundled_tasks().resolve() != ws.tasks_dir:
        for t in sorted(bundled_tasks().iterdir()):
            if (t / "task.toml").is_file():
                shutil.copytree(t, ws.tasks_dir / t.name, ignore=shutil.ignore_patterns("__pycache__"))
    suites = bundled_suites()
    for suite in sorted(suites.iterdir()) if suites.is_dir() else []:
        dest = root / "suites" / suite.name
        if suite.is_dir() and not dest.exists() and suite.resolve() != dest:
            shutil.copytree(suite, dest, ignore=shutil.ignore_patterns("__pycache__"))
    if not ws.settings_path.exists():
        settings = WorkspaceSettings()
        if harness is not None:
            rel = f"harness_configs/{harness}.yaml"
            if not (root / rel).is_file():
                known = ", ".join(sorted(p.stem for p in ws.harness_configs_dir.glob("*.yaml")))
                raise InputError("--harness", None, f"no harness config {root / rel} (known: {known})")
            settings = WorkspaceSettings(harness_config=rel)
        write_atomic(ws.settings_path, yaml.safe_dump(settings.model_dump(mode="json"), sort_keys=False))
    elif harness is not None and ws.resolve(WorkspaceContext(ws).settings.harness_config) != \
            (root / f"harness_configs/{harness}.yaml"):
        raise InputError(str(ws.settings_path), "harness_config",
                         f"the workspace already pairs gen-0000 with another harness config; not {harness}")
    ctx = WorkspaceContext(ws)
    sync_generations(ctx.store, ws)
    manifest_path = ws.generations_dir / f"{generation_id(0)}.yaml"
    if manifest_path.exists():
        return load_manifest(manifest_path)
    m = gen0_manifest(ctx)
    write_yaml_model(manifest_path, m)
    ctx.store.put_generation(m)
    ctx.register_config(load_harness_config(ctx.ws.resolve(ctx.settings.harness_config)),
                        source=str(ctx.ws.resolve(ctx.settings.harness_config)))
    return m


__all__ = ["init_workspace", "sync_generations", "SETTINGS_FILE"]
