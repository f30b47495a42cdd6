"""Training backends, chosen by name (`rsi update --backend NAME`).

- `export`: the dataset is the product; no adapter comes back.
- `command`: a user command template with `{dataset}`, `{output_dir}`, `{base_model}` and
  `{parent_adapter}` (each shell-quoted); its output is streamed to the log, and it must leave a
  PEFT adapter directory in `{output_dir}` (checked: config, tensors, base model name).
- `local`: PEFT LoRA on the base model with torch (rsi.train.local), CPU or GPU.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time

from rsi.core.registry import Registry
from rsi.train.base import TrainError, TrainingBackend, TrainRequest, TrainResult

BACKENDS: Registry[TrainingBackend] = Registry("training backend")


class ExportBackend:
    name = "export"

    def train(self, req: TrainRequest) -> TrainResult:
        req.log(f"dataset written to {req.dataset}; the export backend trains nothing")
        return TrainResult(adapter_dir=None)


def render_command(template: str, req: TrainRequest) -> str:
    values = {
        "dataset": str(req.dataset),
        "output_dir": str(req.output_dir),
        "base_model": str(req.base_model_dir or req.base_model),
        "base_model_id": req.base_model,
        "parent_adapter": str(req.parent_adapter or ""),
    }
    try:
        return template.format(**{k: shlex.quote(v) for k, v in values.items()})
    except (KeyError, IndexError, ValueError) as e:
        raise TrainError(f"command template {template!r}: {e!r}; placeholders: "
                         "{dataset} {output_dir} {base_model} {base_model_id} {parent_adapter}") from None


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
        return TrainResult(adapter_dir=req.output_dir, metrics={"wall_sec": round(time.monotonic() - t0, 2)})


def _local() -> TrainingBackend:
    from rsi.train.local import LocalBackend  # torch is imported only when this backend is used

    return LocalBackend()


BACKENDS.add("export", ExportBackend)
BACKENDS.add("command", CommandBackend)
BACKENDS.add("local", _local)

__all__ = ["BACKENDS", "CommandBackend", "ExportBackend", "TrainError", "TrainRequest", "TrainResult",
           "TrainingBackend", "render_command"]
