"""What every embedded engine shares: the tokenizer and chat template, the request queue, the worker
thread and its scheduling, adapter names, and the answer a finished row gets.

An engine kind (engine.py: transformers + PEFT on torch; llama_engine.py: llama.cpp) adds the model:
loading it and its adapters, prefill, a decode step, and choice scoring. Both tokenize and render
prompts here with the model's own tokenizer and chat template and decode through the same `Row`
(stop strings, grammars, tool calls, sampling with the request's seed, logprobs), so the API
behaves the same whichever engine runs it.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Sandboxes and other processes share the cores: spinning OpenMP workers would steal them for nothing.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

from rsi.models.server.constrain import Vocab
from rsi.models.server.decode import GenRequest, GenResult, Row
from rsi.models.server.jobs import Cancelled, EngineError, Job
from rsi.models.server.kv_cache import PrefixCache
from rsi.models.server.model_files import config_of
from rsi.models.server.prompts import (
    PromptError,
    completion_entries,
    echo_entries,
    encode,
    render_chat,
)
from rsi.models.server.tools import parse_tool_calls
from rsi.models.sizing import ServerSizing


class RunningRows:
    """The rows being decoded (an engine kind may keep more per row, e.g. their KV)."""

    def __init__(self) -> None:
        self.rows: list[Row] = []

    def __len__(self) -> int:
        return len(self.rows)


def runs_alone(req: GenRequest) -> bool:
    """Whether a request decodes alone: a sampled request with a seed, so the seed reproduces its answer (a batch
    rounds differently from one row, on either engine). Greedy and unseeded sampled requests share the batch:
    the harness samples without a seed, and its concurrent trials' calls decode together."""
    return not req.greedy and req.seed is not None


class EngineBase:
    """The queue and worker of an engine; `submit` / `generate` may be called from many threads at once.

    A subclass loads its model in `__init__` after calling `_setup`, then calls `_start`; it implements
    `_iteration` (admit queued jobs, one decode step), `load_adapter` / `unload_adapter` and `info`."""

    kind = "base"

    def _setup(self, model_dir: Path, model_id: str, sizing: ServerSizing, batch: Any) -> None:
        self.sizing = sizing
        self.model_dir, self.model_id = model_dir, model_id
        self.max_batch = self.sizing.max_batch
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.context_len = int(getattr(config_of(self.model_dir), "max_position_embeddings", 0) or 8192)
        self.adapters: dict[str, str] = {}  # serve name -> path
        self._epochs: dict[str, int] = {}  # serve name -> load count: a reloaded name never sees old KV
        self._loads = 0
        self.prefix_cache = PrefixCache(self.sizing.prefix_cache_bytes)
        self._stop_ids = self._stop_token_ids()
        self._vocab: Vocab | None = None
        template = self.tokenizer.chat_template or ""
        self._template_has_tools = "tools" in template
        self._lock = threading.Lock()  # guards the model / self.adapters against the worker
        self._cv = threading.Condition()
        self._pending: collections.deque[Job] = collections.deque()
        self._new_batch: Callable[[], Any] = batch
        self._batch = batch()
        self.decode_stats = {"forwards": 0, "tokens": 0}  # decode forward passes and the tokens they gave
        self._closed = False

    def _start(self) -> None:
        self._worker = threading.Thread(target=self._run, name="rsi-engine", daemon=True)
        self._worker.start()
        self._warm_up()

    def _iteration(self) -> None:
        raise NotImplementedError

    def info(self) -> dict[str, Any]:
        """What the server runs with, for /health and `rsi doctor`."""
        raise NotImplementedError

    # -- adapters (vLLM's load/unload API; the weights themselves are the engine kind's) -------

    def load_adapter(self, name: str, path: str) -> None:
        """Serve the PEFT LoRA at `path` as `name`."""
        if not name or name == self.model_id:
            raise EngineError(f"invalid lora_name '{name}'")
        p = Path(path)
        if not (p / "adapter_config.json").is_file():
            raise EngineError(f"lora_path '{path}' is not a PEFT adapter directory (no adapter_config.json)")
        with self._lock:
            if name in self.adapters:
                raise EngineError(f"The lora adapter '{name}' has already been loaded.")
            self._load_adapter(name, p)
            self._loads += 1
            self._epochs[name] = self._loads
            self.adapters[name] = str(p)

    def unload_adapter(self, name: str) -> None:
        """Stop serving `name`; its rows still decoding end now with 404 (the worker holds no step meanwhile)."""
        with self._lock:
            if name not in self.adapters:
                raise EngineError(f"The lora adapter '{name}' cannot be found.", status=404)
            gone = [r for r in self._batch.rows if r.adapter == name]
            for r in gone:
                r.finish = "error"
            self._unload_adapter(name, gone)
            del self.adapters[name]
            for r in gone:
                r.job._resolve(error=EngineError(f"The model `{name}` does not exist.", status=404))

    def _load_adapter(self, name: str, path: Path) -> None:
        """Load the adapter's weights (under the lock); an EngineError refuses it."""
        raise NotImplementedError

    def _unload_adapter(self, name: str, gone: list[Row]) -> None:
        """Drop the adapter's weights and KV, and `gone` (its running rows) from the batch (under the lock)."""
        raise NotImplementedError

    def _threads(self) -> None:
        """Set the worker's own thread count (torch's OpenMP setting is per thread)."""
        torch.set_num_threads(self.sizing.threads)

    def _warm_up(self) -> None:
        """One tiny generation, so the first real request does not pay for kernel set-up."""
        self.generate(GenRequest(model=self.model_id, messages=[{"role": "user", "content": "Hi"}], max_tokens=2))
        self.prefix_cache.reset()

    def _stop_token_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        for tok in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
            tid = self.tokenizer.convert_tokens_to_ids(tok)
            if isinstance(tid, int) and tid != self.tokenizer.unk_token_id:
                ids.add(tid)
        return sorted(i for i in ids if i is not None)

    def close(self) -> None:
        """Stop the worker (after its current step); queued requests are answered 503."""
        with self._cv:
            self._closed = True
            pending, self._pending = list(self._pending), collections.deque()
            self._cv.notify_all()
        for job in pending:
            job._resolve(error=EngineError("the engine is shutting down", status=503))
        if threading.current_thread() is not self._worker:
            self._worker.join(timeout=30)

    # -- adapters ------------------------------------------------------------------------

    def model_ids(self) -> list[str]:
        return [self.model_id, *sorted(self.adapters)]

    def _kv_key(self, model: str) -> str:
        """The prefix cache's key for a served name: adapters never share KV, a reload never sees old KV."""
        return model if model == self.model_id else f"{model}#{self._epochs.get(model, 0)}"

    def render(self, req: GenRequest) -> str:
        """The request's prompt text via the chat template (tools in the system prompt if needed)."""
        try:
            return render_chat(self.tokenizer, req, self._template_has_tools)
        except PromptError as e:
            raise EngineError(str(e)) from e

    def prompt_ids(self, req: GenRequest) -> torch.Tensor:
        try:
            ids = encode(self.tokenizer, req, self._template_has_tools)
        except PromptError as e:
            raise EngineError(str(e)) from e
        n = int(ids.numel())
        if n + req.max_tokens > self.context_len:
            where = "prompt" if req.prompt is not None else "messages"
            raise EngineError(
                f"This model's maximum context length is {self.context_len} tokens. However, you "
                f"requested {n + req.max_tokens} tokens ({n} in the {where}, {req.max_tokens} in "
                f"the completion). Please reduce the length of the {where} or completion."
            )
        return ids

    def prompt_text(self, req: GenRequest) -> str:
        """A text completion's prompt as text (what `echo` returns); a chat's rendered prompt."""
        if isinstance(req.prompt, str):
            return req.prompt
        if req.prompt is None:
            return self.render(req)
        return str(self.tokenizer.decode(self.prompt_ids(req).tolist(), skip_special_tokens=False))

    def vocab(self) -> Vocab:
        """Every token's text and bytes (built on first use: constrained decoding, logprobs)."""
        if self._vocab is None:
            self._vocab = Vocab(self.tokenizer, self._stop_ids)
        return self._vocab

    # -- requests ------------------------------------------------------------------------

    def submit(self, req: GenRequest, on_delta: Callable[[str], object] | None = None) -> Job:
        """Queue one request; `on_delta` gets the text as it is generated (from the worker thread)."""
        if req.model != self.model_id and req.model not in self.adapters:
            raise EngineError(f"The model `{req.model}` does not exist.", status=404)
        job = Job(req, on_delta)
        job.wake = self._wake
        with self._cv:
            if self._closed:
                raise EngineError("the engine is shutting down", status=503)
            if len(self._pending) >= self.sizing.max_queue:
                raise EngineError(f"server busy: {len(self._pending)} requests queued", status=503)
            self._pending.append(job)
            self._cv.notify_all()
        return job

    def generate(self, req: GenRequest, timeout: float | None = None) -> GenResult:
        """Run one request to the end (queued behind others; batched with compatible ones)."""
        job = self.submit(req)
        try:
            return job.wait(timeout)
        except TimeoutError:
            job.cancel()
            raise

    def _wake(self) -> None:
        with self._cv:
            self._cv.notify_all()

    # -- the worker ----------------------------------------------------------------------

    def _run(self) -> None:
        self._threads()
        while True:
            with self._cv:
                while not self._closed and not self._batch.rows and not self._pending:
                    self._cv.wait()
                if self._closed:
                    for r in self._batch.rows:
                        r.job._resolve(error=EngineError("the engine is shutting down", status=503))
                    return
            with self._lock:
                try:
                    self._iteration()
                except BaseException as e:  # noqa: BLE001 — handed to every waiting request
                    err = e if isinstance(e, EngineError) else EngineError(f"generation failed: {e}", 500)
                    rows, self._batch = self._batch.rows, self._new_batch()
                    for r in rows:
                        r.job._resolve(error=err)

    def _next_job(self) -> Job | None:
        """The next queued job to serve now, else None: a choice request first (it is one prefill and never
        takes a batch row, so it runs between decode steps whatever the batch holds: a MoL route hop does not
        wait behind another trial's whole answer), else the oldest job that may join the running batch (a seeded
        sampled request runs alone, runs_alone)."""
        with self._cv:
            if any(j.cancelled.is_set() for j in self._pending):  # given up while queued: gone now
                for j in [j for j in self._pending if j.cancelled.is_set()]:
                    self._pending.remove(j)
                    j._resolve(error=Cancelled())
            choice = next((j for j in self._pending if j.request.choice is not None), None)
            if choice is not None:
                self._pending.remove(choice)
                return choice
            if not self._pending or len(self._batch) >= self.max_batch:
                return None
            job = self._pending[0]
            rows = self._batch.rows
            if rows and (runs_alone(job.request) or any(runs_alone(r.request) for r in rows)):
                return None
            return self._pending.popleft()

    def _answer(self, row: Row) -> None:
        """Resolve a finished row's job with its result (text, tool calls, usage, logprobs)."""
        req = row.request
        content, calls = parse_tool_calls(row.text, tools_offered=True) if req.parses_tools else (row.text, [])
        vocab = self._vocab if req.logprobs else None
        result = GenResult(
            text=content,
            tool_calls=calls,
            finish_reason="tool_calls" if calls else (row.finish or "stop"),
            prompt_tokens=int(row.prompt_ids.numel()),
            completion_tokens=len(row.ids),
            cached_tokens=row.cached_tokens,
            queue_sec=row.queue_sec,
            prefill_sec=row.prefill_sec,
            decode_sec=time.monotonic() - row.prefilled_at,
            stop_reason=row.stop_reason,
            completion_ids=list(row.ids),
            prompt_ids=[int(x) for x in row.prompt_ids.tolist()],
            logprobs=list(row.logprobs) if req.logprobs else None,
            tokens=[vocab.piece(t)[0] for t in row.ids] if vocab is not None else None,
            logprob_content=completion_entries(vocab, row.ids, row.logprobs, row.top) if vocab is not None else None,
        )
        if req.prompt is not None:  # a text completion: its prompt text (and logprobs) for `echo`
            result.prompt_text = req.prompt if isinstance(req.prompt, str) else \
                str(self.tokenizer.decode(result.prompt_ids, skip_special_tokens=False))
            result.prompt_logprob_content = echo_entries(self._vocab, result.prompt_ids, row.prompt_logprobs)
        row.job._resolve(result)



__all__ = ["EngineBase", "RunningRows"]
