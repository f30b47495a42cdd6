"""The embedded server's engine: one resident model, LoRA adapters, a request queue and a decode loop.

One base model stays resident; PEFT LoRA adapters are added and removed by name, and every request
names either the base or one adapter (vLLM's multi-LoRA convention). A single worker thread owns the
model and runs a continuous-batching loop:

- a request waits in a bounded queue (`max_queue`; beyond it the server answers 503, which clients
  retry), then is prefilled on its own: the longest token prefix the prefix cache holds for the
  same adapter is reused and only the rest is computed (`cached_tokens` in the usage, as vLLM);
- greedy requests decode together, up to `max_batch` rows per forward pass (PEFT mixed-adapter
  batches); padding changes the rounding, so with `max_batch > 1` a greedy answer may differ by a
  token from the same request run alone. Sampled requests batch too, but one with a `seed` runs
  alone, so its seed reproduces its output (engine_base.runs_alone). `max_batch = 1` runs every
  request alone;
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

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Sandboxes and other processes share the cores: spinning OpenMP workers would steal them for nothing.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, DynamicCache  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

from rsi.models.server.choice import common_prefix, prefilled_scores, score_labels  # noqa: E402
from rsi.models.server.decode import Batch, GenRequest, GenResult, Row  # noqa: E402
from rsi.models.server.engine_base import EngineBase  # noqa: E402
from rsi.models.server.jobs import Cancelled, EngineError, Job  # noqa: E402
from rsi.models.server.kernels import apply_kernels  # noqa: E402
from rsi.models.server.kv_cache import cache_layers  # noqa: E402
from rsi.models.server.model_files import default_dtype, resolve_model  # noqa: E402
from rsi.models.server.prompts import (  # noqa: E402
    chunk_logprobs,
    logprob_entry,
)
from rsi.models.server.speculate import speculative_step  # noqa: E402
from rsi.models.sizing import ServerSizing, size_server  # noqa: E402

hf_logging.disable_progress_bar()

BASE_ADAPTER = "__base__"  # PEFT's name for "no adapter" in a mixed batch
PREFILL_CHUNK = 256  # tokens per prefill forward pass; cancellation is checked between chunks


class Engine(EngineBase):
    """The torch engine: transformers + PEFT; `submit` / `generate` may be called from many threads at once."""

    kind = "torch"

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
        sizing = sizing or size_server(threads=threads, max_batch=max_batch)
        torch.set_num_threads(sizing.threads)
        model_dir, model_id = resolve_model(model)
        self._setup(model_dir, served_name or model_id, sizing, Batch)
        self.dtype = dtype or default_dtype()
        self.model: Any = AutoModelForCausalLM.from_pretrained(str(self.model_dir), dtype=self.dtype).eval()
        self.kernels = apply_kernels(self.model, self.sizing.kernels)
        # a choice's common label prefix in the prompt's prefill (one pass); False: the prefill, then a pass over
        # the labels (the earlier way, kept so benchmarks/mol_turns.py can measure both on one engine)
        self.choice_one_pass = True
        self._start()

    def info(self) -> dict[str, Any]:
        """What the server runs with, for /health and `rsi doctor`."""
        with self._cv:
            queued, running = len(self._pending), len(self._batch)
        return {
            "engine": self.kind,
            "model": self.model_id,
            "dtype": str(self.dtype).removeprefix("torch."),
            "kernels": self.kernels,
            "sizing": self.sizing.as_dict(),
            "queued": queued,
            "running": running,
            "prefix_cache": vars(self.prefix_cache.stats).copy(),
        }

    def _load_adapter(self, name: str, path: Path) -> None:
        from peft import PeftModel

        try:
            if isinstance(self.model, PeftModel):
                self.model.load_adapter(str(path), adapter_name=name)
            else:
                self.model = PeftModel.from_pretrained(self.model, str(path), adapter_name=name).eval()
        except (ValueError, OSError, KeyError, RuntimeError) as e:
            raise EngineError(f"could not load lora adapter '{name}' from '{path}': {e}") from e

    def _unload_adapter(self, name: str, gone: list[Row]) -> None:
        self.prefix_cache.drop_adapter(self._kv_key(name))
        self._batch.remove(gone)
        if len(self.adapters) > 1:
            self.model.delete_adapter(name)
        else:  # the last one: strip the LoRA layers so base requests run at full speed
            self.model = self.model.unload().eval()

    def _adapter_names(self, rows: list[Row]) -> list[str] | None:
        if not self.adapters:
            return None
        return [BASE_ADAPTER if r.adapter == self.model_id else r.adapter for r in rows]

    # -- prompts -------------------------------------------------------------------------

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
        self._answer(row)


__all__ = ["Cancelled", "Engine", "EngineError", "GenRequest", "GenResult", "Job"]
