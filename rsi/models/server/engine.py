"""The embedded server's engine: one resident model, LoRA adapters, a request queue and a decode loop.

One base model stays resident; PEFT LoRA adapters are added and removed by name, and every request
names either the base or one adapter (vLLM's multi-LoRA convention). A single worker thread owns the
model and runs a continuous-batching loop:

- a request waits in a bounded queue (`max_queue`; beyond it the server answers 503, which clients
  retry), then is prefilled on its own: the longest token prefix the prefix cache holds for the
  same adapter is reused and only the rest is computed (`cached_tokens` in the usage, as vLLM);
- greedy requests decode together, up to `max_batch` rows per forward pass (PEFT mixed-adapter
  batches); padding changes the rounding, so with `max_batch > 1` a greedy answer may differ by a
  token from the same request run alone. Sampled requests run alone, so a seed reproduces its
  output. `max_batch = 1` runs every request alone;
- a request decoded alone is speculated (speculate.py): the tokens that followed the latest earlier
  occurrence of its last tokens are checked in one forward pass; greedy answers stay the same and
  a sampled request's tokens keep their distribution (and its seed reproduces them);
- a request with a grammar (a forced tool call, a JSON response_format) takes only allowed tokens
  (constrain.py) and is never speculated; a text completion's prompt is raw text or token ids, and
  its `echo` logprobs are read off the prefill's logits (that prefill skips the prefix cache);
- a row ends at an end-of-sequence token, a stop string, a complete tool call (requests with tools),
  `max_tokens`, or cancellation: a cancelled request (its client went away) leaves the batch at the
  next step, or between prefill chunks, and frees the engine at once;
- a finished row's KV goes to the prefix cache (bounded in bytes, LRU; keyed by adapter).
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Sandboxes and other processes share the cores: spinning OpenMP workers would steal them for nothing.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from rsi.models.server.choice import common_prefix, prefilled_scores, score_labels  # noqa: E402
from rsi.models.server.constrain import Vocab  # noqa: E402
from rsi.models.server.decode import Batch, GenRequest, GenResult, Row  # noqa: E402
from rsi.models.server.jobs import Cancelled, EngineError, Job  # noqa: E402
from rsi.models.server.kernels import apply_kernels  # noqa: E402
from rsi.models.server.kv_cache import PrefixCache, cache_layers  # noqa: E402
from rsi.models.server.model_files import config_of, default_dtype, resolve_model  # noqa: E402
from rsi.models.server.prompts import (  # noqa: E402
    PromptError,
    chunk_logprobs,
    completion_entries,
    echo_entries,
    encode,
    logprob_entry,
    render_chat,
)
from rsi.models.server.speculate import speculative_step  # noqa: E402
from rsi.models.server.tools import parse_tool_calls  # noqa: E402
from rsi.models.sizing import ServerSizing, size_server  # noqa: E402

hf_logging.disable_progress_bar()

BASE_ADAPTER = "__base__"  # PEFT's name for "no adapter" in a mixed batch
PREFILL_CHUNK = 256  # tokens per prefill forward pass; cancellation is checked between chunks


class Engine:
    """Owns the model; `submit` / `generate` may be called from many threads at once."""

    def __init__(
        self,
        model: str | None = None,
        *,
        dtype: torch.dtype | None = None,
        served_name: str | None = None,
        sizing: ServerSizing | None = None,
        threads: int | None = None,
        max_batch: int | None = None,
    ) -> None:
        self.sizing = sizing or size_server(threads=threads, max_batch=max_batch)
        torch.set_num_threads(self.sizing.threads)
        self.model_dir, model_id = resolve_model(model)
        self.model_id = served_name or model_id
        self.max_batch = self.sizing.max_batch
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.dtype = dtype or default_dtype()
        self.context_len = int(getattr(config_of(self.model_dir), "max_position_embeddings", 0) or 8192)
        self.model: Any = AutoModelForCausalLM.from_pretrained(str(self.model_dir), dtype=self.dtype).eval()
        self.kernels = apply_kernels(self.model, self.sizing.kernels)
        self.adapters: dict[str, str] = {}  # serve name -> path
        self._epochs: dict[str, int] = {}  # serve name -> load count: a reloaded name never sees old KV
        self._loads = 0
        self.prefix_cache = PrefixCache(self.sizing.prefix_cache_bytes)
        # a choice's common label prefix in the prompt's prefill (one pass); False: the prefill, then a pass over
        # the labels (the earlier way, kept so benchmarks/mol_turns.py can measure both on one engine)
        self.choice_one_pass = True
        self._stop_ids = self._stop_token_ids()
        self._vocab: Vocab | None = None
        template = self.tokenizer.chat_template or ""
        self._template_has_tools = "tools" in template
        self._lock = threading.Lock()  # guards self.model / self.adapters against the worker
        self._cv = threading.Condition()
        self._pending: collections.deque[Job] = collections.deque()
        self._batch = Batch()
        self.decode_stats = {"forwards": 0, "tokens": 0}  # decode forward passes and the tokens they gave
        self._closed = False
        self._worker = threading.Thread(target=self._run, name="rsi-engine", daemon=True)
        self._worker.start()
        self._warm_up()

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

    def info(self) -> dict[str, Any]:
        """What the server runs with, for /health and `rsi doctor`."""
        with self._cv:
            queued, running = len(self._pending), len(self._batch)
        return {
            "model": self.model_id,
            "dtype": str(self.dtype).removeprefix("torch."),
            "kernels": self.kernels,
            "sizing": self.sizing.as_dict(),
            "queued": queued,
            "running": running,
            "prefix_cache": vars(self.prefix_cache.stats).copy(),
        }

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

    def load_adapter(self, name: str, path: str) -> None:
        from peft import PeftModel

        if not name or name == self.model_id:
            raise EngineError(f"invalid lora_name '{name}'")
        p = Path(path)
        if not (p / "adapter_config.json").is_file():
            raise EngineError(f"lora_path '{path}' is not a PEFT adapter directory (no adapter_config.json)")
        with self._lock:
            if name in self.adapters:
                raise EngineError(f"The lora adapter '{name}' has already been loaded.")
            try:
                if isinstance(self.model, PeftModel):
                    self.model.load_adapter(str(p), adapter_name=name)
                else:
                    self.model = PeftModel.from_pretrained(self.model, str(p), adapter_name=name).eval()
            except (ValueError, OSError, KeyError, RuntimeError) as e:
                raise EngineError(f"could not load lora adapter '{name}' from '{path}': {e}") from e
            self._loads += 1
            self._epochs[name] = self._loads
            self.adapters[name] = str(p)

    def unload_adapter(self, name: str) -> None:
        with self._lock:
            if name not in self.adapters:
                raise EngineError(f"The lora adapter '{name}' cannot be found.", status=404)
            self.prefix_cache.drop_adapter(self._kv_key(name))
            del self.adapters[name]
            # rows still decoding with it end now (the worker holds no step while we hold the lock)
            gone = [r for r in self._batch.rows if r.adapter == name]
            for r in gone:
                r.finish = "error"
            self._batch.remove(gone)
            for r in gone:
                r.job._resolve(error=EngineError(f"The model `{name}` does not exist.", status=404))
            if self.adapters:
                self.model.delete_adapter(name)
            else:  # last one: strip the LoRA layers so base requests run at full speed
                self.model = self.model.unload().eval()

    def _kv_key(self, model: str) -> str:
        """The prefix cache's key for a served name: adapters never share KV, a reload never sees old KV."""
        return model if model == self.model_id else f"{model}#{self._epochs.get(model, 0)}"

    def _adapter_names(self, rows: list[Row]) -> list[str] | None:
        if not self.adapters:
            return None
        return [BASE_ADAPTER if r.adapter == self.model_id else r.adapter for r in rows]

    # -- prompts -------------------------------------------------------------------------

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
        torch.set_num_threads(self.sizing.threads)  # the worker's own OpenMP setting
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
                    rows, self._batch = self._batch.rows, Batch()
                    for r in rows:
                        r.job._resolve(error=err)

    def _iteration(self) -> None:
        batch = self._batch
        gone = [r for r in batch.rows if r.cancel.is_set()]
        batch.remove(gone)
        for r in gone:
            r.job._resolve(error=Cancelled())
        self._admit()
        if not batch.rows:
            return
        with torch.inference_mode():
            self.decode_stats["forwards"] += 1
            if self._speculates(batch):
                taken, finished = speculative_step(batch, self.model, self._adapter_names(batch.rows),
                                                   self.sizing.speculate)
                self.decode_stats["tokens"] += taken
                done = batch.rows if finished else []
            else:
                logits = batch.step(self.model, self._adapter_names(batch.rows))
                self.decode_stats["tokens"] += len(batch.rows)
                done = [r for i, r in enumerate(batch.rows) if r.advance(r.choose(logits[i]))]
        for r in done:
            self._finish(r, batch.row_kv(r) if self.prefix_cache.enabled else None)
        batch.remove(done)

    def _speculates(self, batch: Batch) -> bool:
        """A request decoded alone is speculated (prompt lookup), when the sizing allows it."""
        rows = batch.rows
        return self.sizing.speculate > 0 and len(rows) == 1 and rows[0].pad == 0 and rows[0].constrained is None

    def _next_job(self) -> Job | None:
        """The next queued job to serve now, else None: a choice request first (it is one prefill and never
        takes a batch row, so it runs between decode steps whatever the batch holds: a MoL route hop does not
        wait behind another trial's whole answer), else the oldest job that may join the running batch."""
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
            if rows and (not job.request.greedy or any(not r.request.greedy for r in rows)):
                return None  # sampled requests run alone
            return self._pending.popleft()

    def _admit(self) -> None:
        while (job := self._next_job()) is not None:
            try:
                if job.request.choice is not None:
                    job._resolve(self._choose(job))
                    continue
                row, kv, logits = self._prefill(job)
            except EngineError as e:
                job._resolve(error=e)
                continue
            if row.advance(row.choose(logits[0])):
                self._finish(row, kv)
            else:
                self._batch.add(row, kv)

    @torch.inference_mode()
    def _prefill(self, job: Job, then: Sequence[int] = ()) -> tuple[Row, list[tuple[torch.Tensor, torch.Tensor]],
                                                                   torch.Tensor]:
        """Prefill the request's prompt (from the longest cached prefix): its row, KV and last logits. `then`
        (a choice's common label prefix) is prefilled in the same pass: the KV covers it too and the logits
        are the last len(then) + 1 positions'."""
        req = job.request
        if req.model != self.model_id and req.model not in self.adapters:
            raise EngineError(f"The model `{req.model}` does not exist.", status=404)
        ids = self.prompt_ids(req)
        full = torch.cat([ids, torch.tensor(list(then), dtype=ids.dtype)]) if then else ids
        vocab = self.vocab() if req.grammar is not None or req.logprobs or req.prompt_logprobs is not None else None
        row = Row(req, ids, self.tokenizer, self._stop_ids, cancel=job.cancelled, on_delta=job.on_delta, vocab=vocab)
        t_prefill = time.monotonic()
        row.job, row.queue_sec = job, t_prefill - job.queued_at
        start, kv = 0, None
        echo = req.prompt_logprobs  # every prompt position's logits are needed: no prefix cache
        if self.prefix_cache.enabled and echo is None:
            start, kv = self.prefix_cache.lookup(self._kv_key(req.model), ids)
        cache = DynamicCache(ddp_cache_data=kv) if kv else DynamicCache()
        names = self._adapter_names([row])
        extra = {"adapter_names": names} if names else {}
        threads = self.sizing.prefill_threads
        if threads != self.sizing.threads:
            torch.set_num_threads(threads)
        scored: list[tuple[int, float, list[tuple[int, float]]]] = []
        try:
            bounds = list(range(start, int(full.numel()), PREFILL_CHUNK))
            if then and len(bounds) > 1 and int(full.numel()) - bounds[-1] < 1 + len(then):
                bounds.pop()  # the last chunk keeps every position whose logits are asked for
            for lo, hi in zip(bounds, [*bounds[1:], int(full.numel())], strict=True):
                if job.cancelled.is_set():
                    raise Cancelled()
                chunk = full[None, lo:hi]
                out = self.model(input_ids=chunk, cache=cache, use_cache=True, logits_to_keep=0 if echo is not None
                                 else 1 + len(then), **extra)
                if echo is not None:
                    scored += chunk_logprobs(out.logits[0], ids[lo + 1 : lo + 1 + PREFILL_CHUNK], echo)
        finally:
            if threads != self.sizing.threads:
                torch.set_num_threads(self.sizing.threads)
        if vocab is not None and echo is not None:
            row.prompt_logprobs = [logprob_entry(vocab, t, lp, top) for t, lp, top in scored]
        row.cached_tokens = start
        row.kv_len = int(full.numel())
        row.prefilled_at = time.monotonic()
        row.prefill_sec = row.prefilled_at - t_prefill
        layers = cache_layers(cache)
        if then:
            return row, layers, out.logits[0, -(1 + len(then)):, :]
        return row, layers, out.logits[:, -1, :]

    @torch.inference_mode()
    def _choose(self, job: Job) -> GenResult:
        """A choice request: the best-scored label (rsi.models.server.choice), never a sampled token."""
        labels = job.request.choice or []
        label_ids = [list(self.tokenizer(lab, add_special_tokens=False)["input_ids"]) for lab in labels]
        if any(not ids for ids in label_ids):
            raise EngineError("structured_outputs.choice: a label encodes to no token")
        # the labels' common first tokens (`L` of L0..L9) ride in the prompt's own prefill: one pass in all
        common = common_prefix(label_ids) if self.choice_one_pass and len(label_ids) > 1 else []
        row, kv, logits = self._prefill(job, common)
        names = self._adapter_names([row])
        adapter = names[0] if names else None
        if common:
            scores = prefilled_scores(self.model, kv, logits, common, label_ids, adapter)
        else:
            scores = score_labels(self.model, kv, logits[0], label_ids, adapter)
        seq = torch.cat([row.prompt_ids, torch.tensor(common, dtype=row.prompt_ids.dtype)])
        if self.prefix_cache.enabled and int(kv[0][0].shape[2]) == int(seq.numel()):
            self.prefix_cache.insert(self._kv_key(row.adapter), seq, kv)
        best = max(range(len(labels)), key=lambda i: scores[i])
        return GenResult(
            text=labels[best], tool_calls=[], finish_reason="stop", prompt_tokens=int(row.prompt_ids.numel()),
            completion_tokens=len(label_ids[best]), cached_tokens=row.cached_tokens, queue_sec=row.queue_sec,
            prefill_sec=row.prefill_sec, decode_sec=time.monotonic() - row.prefilled_at,
            completion_ids=label_ids[best], prompt_ids=[int(x) for x in row.prompt_ids.tolist()],
            choice_scores={lab: round(sc, 6) for lab, sc in zip(labels, scores, strict=True)},
        )

    def _finish(self, row: Row, kv: list[tuple[torch.Tensor, torch.Tensor]] | None) -> None:
        """Answer a finished row; keep its KV (prompt + completion but the last token) for later prompts."""
        if kv is not None and self.prefix_cache.enabled:
            seq = torch.cat([row.prompt_ids, torch.tensor(row.ids[:-1], dtype=row.prompt_ids.dtype)])
            if int(kv[0][0].shape[2]) == int(seq.numel()):
                self.prefix_cache.insert(self._kv_key(row.adapter), seq, kv)
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


__all__ = ["Cancelled", "Engine", "EngineError", "GenRequest", "GenResult", "Job"]
