"""llama-cpp-python, imported on demand: whether the llama engine can run here, and why not."""

from __future__ import annotations

from typing import Any


class LlamaUnavailable(RuntimeError):
    """llama-cpp-python is not installed or cannot load (the torch engine serves instead)."""


def llama_lib() -> Any:
    """The `llama_cpp` module (the C API), or LlamaUnavailable saying why not."""
    try:
        import llama_cpp
    except (ImportError, OSError) as e:  # OSError: the shared library would not load
        raise LlamaUnavailable(f"llama-cpp-python is not usable here ({e})") from e
    return llama_cpp


__all__ = ["LlamaUnavailable", "llama_lib"]
