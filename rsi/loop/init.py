"""`rsi init`: make a workspace and register gen-0000 (base model, no adapter, default config)."""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from rsi.core.errors import InputError
from rsi.core.generation import BaseModelRef, GenerationManifest, GenerationState, HarnessRef, generation_id
from rsi.core.harness_config import check_endpoint
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
    # the bundled GGUF's digest names the embedded model only; another model's weights are not here to hash
    digest = base_model_digest() if settings.base_model == WorkspaceSettings().base_model else None
    return GenerationManifest(
        id=generation_id(0),
        parent=None,
        state=GenerationState.PROMOTED,
        contract=ctx.contract.hcp,
        base_model=BaseModelRef(id=settings.base_model, digest=digest),
        adapters={},
        harness_config=HarnessRef(name=cfg.name, digest=cfg.digest()),
    )


@dataclass(frozen=True)
class OwnModel:
    """`rsi init --model NAME --endpoint URL [--api-key-env VAR]`: gen-0000 is NAME served at URL (any
    OpenAI-compatible server: vLLM, SGLang, a hosted API) rather than the embedded SmolLM2."""

    endpoint: str
    model: str | None = None
    api_key_env: str | None = None

    @staticmethod
    def of(model: str | None, endpoint: str | None, api_key_env: str | None) -> OwnModel | None:
        """Checked options (an InputError names the one at fault); None when none was given."""
        if endpoint is None:
            for opt, v in (("--model", model), ("--api-key-env", api_key_env)):
                if v is not None:
                    raise InputError(opt, None, "needs --endpoint URL (the embedded endpoint serves "
                                                f"{WorkspaceSettings().base_model} only)")
            return None
        try:
            endpoint = check_endpoint(endpoint)
        except ValueError as e:
            raise InputError("--endpoint", None, str(e)) from None
        if model is not None and not model.strip():
            raise InputError("--model", None, "must name the model the endpoint serves")
        if api_key_env is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", api_key_env):
            raise InputError("--api-key-env", None, f"'{api_key_env}' is not an environment variable name")
        return OwnModel(endpoint, model.strip() if model else None, api_key_env)


def _point_config_at(path: Path, own: OwnModel) -> None:
    """Set the harness config's `model.endpoint` (and `api_key_env`) in place, keeping its comments."""
    text = path.read_text()
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.rstrip() == "model:"), None)
    edited = None
    if start is not None:
        end = next((i for i in range(start + 1, len(lines)) if lines[i] and not lines[i][0].isspace()), len(lines))
        block = [ln for ln in lines[start + 1:end]
                 if not re.match(r"\s+(endpoint|api_key_env):", ln)]
        indent = next((m.group(1) for ln in block if (m := re.match(r"(\s+)\S", ln))), "  ")
        new = [f"{indent}endpoint: {own.endpoint}"] + ([f"{indent}api_key_env: {own.api_key_env}"]
                                                       if own.api_key_env else [])
        edited = "\n".join(lines[:start + 1] + new + block + lines[end:]) + "\n"
    data = yaml.safe_load(text) or {}
    want = {**(data.get("model") or {}), "endpoint": own.endpoint}
    if own.api_key_env:
        want["api_key_env"] = own.api_key_env
    if edited is None or (yaml.safe_load(edited) or {}).get("model") != want:  # no plain block: rewrite it whole
        edited = yaml.safe_dump({**data, "model": want}, sort_keys=False)
    write_atomic(path, edited)


def init_workspace(root: Path, *, starter_tasks: bool = True, harness: str | None = None,
                   own_model: OwnModel | None = None) -> GenerationManifest:
    """Create the workspace layout at `root` (idempotent) and register gen-0000.

    `harness` names the harness config gen-0000 pairs with (`harness_configs/<name>.yaml`, e.g. `mini-swe`, an
    external agent); written to rsi.yaml. A workspace that already has rsi.yaml keeps its own. `own_model`
    points that config at an OpenAI-compatible endpoint and names the base model it serves."""
    root = root.resolve()
    if root.exists() and not root.is_dir():
        raise InputError(str(root), None, "exists and is not a directory")
    ws = Workspace(root)
    if own_model is not None and ws.settings_path.exists():
        raise InputError(str(ws.settings_path), "harness_config", "this workspace exists already; point it at "
                         "another endpoint by editing its harness config's model.endpoint")
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
        if own_model is not None:
            _point_config_at(ws.resolve(settings.harness_config), own_model)
            if own_model.model:
                settings = settings.model_copy(update={"base_model": own_model.model})
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


__all__ = ["OwnModel", "init_workspace", "sync_generations", "SETTINGS_FILE"]
