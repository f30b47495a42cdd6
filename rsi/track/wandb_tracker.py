"""Weights & Biases (`rsi[wandb]`): offline unless rsi.yaml says `tracking.wandb.mode: online`, so nothing leaves
the machine by default (`wandb sync .rsi/wandb/wandb/offline-run-*` uploads later). W&B has no nested runs: a
cycle's run and its phases' runs share the cycle's `group`, each phase run's `job_type` is its phase. W&B steps
must rise within a run, so each run's metrics are kept and logged in step order when the run ends."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import wandb

from rsi.core.settings import WandbSettings
from rsi.track.base import Param, Point


class WandbTracker:
    name = "wandb"

    def __init__(self, settings: WandbSettings, root: Path) -> None:
        self.settings = settings
        d = Path(settings.dir)
        self.dir = d if d.is_absolute() else root / d
        self.dir.mkdir(parents=True, exist_ok=True)
        self.runs: dict[str, Any] = {}
        self.groups: dict[str, str] = {}
        self.pending: dict[str, dict[int, dict[str, float]]] = {}

    def start_run(self, key: str, name: str, parent: str | None, tags: dict[str, str]) -> None:
        group = self.groups.get(parent, parent) if parent else key
        self.groups[key] = group
        mode = os.environ.get("WANDB_MODE") if self.settings.mode == "online" else self.settings.mode
        run = wandb.init(project=self.settings.project, entity=self.settings.entity, name=name, group=group,
                         job_type=key.split("/")[-1] if parent else "cycle", dir=str(self.dir),
                         mode=(mode or "online"), reinit="create_new",  # type: ignore[arg-type]
                         tags=[f"{k}={v}"[:64] for k, v in tags.items()],
                         settings=wandb.Settings(silent=True, console="off", x_disable_stats=True))
        self.runs[key] = run
        self.pending[key] = {}

    def log_params(self, key: str, params: dict[str, Param]) -> None:
        self.runs[key].config.update(dict(params), allow_val_change=True)

    def log_metrics(self, key: str, metrics: dict[str, list[Point]]) -> None:
        by_step = self.pending[key]
        for name, pts in metrics.items():
            for step, v in pts:
                by_step.setdefault(step, {})[name] = float(v)

    def set_tags(self, key: str, tags: dict[str, str]) -> None:
        run = self.runs[key]
        for k, v in tags.items():
            run.summary[k] = v

    def log_artifact(self, key: str, path: Path) -> None:
        # a file in the run's files directory is part of the run (offline: kept there; `wandb sync` uploads it)
        shutil.copy2(path, Path(self.runs[key].dir) / path.name)

    def end_run(self, key: str, status: str) -> None:
        run = self.runs.pop(key, None)
        if run is None:
            return
        by_step = self.pending.pop(key, {})
        for step in sorted(by_step):
            run.log(by_step[step], step=step)
        run.finish(exit_code=0 if status == "FINISHED" else 1)

    def close(self) -> None:
        for key in list(self.runs):
            self.end_run(key, "FINISHED")
