"""Training backends, chosen by name (`rsi update --backend NAME`).

- `export`: the dataset is the product; no adapter comes back.
- `command`: a user command template with `{dataset}`, `{output_dir}`, `{base_model}`, `{base_model_id}`,
  `{base_model_dir}` and `{parent_adapter}` (each shell-quoted); its output is streamed to the log, and it must
  leave a PEFT adapter directory in `{output_dir}` (checked: config, tensors, base model name).
  `{base_model_dir}` is the base's local transformers directory (found only when the template asks for it), the
  one an offline trainer loads; `{base_model}` is that directory when the run already has it, else the id. An
  adapter whose `base_model_name_or_path` is the local directory, or a copy with the same weights, is recorded
  under the model's id (rsi.train.base_weights).
- `local`: PEFT LoRA on the base model with torch (rsi.train.local), CPU or GPU.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

from rsi.core.registry import Registry
from rsi.train.base import TrainError, TrainingBackend, TrainRequest, TrainResult
from rsi.train.base_weights import OtherBase, adopt_base_name
from rsi.train.peft_dir import CONFIG

BACKENDS: Registry[TrainingBackend] = Registry("training backend")


class ExportBackend:
    name = "export"

    def train(self, req: TrainRequest) -> TrainResult:
        req.log(f"dataset written to {req.dataset}; the export backend trains nothing")
        return TrainResult(adapter_dir=None)


PLACEHOLDERS = ("dataset", "output_dir", "base_model", "base_model_id", "base_model_dir", "parent_adapter")


def render_command(template: str, req: TrainRequest) -> str:
    values = {
        "dataset": str(req.dataset),
        "output_dir": str(req.output_dir),
        "base_model": str(req.base_model_dir or req.base_model),
        "base_model_id": req.base_model,
        "parent_adapter": str(req.parent_adapter or ""),
    }
    if "{base_model_dir}" in template:
        base_dir = req.base_dir()
        if base_dir is None:
            raise TrainError(f"command template {template!r}: {{base_model_dir}} asked for, but this run has no "
                             f"local directory for {req.base_model}")
        values["base_model_dir"] = str(base_dir)
    try:
        return template.format(**{k: shlex.quote(v) for k, v in values.items()})
    except (KeyError, IndexError, ValueError) as e:
        raise TrainError(f"command template {template!r}: {e!r}; placeholders: "
                         + " ".join(f"{{{k}}}" for k in PLACEHOLDERS)) from None


class CommandBackend:
    name = "command"

    def train(self, req: TrainRequest) -> TrainResult:
        if not req.command:
            raise TrainError("the command backend needs --command 'TEMPLATE' (or train.command in rsi.yaml)")
        cmd = render_command(req.command, req)
        req.output_dir.mkdir(parents=True, exist_ok=True)
        log_path = req.output_dir.parent / "train.log"
        req.log(f"$ {cmd}")
        t0 = time.monotonic()
        env = {**os.environ, "RSI_DATASET": str(req.dataset), "RSI_OUTPUT_DIR": str(req.output_dir)}
        with log_path.open("a") as logf:
            proc = subprocess.Popen(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True, env=env)
            assert proc.stdout is not None
            for line in proc.stdout:
                logf.write(line)
                req.log(line.rstrip("\n"))
            rc = proc.wait()
        if rc != 0:
            raise TrainError(f"training command exited {rc} (log: {log_path})")
        metrics: dict[str, object] = {"wall_sec": round(time.monotonic() - t0, 2)}
        try:
            note = adopt_base_name(req.output_dir, req.base_model, _base_dir_if_named(req))
        except OtherBase as e:
            raise TrainError(str(e)) from None
        if note:
            req.log(note)
            metrics["base_model_name"] = note
        return TrainResult(adapter_dir=req.output_dir, metrics=metrics)


def _base_dir_if_named(req: TrainRequest) -> Path | None:
    """The base's local directory, looked up only when the adapter names a directory rather than the id."""
    try:
        named = json.loads((req.output_dir / CONFIG).read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        return None
    if not named or named == req.base_model or not Path(str(named)).is_dir():
        return None
    return req.base_dir()


def _local() -> TrainingBackend:
    from rsi.train.local import LocalBackend  # torch is imported only when this backend is used

    return LocalBackend()


BACKENDS.add("export", ExportBackend)
BACKENDS.add("command", CommandBackend)
BACKENDS.add("local", _local)

__all__ = ["BACKENDS", "PLACEHOLDERS", "CommandBackend", "ExportBackend", "TrainError", "TrainRequest",
           "TrainResult", "TrainingBackend", "render_command"]
