"""Which base model an adapter from an outside trainer was made on, when it names a directory.

A trainer run by `--backend command` loads the base from disk (offline there is no hub) and PEFT records that
path as the adapter's `base_model_name_or_path`; the generation knows its base by id. `adopt_base_name` accepts
such an adapter when the directory holds the same weights as the run's base — the same directory, or a copy
whose tensors (names, dtypes, shapes and bytes, read from the safetensors files) have the same digest — and
rewrites the name to the id, as the `local` backend writes it. A directory with other weights is refused even
when its name ends in the model's id (the adapter check, rsi.train.peft_dir, goes by the name alone).

Read by hand (the safetensors header is JSON after an 8-byte length), so neither torch nor safetensors is needed.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path
from typing import Any

from rsi.train.peft_dir import CONFIG


class OtherBase(ValueError):
    """The adapter names a local directory whose weights are not the run's base."""


def weights_digest(model_dir: Path) -> str:
    """sha256 over every tensor of the directory's `*.safetensors` files: name, dtype, shape and bytes, by name."""
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"{model_dir}: no .safetensors weights")
    index: list[tuple[str, Path, int, dict[str, Any]]] = []
    for f in files:
        with f.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        index += [(name, f, 8 + n, spec) for name, spec in header.items() if name != "__metadata__"]
    h = hashlib.sha256()
    for name, f, start, spec in sorted(index, key=lambda t: t[0]):
        lo, hi = (int(v) for v in spec["data_offsets"])
        h.update(json.dumps([name, spec["dtype"], spec["shape"]]).encode())
        with f.open("rb") as fh:
            fh.seek(start + lo)
            remaining = hi - lo
            while remaining > 0:
                chunk = fh.read(min(remaining, 1 << 22))
                if not chunk:
                    raise ValueError(f"{f}: tensor {name} runs past the end of the file")
                h.update(chunk)
                remaining -= len(chunk)
    return h.hexdigest()


def adopt_base_name(adapter_dir: Path, base_model: str, base_dir: Path | None) -> str | None:
    """Rewrite the adapter's `base_model_name_or_path` to `base_model` when it names a directory holding the
    same weights as `base_dir`; a one-line note of what was done, or None when nothing needed doing (or could).
    OtherBase when the directory holds other weights."""
    cfg_path = adapter_dir / CONFIG
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, ValueError):
        return None  # the adapter check names what is wrong
    named = str(cfg.get("base_model_name_or_path") or "") if isinstance(cfg, dict) else ""
    if not named or named == base_model or base_dir is None or not Path(named).is_dir():
        return None
    there = Path(named).resolve()
    if there == base_dir.resolve():
        how = "the run's base directory"
    else:
        try:
            same = weights_digest(there) == weights_digest(base_dir)
        except (OSError, ValueError, KeyError, struct.error) as e:
            return f"{cfg_path}: base_model_name_or_path {named!r} could not be compared with {base_dir}: {e}"
        if not same:
            raise OtherBase(f"{cfg_path}: base_model_name_or_path {named!r} holds other weights than the run's "
                            f"base {base_model} ({base_dir})")
        how = "a copy of the run's base weights (same tensor digest)"
    cfg["base_model_name_or_path"] = base_model
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    return f"{cfg_path}: base_model_name_or_path {named!r} is {how}: recorded as {base_model!r}"


__all__ = ["OtherBase", "adopt_base_name", "weights_digest"]
