"""MLflow (`rsi[mlflow]`): one run per cycle, a nested run per phase (MLflow's `mlflow.parentRunId` tag), through
`MlflowClient` so nothing touches MLflow's global active-run state. Default store: SQLite at .rsi/mlflow.db with
artifacts in .rsi/mlartifacts, so `mlflow ui --backend-store-uri sqlite:///.rsi/mlflow.db` shows it."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from rsi.core.settings import MlflowSettings
from rsi.track.base import Param as ParamValue
from rsi.track.base import Point

STATUS = {"FINISHED": "FINISHED", "FAILED": "FAILED", "KILLED": "KILLED"}
BATCH = 900  # MLflow's log_batch takes at most 1000 metrics per call


def default_uri(root: Path) -> str:
    return f"sqlite:///{(root / '.rsi' / 'mlflow.db').resolve()}"


class MlflowTracker:
    name = "mlflow"

    def __init__(self, settings: MlflowSettings, root: Path) -> None:
        # MLflow prints a "View run ... at: URL" line per finished run onto stdout, which holds `--json` output
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        for noisy in ("mlflow", "alembic"):  # store creation logs at INFO onto the user's terminal
            logging.getLogger(noisy).setLevel(logging.WARNING)
        self.uri = settings.tracking_uri or default_uri(root)
        local = self.uri.startswith("sqlite:") and not settings.tracking_uri
        if local:
            (root / ".rsi").mkdir(parents=True, exist_ok=True)
        self.client = MlflowClient(tracking_uri=self.uri)
        exp = self.client.get_experiment_by_name(settings.experiment)
        if exp is None:
            where = (root / ".rsi" / "mlartifacts").resolve().as_uri() if local else None
            self.experiment_id = self.client.create_experiment(settings.experiment, artifact_location=where)
        else:
            self.experiment_id = exp.experiment_id
        self.runs: dict[str, str] = {}  # key -> MLflow run id

    def start_run(self, key: str, name: str, parent: str | None, tags: dict[str, str]) -> None:
        t = dict(tags)
        if parent is not None and parent in self.runs:
            t["mlflow.parentRunId"] = self.runs[parent]
        run = self.client.create_run(self.experiment_id, run_name=name, tags=t)
        self.runs[key] = run.info.run_id

    def log_params(self, key: str, params: dict[str, ParamValue]) -> None:
        self.client.log_batch(self.runs[key], params=[Param(k, str(v)[:6000]) for k, v in params.items()])

    def log_metrics(self, key: str, metrics: dict[str, list[Point]]) -> None:
        now = int(time.time() * 1000)
        flat = [Metric(k, v, now, step) for k, pts in metrics.items() for step, v in pts]
        for i in range(0, len(flat), BATCH):
            self.client.log_batch(self.runs[key], metrics=flat[i:i + BATCH])

    def set_tags(self, key: str, tags: dict[str, str]) -> None:
        self.client.log_batch(self.runs[key], tags=[RunTag(k, str(v)) for k, v in tags.items()])

    def log_artifact(self, key: str, path: Path) -> None:
        self.client.log_artifact(self.runs[key], str(path))

    def end_run(self, key: str, status: str) -> None:
        self.client.set_terminated(self.runs[key], status=STATUS.get(status, "FINISHED"))

    def close(self) -> None:
        self.runs.clear()
