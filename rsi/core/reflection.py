"""Reflective proposals (pure part): read a proposer's answer as a harness-config patch.

The proposer (a model) reads a failed trajectory and the verifier's output and answers with a
YAML mapping of dotted paths to new values, e.g. `sampling.temperature: 0.2`, possibly inside a
```yaml fence and possibly nested (`sampling: {temperature: 0.2}` is flattened). What comes out
is only a proposal: `rsi.core.variants.apply_variant` checks it against the contract before any
trial, and a refused one is recorded with its reason.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_FENCE = re.compile(r"```(?:ya?ml)?\s*\n(.*?)```", re.S)
# Sections a proposal may edit; the rest (model, name, contract, search_space, tools) are not its to change.
EDITABLE = ("prompt", "sampling", "loop", "limits")


class PatchError(ValueError):
    """The answer is not a usable patch; the message says why (recorded as the refusal)."""


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict) and value and prefix != "prompt.few_shot":
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def parse_patch(text: str) -> dict[str, Any]:
    """Dotted path -> value from a proposer's answer; PatchError when there is none or it edits a
    section outside EDITABLE."""
    m = _FENCE.search(text or "")
    body = m.group(1) if m else (text or "")
    try:
        data = yaml.safe_load(body)
    except yaml.YAMLError as e:
        raise PatchError(f"not YAML: {str(e).splitlines()[0][:200]}") from None
    if not isinstance(data, dict) or not data:
        raise PatchError("not a YAML mapping of config fields")
    flat: dict[str, Any] = {}
    _flatten("", data, flat)
    bad = sorted(k for k in flat if k.split(".")[0] not in EDITABLE)
    if bad:
        raise PatchError(f"edits {', '.join(bad[:3])}: a proposal may change only {', '.join(EDITABLE)}")
    return flat


__all__ = ["EDITABLE", "PatchError", "parse_patch"]
