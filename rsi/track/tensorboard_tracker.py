"""TensorBoard (`rsi[tensorboard]`): event files written with tensorboard's own writer, one directory per run
(`<log_dir>/<cycle job>` and `<log_dir>/<cycle job>/<phase>`, so `tensorboard --logdir .rsi/tensorboard` lists a
cycle beside its phases). Metrics are scalars with their steps; params and tags a Markdown table in the Text tab;
artifacts are copied into the run's directory (TensorBoard has no artifact store)."""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from rsi.core.settings import TensorBoardSettings
from rsi.track.base import Param, Point


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def _text_value(tag: str, text: str) -> summary_pb2.Summary.Value:
    """A text summary as the Text plugin reads it (a string tensor with plugin_name `text`)."""
    meta = summary_pb2.SummaryMetadata(plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
    tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[text.encode()],
                                    tensor_shape=tensor_shape_pb2.TensorShapeProto(
                                        dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]))
    return summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)


def _table(d: dict[str, Param] | dict[str, str]) -> str:
    return "| name | value |\n|---|---|\n" + "\n".join(f"| {k} | {v} |" for k, v in d.items())


class TensorBoardTracker:
    name = "tensorboard"

    def __init__(self, settings: TensorBoardSettings, root: Path) -> None:
        d = Path(settings.log_dir)
        self.log_dir = d if d.is_absolute() else root / d
        self.writers: dict[str, EventFileWriter] = {}
        self.dirs: dict[str, Path] = {}

    def _event(self, key: str, value: summary_pb2.Summary.Value, step: int) -> None:
        ev = event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=[value]))
        self.writers[key].add_event(ev)

    def start_run(self, key: str, name: str, parent: str | None, tags: dict[str, str]) -> None:
        base = self.dirs.get(parent or "", self.log_dir)
        d = base / _safe(key.split("/")[-1])
        d.mkdir(parents=True, exist_ok=True)
        self.dirs[key] = d
        self.writers[key] = EventFileWriter(str(d))
        if tags:
            self._event(key, _text_value("tags", _table(tags)), 0)

    def log_params(self, key: str, params: dict[str, Param]) -> None:
        self._event(key, _text_value("params", _table(params)), 0)

    def log_metrics(self, key: str, metrics: dict[str, list[Point]]) -> None:
        for name, pts in metrics.items():
            for step, v in pts:
                self._event(key, summary_pb2.Summary.Value(tag=name, simple_value=float(v)), step)
        self.writers[key].flush()

    def set_tags(self, key: str, tags: dict[str, str]) -> None:
        self._event(key, _text_value("tags", _table(tags)), 1)

    def log_artifact(self, key: str, path: Path) -> None:
        dest = self.dirs[key] / "artifacts"
        dest.mkdir(exist_ok=True)
        shutil.copy2(path, dest / path.name)
        self._event(key, _text_value("artifacts", f"`{dest / path.name}`"), 0)

    def end_run(self, key: str, status: str) -> None:
        w = self.writers.pop(key, None)
        if w is not None:
            w.close()

    def close(self) -> None:
        for key in list(self.writers):
            self.end_run(key, "FINISHED")
