"""Trackers by name (`--report-to mlflow,tensorboard`, `tracking.report_to`). Each integration imports its
library only when chosen; a missing library is refused up front, in one line naming the pip command."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rsi.core.errors import ConfigError, NotFoundError
from rsi.core.registry import Registry
from rsi.core.settings import TrackingSettings
from rsi.track.base import Tracker

TRACKERS: Registry[Tracker] = Registry("tracker")
# tracker name -> (the module it needs, the extra that installs it)
EXTRAS = {"mlflow": ("mlflow", "mlflow"), "tensorboard": ("tensorboard", "tensorboard"), "wandb": ("wandb", "wandb")}


def _mlflow(settings: TrackingSettings, root: Path) -> Tracker:
    from rsi.track.mlflow_tracker import MlflowTracker

    return MlflowTracker(settings.mlflow, root)


def _tensorboard(settings: TrackingSettings, root: Path) -> Tracker:
    from rsi.track.tensorboard_tracker import TensorBoardTracker

    return TensorBoardTracker(settings.tensorboard, root)


def _wandb(settings: TrackingSettings, root: Path) -> Tracker:
    from rsi.track.wandb_tracker import WandbTracker

    return WandbTracker(settings.wandb, root)


TRACKERS.add("mlflow", _mlflow)
TRACKERS.add("tensorboard", _tensorboard)
TRACKERS.add("wandb", _wandb)


def parse_names(values: list[str] | None) -> list[str]:
    """`--report-to a,b --report-to c` -> [a, b, c] (order kept, repeats dropped; `none` clears)."""
    out: list[str] = []
    for v in values or []:
        for name in (x.strip().lower() for x in v.split(",")):
            if name == "none":
                out.clear()
            elif name and name not in out:
                out.append(name)
    return out


def check(names: list[str], source: str = "--report-to") -> None:
    """Refuse an unknown tracker (listing the known ones) or one whose extra is not installed, before anything
    runs."""
    for name in names:
        try:
            TRACKERS.get(name)
        except NotFoundError as e:
            raise NotFoundError(f"{source}: {e}") from None
        module, extra = EXTRAS.get(name, (None, None))
        if module and importlib.util.find_spec(module) is None:
            raise ConfigError(f"{source}: tracker {name} needs its extra: pip install 'rsi[{extra}]'")


__all__ = ["EXTRAS", "TRACKERS", "check", "parse_names"]
