"""The training-backend boundary: what a backend is asked (TrainRequest) and returns (TrainResult).

Kept apart from the registry (rsi.train.backends) so that a backend module, `local` included, can
import these types without importing the registry that imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rsi.core.training import TrainSettings

Log = Callable[[str], None]
Progress = Callable[[int, int, float], None]


class TrainError(Exception):
    """The backend did not produce a usable adapter; the message says why."""


@dataclass
class TrainRequest:
    dataset: Path
    output_dir: Path
    base_model: str  # the base model's id
    objective: str
    settings: TrainSettings
    base_model_dir: Path | None = None  # a transformers directory (the `local` backend needs one)
    parent_adapter: Path | None = None
    log: Log = print
    progress: Progress | None = None
    command: str | None = None  # the `command` backend's template
    # finds the base model's local transformers directory when a backend asks (`base_dir`): resolving it may
    # convert the bundled GGUF once, so only a backend that needs the weights on disk pays for it
    locate_base: Callable[[], Path] | None = None

    def base_dir(self) -> Path | None:
        """The base model's local directory: `base_model_dir`, else what `locate_base` finds (then kept)."""
        if self.base_model_dir is None and self.locate_base is not None:
            self.base_model_dir = self.locate_base()
        return self.base_model_dir


@dataclass
class TrainResult:
    adapter_dir: Path | None
    steps: int = 0
    losses: list[float] = field(default_factory=list)
    metrics: dict[str, Any] = field(default_factory=dict)


class TrainingBackend(Protocol):
    name: str

    def train(self, req: TrainRequest) -> TrainResult: ...
