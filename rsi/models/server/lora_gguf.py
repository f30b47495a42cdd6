"""A PEFT LoRA directory as a llama.cpp LoRA adapter (GGUF), for the llama engine.

llama.cpp serves LoRA adapters from GGUF files whose tensors are named after the base model's own
GGUF tensors (`blk.3.attn_q.weight.lora_a`). PEFT saves them under the transformers module names
(`...layers.3.self_attn.q_proj.lora_A.weight`). This module maps one to the other and writes the file
with the `gguf` package (already a dependency of transformers' GGUF loading), once per adapter: the
file is cached under the adapter's weights' sha256, and that digest is what the engine reports as
served.

Two details make the converted adapter compute what PEFT computes:

- llama.cpp's GGUF conversion of a Llama model permutes the rows of `attn_q` and `attn_k` (its rotary
  layout differs from transformers'); the transformers copy the trainer uses was permuted back when it
  was read. A LoRA adds B·A to those weights, so B's rows take the same permutation (A, on the input
  side, does not change).
- llama.cpp scales an adapter by alpha / rank; PEFT's rsLoRA by alpha / sqrt(rank). The alpha written
  is the one that gives PEFT's scale.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from rsi.models.server.jobs import EngineError

# transformers Llama module -> llama.cpp tensor (per block)
_MODULES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_KEY = re.compile(r"(?:^|\.)layers\.(\d+)\.([a-z_]+\.[a-z_]+)\.lora_([AB])(?:\.[A-Za-z0-9_]+)?\.weight$")
FORMAT_VERSION = 1  # bump when the written file would differ for the same adapter
KEEP = 64  # converted adapters kept in the cache (least recently served go first)


def _permute_rows(w: Any, heads: int) -> Any:
    """llama.cpp's row order for a Llama q/k projection with `heads` heads (rows = heads * head_dim)."""
    rows = w.shape[0]
    return w.reshape(heads, 2, rows // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _check_config(adapter_dir: Path) -> dict[str, Any]:
    cfg_path = adapter_dir / "adapter_config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError) as e:
        raise EngineError(f"{cfg_path}: cannot read the adapter config: {e}") from e
    if str(cfg.get("peft_type", "LORA")).upper() != "LORA":
        raise EngineError(f"{cfg_path}: peft_type {cfg.get('peft_type')} is not LORA")
    for field in ("use_dora", "modules_to_save", "fan_in_fan_out", "rank_pattern", "alpha_pattern"):
        if cfg.get(field):
            raise EngineError(f"{cfg_path}: {field} is set; the llama engine serves plain LoRA only "
                              "(serve it with --engine torch)")
    return dict(cfg)


def convert_peft_adapter(adapter_dir: Path, model_config: dict[str, Any], cache: Path) -> tuple[Path, str]:
    """(`gguf path`, `sha256 of the PEFT weights`) for the LoRA at `adapter_dir`, converting once."""
    cfg = _check_config(adapter_dir)
    weights = adapter_dir / "adapter_model.safetensors"
    if not weights.is_file():
        raise EngineError(f"{adapter_dir}: no adapter_model.safetensors (the llama engine reads safetensors only)")
    with weights.open("rb") as f:
        sha = hashlib.file_digest(f, "sha256").hexdigest()
    target = cache / f"{sha[:24]}-v{FORMAT_VERSION}.gguf"
    if target.is_file():
        os.utime(target)  # recently served: the last to be pruned
        return target, sha
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    rank = int(cfg.get("r") or 0)
    alpha = float(cfg.get("lora_alpha") or rank)
    if rank <= 0:
        raise EngineError(f"{adapter_dir / 'adapter_config.json'}: r must be a positive rank")
    if cfg.get("use_rslora"):
        alpha = alpha * math.sqrt(rank)  # llama.cpp's alpha / r equals PEFT's alpha / sqrt(r)
    heads = int(model_config["num_attention_heads"])
    kv_heads = int(model_config.get("num_key_value_heads") or heads)
    tensors: dict[str, Any] = {}
    for key, value in load_file(str(weights)).items():
        m = _KEY.search(key)
        if m is None or m.group(2) not in _MODULES:
            raise EngineError(f"{weights}: tensor {key} is not a LoRA on a Llama projection the llama engine maps")
        block, module, side = int(m.group(1)), m.group(2), m.group(3)
        w = np.ascontiguousarray(value.astype(np.float32))
        if side == "B" and module == "self_attn.q_proj":
            w = np.ascontiguousarray(_permute_rows(w, heads))
        elif side == "B" and module == "self_attn.k_proj":
            w = np.ascontiguousarray(_permute_rows(w, kv_heads))
        tensors[f"blk.{block}.{_MODULES[module]}.weight.lora_{side.lower()}"] = w
    if not tensors:
        raise EngineError(f"{weights}: no LoRA tensors")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    writer = gguf.GGUFWriter(str(tmp), "llama")
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", alpha)
    for name in sorted(tensors):
        writer.add_tensor(name, tensors[name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp.replace(target)  # atomic: a concurrent load sees all of it or none
    _prune(cache)
    return target, sha


def _prune(cache: Path, keep: int = KEEP) -> None:
    """Drop the least recently served conversions beyond `keep` (each is made again if it is asked for)."""
    files = sorted(cache.glob("*.gguf"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in files[keep:]:
        old.unlink(missing_ok=True)


__all__ = ["FORMAT_VERSION", "convert_peft_adapter"]
