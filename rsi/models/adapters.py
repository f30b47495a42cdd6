"""Generations bring their adapters: before a generation's first trial, its LoRA adapters are on the
endpoint under their serve names (vLLM's `POST /v1/load_lora_adapter`, loaded only if absent).

A missing or altered adapter file is a clear error before the job starts, never a trial outcome:
the adapter's `sha256` (of `adapter_model.safetensors`) is checked against the manifest first.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from rsi.core.errors import ConfigError
from rsi.core.generation import GenerationManifest
from rsi.models.client import ChatClient

WEIGHTS = "adapter_model.safetensors"


def adapter_dir(root: Path, path: str) -> Path:
    p = Path(path)
    return p if p.is_absolute() else root / p


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_adapter_files(gen: GenerationManifest, root: Path) -> dict[str, Path]:
    """serve name -> adapter directory, each checked by sha256. ConfigError names the generation."""
    out: dict[str, Path] = {}
    for name, ref in gen.adapters.items():
        d = adapter_dir(root, ref.path)
        weights = d / WEIGHTS
        if not (d / "adapter_config.json").is_file() or not weights.is_file():
            raise ConfigError(
                f"{gen.id}: adapter '{name}' is missing: {d} needs adapter_config.json and {WEIGHTS}"
            )
        got = file_sha256(weights)
        if got != ref.sha256:
            raise ConfigError(
                f"{gen.id}: adapter '{name}' at {weights} has sha256 {got[:12]}, the manifest says {ref.sha256[:12]}"
            )
        out[ref.serve_name] = d
    return out


def ensure_adapters(base_url: str, gens: list[GenerationManifest], root: Path) -> list[str]:
    """Load every adapter the generations name that the endpoint does not list; return those loaded."""
    wanted: dict[str, Path] = {}
    for g in gens:
        wanted.update(check_adapter_files(g, root))
    if not wanted:
        return []
    loaded: list[str] = []
    with ChatClient(base_url, max_attempts=3) as client:
        present = set(client.list_models())
        for serve_name, d in wanted.items():
            if serve_name not in present:
                client.load_adapter(serve_name, str(d.resolve()))
                loaded.append(serve_name)
    return loaded
