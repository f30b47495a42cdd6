"""The llama.cpp engine: the bundled GGUF served by llama.cpp (through `llama-cpp-python`'s C API).

Decoding a 135M model on a CPU is bound by per-token overhead; llama.cpp's CPU kernels decode several
times faster than the torch engine and prefill faster too (benchmarks/engines.py). The bundled Q4_1
GGUF is served widened to F16 (`f16_copy`): the same weights the torch engine and the trainer use, so
log-probs agree across engines to ~0.003 nats a token. Everything above the forward pass is shared with the torch engine
(engine_base.py): the tokenizer and chat template (the exact prompt token ids), the queue and its
scheduling, and the `Row` that turns logits into tokens (stop strings, grammars, tool calls, sampling
with the request's seed, logprobs). Only the model work is llama.cpp's:

- **Slots.** One llama.cpp context holds `slots` sequences, each its own KV stream. A request takes
  a free slot: the one whose tokens share the longest prefix with its prompt under the same adapter
  (llama-server's prompt cache), and only the rest of the prompt is prefilled (`cached_tokens`).
  A finished row leaves its tokens in the slot for the next request (a trial's next turn).
- **Adapters.** A PEFT LoRA is converted to a llama.cpp LoRA (lora_gguf.py) when it is loaded; the
  sha256 of the PEFT weights is what `/health` reports as served. llama.cpp applies adapters per
  context, so a decode step runs one forward pass per adapter among the running rows.
- **Choices** are scored in the request's slot: the prompt's prefill gives every label's first token,
  then each label's tokens are run once and removed from the KV again.
- **Cancellation** is checked between prefill chunks and between decode steps, as in the torch engine.

A GGUF the user names is served as it is; a quantized one (Q4/Q8 products with 8-bit activations) gives
log-probs ~0.06 nats a token off the trainer's, which is why the trainer re-scores the rollouts its
policy-gradient ratio is taken against (`training.pg_old_logprobs`).
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rsi.models.server.decode import GenResult, Row
from rsi.models.server.engine_base import EngineBase, RunningRows
from rsi.models.server.jobs import Cancelled, EngineError, Job
from rsi.models.server.llama_lib import LlamaUnavailable, llama_lib
from rsi.models.server.lora_gguf import convert_peft_adapter
from rsi.models.server.model_files import resolve_gguf, resolve_model
from rsi.models.server.prompts import chunk_logprobs, logprob_entry
from rsi.models.sizing import ServerSizing, size_server

PREFILL_CHUNK = 512  # tokens per llama_decode call in a prefill; cancellation is checked between chunks
SLOTS_PER_ROW = 2  # KV slots per batch row: a trial's next turn finds its last turn's KV still there
# Rows decoded together unless --max-batch says otherwise: on llama.cpp four rows cost about 1.3 of one
# (benchmarks/records/engines.json), where the torch engine's padded batches cost nearly as much as rows apart.
DEFAULT_MAX_BATCH = 4
LLAMA_FTYPE_F16 = 1


def f16_copy(lib: Any, src: Path) -> Path:
    """The bundled Q4_1 GGUF widened to F16, made once (~3 s) and cached beside the transformers copy.

    F16 holds the Q4_1 weights as the torch engine and the trainer see them (dequantized) to within f16
    rounding, so the two engines' log-probs of the same tokens agree to ~0.003 nats a token, where the
    Q4_1 file's 8-bit activation products differ by ~0.06 (up to ~0.4); and llama.cpp's F16 matmuls
    prefill about twice as fast as its Q4_1 ones on an AVX2 CPU (benchmarks/engines.py)."""
    from rsi.models.server.model_files import file_sha256
    from rsi.store.paths import cache_dir

    target = cache_dir() / "models" / f"{src.stem}-{file_sha256(src)[:8]}-f16.gguf"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    params = lib.llama_model_quantize_default_params()
    params.ftype = LLAMA_FTYPE_F16
    params.allow_requantize = True
    params.nthread = 2
    if lib.llama_model_quantize(str(src).encode(), str(tmp).encode(), params) != 0:
        tmp.unlink(missing_ok=True)
        raise LlamaUnavailable(f"llama.cpp could not widen {src} to F16")
    tmp.replace(target)  # atomic: a concurrent starter sees all of it or none
    return target


@dataclass
class Slot:
    """One KV sequence of the context: which adapter's KV it holds and for which tokens."""

    seq: int
    key: str = ""  # the adapter's prefix-cache key (engine_base._kv_key); "" = empty
    tokens: list[int] = field(default_factory=list)
    row: Row | None = None
    used_at: float = 0.0


def _common(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


_LOG_CALLBACK: list[Any] = []  # the one log callback llama.cpp holds a pointer to, alive as long as the process


def quiet_llama(lib: Any) -> None:
    """Route llama.cpp's log to stderr, errors only. The callback is process-wide (llama.cpp keeps one pointer),
    so it is made once and never freed: one per engine left a dangling pointer when that engine was collected,
    and the next log line (another engine's free) crashed the process."""
    if _LOG_CALLBACK:
        return
    last = [0]

    def log(level: int, text: bytes, _user: Any) -> None:
        if level != 5:  # GGML_LOG_LEVEL_CONT continues the message before it
            last[0] = level
        if last[0] == 4 and text:  # GGML_LOG_LEVEL_ERROR
            sys.stderr.write(text.decode(errors="replace"))

    _LOG_CALLBACK.append(lib.llama_log_callback(log))
    lib.llama_log_set(_LOG_CALLBACK[0], ctypes.c_void_p(0))


class LlamaEngine(EngineBase):
    """Serves the GGUF with llama.cpp; `submit` / `generate` may be called from many threads at once."""

    kind = "llama"

    def __init__(self, model: str | None = None, *, served_name: str | None = None,
                 sizing: ServerSizing | None = None, slots: int | None = None) -> None:
        lib = llama_lib()
        sizing = sizing or size_server()
        source = resolve_gguf(model)
        model_dir, model_id = resolve_model(model)  # the tokenizer, chat template and config
        self._setup(model_dir, served_name or model_id, sizing, RunningRows)
        if "max_batch" not in sizing.overrides:  # the sizing too, so what the server prints and /health agree
            self.sizing = replace(self.sizing, max_batch=DEFAULT_MAX_BATCH)
            self.max_batch = DEFAULT_MAX_BATCH
        self._lib = lib
        self._quiet()
        lib.llama_backend_init()
        # the bundled model is served widened to F16 (f16_copy); a GGUF the user names is served as it is
        self.source_gguf = source
        self.gguf = f16_copy(lib, source) if model in (None, "", "default") else source
        mparams = lib.llama_model_default_params()
        self._model = lib.llama_model_load_from_file(str(self.gguf).encode(), mparams)
        if not self._model:
            raise LlamaUnavailable(f"llama.cpp could not load {self.gguf}")
        self.n_vocab = int(lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self._model)))
        n_slots = slots or max(2, SLOTS_PER_ROW * self.max_batch)
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = self.context_len * n_slots
        cparams.n_batch = PREFILL_CHUNK
        cparams.n_ubatch = PREFILL_CHUNK
        cparams.n_seq_max = n_slots
        cparams.n_threads = self.sizing.threads
        cparams.n_threads_batch = self.sizing.prefill_threads
        cparams.kv_unified = False  # one KV stream per slot: a step attends to its own rows' tokens only
        cparams.no_perf = True
        self._ctx = lib.llama_init_from_model(self._model, cparams)
        if not self._ctx:
            raise LlamaUnavailable("llama.cpp could not make a context")
        self._mem = lib.llama_get_memory(self._ctx)
        self._slots = [Slot(seq=i) for i in range(n_slots)]
        self._batch_buf = lib.llama_batch_init(PREFILL_CHUNK, 0, 1)
        self._loras: dict[str, Any] = {}  # serve name -> llama_adapter_lora_p
        self.served_sha: dict[str, str] = {}  # serve name -> sha256 of the PEFT weights converted
        self._current_adapter: str | None = None
        self._start()

    def _quiet(self) -> None:
        """llama.cpp logs every load step to stderr; keep its errors only (quiet_llama)."""
        quiet_llama(self._lib)

    def _warm_up(self) -> None:
        super()._warm_up()
        for slot in self._slots:  # the first real request starts from empty KV
            self._clear(slot)

    def _threads(self) -> None:
        torch.set_num_threads(1)  # torch only samples here; llama.cpp has its own threads

    def info(self) -> dict[str, Any]:
        """What the server runs with, for /health and `rsi doctor`."""
        with self._cv:
            queued, running = len(self._pending), len(self._batch)
        return {
            "engine": self.kind,
            "model": self.model_id,
            "gguf": str(self.gguf),
            "source_gguf": str(self.source_gguf),
            "dtype": "f16" if self.gguf != self.source_gguf else "gguf",
            "kernels": "llama.cpp",
            "sizing": {**self.sizing.as_dict(), "max_batch": self.max_batch},
            "slots": len(self._slots),
            "queued": queued,
            "running": running,
            "adapters_sha256": dict(self.served_sha),
            "prefix_cache": vars(self.prefix_cache.stats).copy(),
        }

    def close(self) -> None:
        super().close()
        with self._lock:
            if getattr(self, "_ctx", None):
                self._lib.llama_batch_free(self._batch_buf)
                self._lib.llama_free(self._ctx)
                self._ctx = None
                for lora in self._loras.values():
                    self._lib.llama_adapter_lora_free(lora)
                self._loras.clear()
                self._lib.llama_model_free(self._model)

    # -- adapters ------------------------------------------------------------------------

    def _load_adapter(self, name: str, path: Path) -> None:
        import json

        from rsi.store.paths import cache_dir

        config = json.loads((self.model_dir / "config.json").read_text())
        gguf, sha = convert_peft_adapter(path, config, cache_dir() / "lora-gguf")
        lora = self._lib.llama_adapter_lora_init(self._model, str(gguf).encode())
        if not lora:
            raise EngineError(f"could not load lora adapter '{name}' from '{path}': llama.cpp refused {gguf}")
        self._loras[name] = lora
        self.served_sha[name] = sha

    def _unload_adapter(self, name: str, gone: list[Row]) -> None:
        for r in gone:
            self._release(r, keep=False)
        self._batch.rows = [r for r in self._batch.rows if r not in gone]
        key = self._kv_key(name)
        for s in self._slots:
            if s.key == key and s.row is None:
                self._clear(s)
        self._use_adapter(None)
        self._lib.llama_adapter_lora_free(self._loras.pop(name))
        self.served_sha.pop(name, None)

    def _use_adapter(self, name: str | None) -> None:
        """Apply `name`'s LoRA to the context (None: the base); a no-op when it is already applied."""
        if name == self._current_adapter:
            return
        lib = self._lib
        if name is None:
            rc = lib.llama_set_adapters_lora(self._ctx, None, 0, None)
        else:
            arr = (lib.llama_adapter_lora_p_ctypes * 1)(self._loras[name])
            scales = (ctypes.c_float * 1)(1.0)
            rc = lib.llama_set_adapters_lora(self._ctx, arr, 1, scales)
        if rc != 0:
            raise EngineError(f"llama.cpp could not apply adapter {name}", status=500)
        self._current_adapter = name

    # -- the model -----------------------------------------------------------------------

    def _decode(self, tokens: Sequence[tuple[int, int, int, bool]]) -> None:
        """One llama_decode call: (token, position, sequence, wants logits) per entry."""
        b = self._batch_buf
        b.n_tokens = len(tokens)
        for i, (tok, pos, seq, logits) in enumerate(tokens):
            b.token[i] = tok
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = 1 if logits else 0
        rc = self._lib.llama_decode(self._ctx, b)
        if rc != 0:
            raise EngineError(f"llama_decode failed ({rc})", status=503 if rc == 1 else 500)

    def _logits(self, i: int) -> torch.Tensor:
        """The logits of the i-th output of the last decode call (a copy: the next call overwrites them)."""
        ptr = self._lib.llama_get_logits_ith(self._ctx, i)
        return torch.from_numpy(np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy())

    def _clear(self, slot: Slot, keep: int = 0) -> None:
        self._lib.llama_memory_seq_rm(self._mem, slot.seq, keep, -1)
        del slot.tokens[keep:]
        if keep == 0:
            slot.key = ""

    def _take_slot(self, key: str, ids: list[int], reuse: bool) -> tuple[Slot, int]:
        """A free slot for a prompt, and how many of its tokens are already in that slot's KV."""
        free = [s for s in self._slots if s.row is None]
        if not free:
            raise EngineError("no free KV slot", status=503)  # never: the batch is capped below the slots
        best, keep = min(free, key=lambda s: (bool(s.tokens), s.used_at)), 0
        if reuse:
            for s in free:
                n = _common(s.tokens, ids) if s.key == key else 0
                if n > keep:
                    best, keep = s, n
        keep = min(keep, len(ids) - 1)  # the prompt's last token is always run: its logits start the answer
        if best.key != key:
            keep = 0
        self._clear(best, keep)
        best.key = key
        return best, keep

    def _release(self, row: Row, keep: bool = True) -> None:
        slot: Slot = row.slot  # type: ignore[attr-defined]
        slot.row = None
        slot.used_at = time.monotonic()
        if not keep:
            self._clear(slot)

    def _prefill(self, job: Job, then: Sequence[int] = ()) -> tuple[Row, list[torch.Tensor]]:
        """Prefill the request's prompt (and `then`) in a slot: its row and the logits of the last
        1 + len(then) positions."""
        req = job.request
        if req.model != self.model_id and req.model not in self.adapters:
            raise EngineError(f"The model `{req.model}` does not exist.", status=404)
        ids_t = self.prompt_ids(req)
        ids = [int(x) for x in ids_t.tolist()]
        full = ids + [int(t) for t in then]
        vocab = self.vocab() if req.grammar is not None or req.logprobs or req.prompt_logprobs is not None else None
        row = Row(req, ids_t, self.tokenizer, self._stop_ids, cancel=job.cancelled, on_delta=job.on_delta, vocab=vocab)
        t0 = time.monotonic()
        row.job, row.queue_sec = job, t0 - job.queued_at
        echo = req.prompt_logprobs
        slot, start = self._take_slot(self._kv_key(req.model), full, self.prefix_cache.enabled and echo is None)
        slot.row = row
        row.slot = slot  # type: ignore[attr-defined]
        self._use_adapter(None if req.model == self.model_id else req.model)
        want = len(full) - (1 + len(then))  # first position whose logits are asked for
        out: list[torch.Tensor] = []
        scored: list[tuple[int, float, list[tuple[int, float]]]] = []
        try:
            for lo in range(start, len(full), PREFILL_CHUNK):
                if job.cancelled.is_set():
                    raise Cancelled()
                hi = min(lo + PREFILL_CHUNK, len(full))
                self._decode([(full[p], p, slot.seq, echo is not None or p >= want) for p in range(lo, hi)])
                slot.tokens.extend(full[lo:hi])
                if echo is not None:
                    chunk = torch.stack([self._logits(k) for k in range(hi - lo)])
                    scored += chunk_logprobs(chunk, ids_t[lo + 1: hi + 1], echo)
                    if hi > want:
                        out = [chunk[k] for k in range(max(0, want - lo), hi - lo)]
                else:
                    out += [self._logits(k) for k in range(max(0, want - lo), hi - lo) if lo + k >= want]
        except BaseException:
            self._release(row, keep=False)
            raise
        if vocab is not None and echo is not None:
            row.prompt_logprobs = [logprob_entry(vocab, t, lp, top) for t, lp, top in scored]
        row.cached_tokens = start
        stats = self.prefix_cache.stats
        stats.lookups += 1
        stats.prompt_tokens += len(full)
        stats.cached_tokens += start
        stats.hits += 1 if start else 0
        stats.entries = sum(1 for s in self._slots if s.tokens)
        row.kv_len = len(full)
        row.prefilled_at = time.monotonic()
        row.prefill_sec = row.prefilled_at - t0
        return row, out

    def _iteration(self) -> None:
        rows = self._batch.rows
        gone = [r for r in rows if r.cancel.is_set()]
        for r in gone:
            self._release(r)
            r.job._resolve(error=Cancelled())
        self._batch.rows = rows = [r for r in rows if r not in gone]
        self._admit()
        rows = self._batch.rows
        if not rows:
            return
        done: list[Row] = []
        by_adapter: dict[str, list[Row]] = {}
        for r in rows:
            by_adapter.setdefault(r.adapter, []).append(r)
        for adapter, group in by_adapter.items():
            self._use_adapter(None if adapter == self.model_id else adapter)
            self.decode_stats["forwards"] += 1
            self._decode([(r.last, r.kv_len, r.slot.seq, True) for r in group])  # type: ignore[attr-defined]
            for i, r in enumerate(group):
                r.slot.tokens.append(r.last)  # type: ignore[attr-defined]
                r.kv_len += 1
                if r.advance(r.choose(self._logits(i))):
                    done.append(r)
            self.decode_stats["tokens"] += len(group)
        for r in done:
            self._finish(r)
        self._batch.rows = [r for r in rows if r not in done]

    def _admit(self) -> None:
        while (job := self._next_job()) is not None:
            try:
                if job.request.choice is not None:
                    job._resolve(self._choose(job))
                    continue
                row, logits = self._prefill(job)
            except EngineError as e:
                job._resolve(error=e)
                continue
            if row.advance(row.choose(logits[0])):
                self._finish(row)
            else:
                self._batch.rows.append(row)

    def _finish(self, row: Row) -> None:
        self._release(row)
        self._answer(row)

    def _choose(self, job: Job) -> GenResult:
        """A choice request: the label with the highest summed log-probability after the prompt."""
        labels = job.request.choice or []
        label_ids = [[int(t) for t in self.tokenizer(lab, add_special_tokens=False)["input_ids"]] for lab in labels]
        if any(not ids for ids in label_ids):
            raise EngineError("structured_outputs.choice: a label encodes to no token")
        row, logits = self._prefill(job)
        slot: Slot = row.slot  # type: ignore[attr-defined]
        n = len(slot.tokens)
        try:
            first = torch.log_softmax(logits[0].float(), dim=-1)
            scores = []
            for ids in label_ids:
                score = float(first[ids[0]])
                if len(ids) > 1:
                    self._decode([(t, n + k, slot.seq, True) for k, t in enumerate(ids[:-1])])
                    for k in range(1, len(ids)):
                        score += float(torch.log_softmax(self._logits(k - 1).float(), dim=-1)[ids[k]])
                    self._clear(slot, n)
                scores.append(score)
        finally:
            self._release(row)
        best = max(range(len(labels)), key=lambda i: scores[i])
        return GenResult(
            text=labels[best], tool_calls=[], finish_reason="stop", prompt_tokens=int(row.prompt_ids.numel()),
            completion_tokens=len(label_ids[best]), cached_tokens=row.cached_tokens, queue_sec=row.queue_sec,
            prefill_sec=row.prefill_sec, decode_sec=time.monotonic() - row.prefilled_at,
            completion_ids=label_ids[best], prompt_ids=[int(x) for x in row.prompt_ids.tolist()],
            choice_scores={lab: round(sc, 6) for lab, sc in zip(labels, scores, strict=True)},
        )


__all__ = ["LlamaEngine"]
