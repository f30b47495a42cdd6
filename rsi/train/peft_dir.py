"""A PEFT adapter directory as a training backend hands it back: checked before anything uses it.

Checked: `adapter_config.json` parses and names a LoRA with a rank, its `base_model_name_or_path`
is the base model the run was given (by id or path), and `adapter_model.safetensors` is a well-formed
safetensors file (header parses, every tensor's byte range lies inside the file, at least one
`lora_` tensor). The header is read by hand, so the check needs neither torch nor safetensors.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from pathlib import Path

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"


class AdapterCheckError(Exception):
    pass


@dataclass(frozen=True)
class AdapterInfo:
    path: Path
    sha256: str
    bytes: int
    tensors: int
    rank: int
    alpha: float | None
    target_modules: list[str]


def _same_model(named: str, base_model: str, aliases: tuple[str, ...]) -> bool:
    if not named:
        return False
    names = {base_model, *aliases}
    tail = Path(named.rstrip("/")).name
    return named in names or tail in names or any(Path(a).name == tail for a in names if a)


def check_peft_dir(d: Path, base_model: str, aliases: tuple[str, ...] = ()) -> AdapterInfo:
    """AdapterInfo for a valid PEFT LoRA directory made for `base_model`; AdapterCheckError says what is wrong."""
    if not d.is_dir():
        raise AdapterCheckError(f"{d} is not a directory")
    cfg_path, weights = d / CONFIG, d / WEIGHTS
    if not cfg_path.is_file():
        raise AdapterCheckError(f"{d}: no {CONFIG}")
    if not weights.is_file():
        raise AdapterCheckError(f"{d}: no {WEIGHTS}")
    try:
        cfg = json.loads(cfg_path.read_text())
    except ValueError as e:
        raise AdapterCheckError(f"{cfg_path}: not JSON ({e})") from None
    if not isinstance(cfg, dict) or str(cfg.get("peft_type", "")).upper() != "LORA":
        raise AdapterCheckError(f"{cfg_path}: peft_type is {cfg.get('peft_type')!r}, expected LORA")
    rank = cfg.get("r")
    if not isinstance(rank, int) or rank <= 0:
        raise AdapterCheckError(f"{cfg_path}: r is {rank!r}, expected a positive integer")
    named = str(cfg.get("base_model_name_or_path") or "")
    if not _same_model(named, base_model, aliases):
        raise AdapterCheckError(
            f"{cfg_path}: base_model_name_or_path is {named!r}, but the run's base model is {base_model!r}")
    size = weights.stat().st_size
    with weights.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise AdapterCheckError(f"{weights}: truncated (no safetensors header)")
        (n,) = struct.unpack("<Q", head)
        if n <= 0 or 8 + n > size:
            raise AdapterCheckError(f"{weights}: header length {n} does not fit a {size}-byte file")
        try:
            header = json.loads(f.read(n))
        except ValueError as e:
            raise AdapterCheckError(f"{weights}: header is not JSON ({e})") from None
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    data_len = size - 8 - n
    for name, spec in tensors.items():
        lo, hi = (spec.get("data_offsets") or [0, -1]) if isinstance(spec, dict) else (0, -1)
        if not 0 <= lo <= hi <= data_len:
            raise AdapterCheckError(f"{weights}: tensor {name} lies outside the file")
    if not any("lora_" in k for k in tensors):
        raise AdapterCheckError(f"{weights}: no lora_ tensors")
    h = hashlib.sha256()
    with weights.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    targets = cfg.get("target_modules") or []
    return AdapterInfo(path=d, sha256=h.hexdigest(), bytes=size, tensors=len(tensors), rank=rank,
                       alpha=cfg.get("lora_alpha"),
                       target_modules=sorted(targets) if isinstance(targets, list) else [str(targets)])


def write_identity_adapter(src: Path, dest: Path, base_model: str, aliases: tuple[str, ...] = ()) -> AdapterInfo:
    """Write to `dest` a copy of the LoRA at `src` with every `lora_B` tensor zeroed, and check it.

    A LoRA adds B·A to each target; with B = 0 it adds nothing, so the copy answers exactly as the base
    model does while keeping src's rank, targets and file layout (PEFT itself initialises B to zero). A new
    specialist with nothing to train on starts from this rather than from another adapter's weights, which
    would carry that adapter's skills (for the chat adapter: answering with a routing label). Done on the
    bytes, so it needs neither torch nor safetensors.
    """
    info = check_peft_dir(src, base_model, aliases)
    if json.loads((src / CONFIG).read_text()).get("use_dora"):  # DoRA rescales W itself even with B = 0
        raise AdapterCheckError(f"{src / CONFIG}: a DoRA adapter has no identity copy (use_dora is set)")
    dest.mkdir(parents=True, exist_ok=True)
    (dest / CONFIG).write_bytes((src / CONFIG).read_bytes())
    raw = bytearray((src / WEIGHTS).read_bytes())
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    start = 8 + n
    zeroed = 0
    for name, spec in header.items():
        if name != "__metadata__" and ("lora_B" in name or "lora_embedding_B" in name):
            lo, hi = spec["data_offsets"]
            raw[start + lo:start + hi] = bytes(hi - lo)
            zeroed += 1
    if not zeroed:
        raise AdapterCheckError(f"{src / WEIGHTS}: no lora_B tensors to zero ({info.tensors} tensors)")
    (dest / WEIGHTS).write_bytes(bytes(raw))
    return check_peft_dir(dest, base_model, aliases)


__all__ = ["CONFIG", "WEIGHTS", "AdapterCheckError", "AdapterInfo", "check_peft_dir", "write_identity_adapter"]
