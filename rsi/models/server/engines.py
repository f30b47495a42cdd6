"""The embedded server's engine kinds, chosen by name: `torch` (transformers + PEFT) and `llama`
(llama.cpp on the GGUF), or `auto`.

`auto` takes llama.cpp where it is installed and the model is a GGUF file (the bundled default is),
else the torch engine, and says in one line why it fell back. A named kind that cannot run is an
error, never a silent switch. `RSI_MODEL_ENGINE` sets the default for every server rsi starts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rsi.core.errors import RsiError
from rsi.models.server.llama_lib import LlamaUnavailable, llama_lib

ENGINES = ("torch", "llama")
CHOICES = ("auto", *ENGINES)
ENV = "RSI_MODEL_ENGINE"


def engine_kind(name: str | None, env: dict[str, str] | None = None) -> str:
    """The kind asked for: `name`, else $RSI_MODEL_ENGINE, else auto; an unknown name is an error."""
    env = dict(os.environ) if env is None else env
    kind = (name or env.get(ENV) or "auto").strip().lower()
    if kind not in CHOICES:
        where = "--engine" if name else ENV
        raise RsiError(f"{where}: unknown engine '{kind}'; known: {', '.join(CHOICES)}", exit_code=2)
    return kind


def _is_gguf(model: str | None) -> bool:
    if model in (None, "", "default"):
        return True
    p = Path(str(model)).expanduser()
    return p.is_file() and p.suffix == ".gguf"


def choose_engine(kind: str, model: str | None) -> tuple[str, str | None]:
    """(`the kind to run`, `why auto fell back to torch`, else None)."""
    if kind != "auto":
        return kind, None
    if not _is_gguf(model):
        return "torch", f"the llama engine serves GGUF files; {model} is a transformers directory"
    try:
        llama_lib()
    except LlamaUnavailable as e:
        return "torch", f"{e}; scripts/setup.sh builds it"
    return "llama", None


def make_engine(kind: str, model: str | None, *, served_name: str | None, sizing: Any, dtype: Any = None) -> Any:
    """A started engine of `kind` (torch or llama)."""
    if kind == "llama":
        from rsi.models.server.llama_engine import LlamaEngine

        try:
            return LlamaEngine(model, served_name=served_name, sizing=sizing)
        except LlamaUnavailable as e:
            raise RsiError(f"--engine llama: {e} (scripts/setup.sh builds it; --engine torch serves without it)",
                           exit_code=2) from e
    if kind == "torch":
        from rsi.models.server.engine import Engine

        return Engine(model, dtype=dtype, served_name=served_name, sizing=sizing)
    raise RsiError(f"unknown engine '{kind}'; known: {', '.join(ENGINES)}", exit_code=2)


__all__ = ["CHOICES", "ENGINES", "ENV", "LlamaUnavailable", "choose_engine", "engine_kind", "llama_lib", "make_engine"]
