"""The embedded server's engine: model loading, LoRA adapters, prompt rendering and generation.

One base model stays resident; PEFT LoRA adapters are added and removed by name, and every request
names either the base or one adapter (vLLM's multi-LoRA convention). A single worker thread owns the
model. By default requests run one at a time, so a greedy answer never depends on what else was
running: attribution re-runs rely on that. With `max_batch > 1`, greedy requests that arrive while
the worker is busy are decoded together as one batch (PEFT mixed-adapter batches, so base and several
adapters share a forward pass); on a CPU decoding is bound by reading the weights, so a batch of four
costs little more than one, but padding and batch shape change the rounding, so a greedy answer may
then differ by a token from the same request run alone. Sampled requests always run alone so a seed
reproduces its output.
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Sandboxes and other processes share the cores: spinning OpenMP workers would steal them for nothing.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedTokenizerBase,
    StoppingCriteria,
    StoppingCriteriaList,
)
from transformers.utils import logging as hf_logging  # noqa: E402

from rsi.core.errors import RsiError  # noqa: E402
from rsi.models.embedded import DEFAULT_MODEL_ID, cache_dir, find_default_gguf  # noqa: E402
from rsi.models.server.tools import parse_tool_calls, render_tool_calls, tools_system_text  # noqa: E402

hf_logging.disable_progress_bar()

BASE_ADAPTER = "__base__"  # PEFT's name for "no adapter" in a mixed batch


class EngineError(RsiError):
    """A request the engine refuses; `status` is the HTTP code the server answers with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


# -- model files ----------------------------------------------------------------------------


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def convert_gguf(gguf: Path, model_id: str) -> Path:
    """A saved transformers copy of `gguf` in the cache, made once (dequantizing takes ~20 s)."""
    target = cache_dir() / "models" / f"{model_id}-{_file_digest(gguf)[:8]}"
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    # The weights are now plain float32; drop the GGUF quantizer so save_pretrained accepts them.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    model.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    try:
        tmp.rename(target)  # atomic: a concurrent starter either sees all of it or none
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)  # another process got there first
    return target


def resolve_model(spec: str | None) -> tuple[Path, str]:
    """(`model dir`, `served id`) for `--model`: default/None = the wheel's SmolLM2, or a path."""
    if spec in (None, "", "default"):
        return convert_gguf(find_default_gguf(), DEFAULT_MODEL_ID), DEFAULT_MODEL_ID
    path = Path(str(spec)).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        model_id = path.name.split(".")[0]
        return convert_gguf(path, model_id), model_id
    if not (path / "config.json").is_file():
        raise RsiError(f"--model: {spec} is neither a .gguf file nor a model directory with config.json", exit_code=2)
    return path.resolve(), path.resolve().name


def config_of(model_dir: Path) -> Any:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(model_dir))


def default_threads() -> int:
    """Half the CPUs, at least 1, at most 4."""
    return max(1, min(4, (os.cpu_count() or 1) // 2))


def default_dtype() -> torch.dtype:
    """bfloat16 where the CPU has native bf16 (halves the weight traffic that bounds decoding)."""
    try:
        if torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return torch.bfloat16
    except (AttributeError, RuntimeError):
        pass
    return torch.float32


# -- requests -------------------------------------------------------------------------------


@dataclass
class GenRequest:
    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: list[str] = field(default_factory=list)
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class GenResult:
    text: str | None
    tool_calls: list[dict[str, Any]]
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    queue_sec: float = 0.0  # waited in the queue before its batch started
    # vLLM's `choices[].stop_reason`: the stop string that ended the text (it is not in `text`),
    # else None (end-of-sequence token or max_tokens).
    stop_reason: str | None = None


@dataclass
class _Job:
    request: GenRequest
    queued_at: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    result: GenResult | None = None
    prompt: str = ""
    error: BaseException | None = None


class _RowStops(StoppingCriteria):
    """Per-row stop: its own max_tokens, or one of its stop strings in the text so far."""

    def __init__(self, tok: PreTrainedTokenizerBase, prompt_len: int, limits: list[int], stops: list[list[str]]):
        self.tok, self.prompt_len, self.limits, self.stops = tok, prompt_len, limits, stops

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        n = input_ids.shape[1] - self.prompt_len
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool)
        for i, (limit, stops) in enumerate(zip(self.limits, self.stops, strict=True)):
            if n >= limit:
                done[i] = True
            elif stops:
                tail = self.tok.decode(input_ids[i, self.prompt_len :][-32:], skip_special_tokens=True)
                done[i] = any(s in tail for s in stops)
        return done  # type: ignore[return-value]


# -- engine ---------------------------------------------------------------------------------


class Engine:
    """Owns the model; `generate` may be called from many threads at once."""

    def __init__(
        self,
        model: str | None = None,
        *,
        dtype: torch.dtype | None = None,
        threads: int | None = None,
        served_name: str | None = None,
        max_batch: int = 1,
    ) -> None:
        # Decoding is bound by memory bandwidth, so one thread per two cores loses little and leaves
        # the rest to the sandboxes (measured on 2 shared cores: 1 thread 29-30 tok/s, 2 threads 21-27).
        torch.set_num_threads(threads or default_threads())
        self.model_dir, model_id = resolve_model(model)
        self.model_id = served_name or model_id
        self.max_batch = max(1, max_batch)
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.model_dir))
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.dtype = dtype or default_dtype()
        self.context_len = int(getattr(config_of(self.model_dir), "max_position_embeddings", 0) or 8192)
        self.model: Any = AutoModelForCausalLM.from_pretrained(str(self.model_dir), dtype=self.dtype).eval()
        self.adapters: dict[str, str] = {}  # serve name -> path
        self._stop_ids = self._stop_token_ids()
        template = self.tokenizer.chat_template or ""
        self._template_has_tools = "tools" in template
        self._lock = threading.Lock()  # guards self.model / self.adapters against the worker
        self._queue: queue.Queue[_Job] = queue.Queue()
        self._warm_up()
        self._worker = threading.Thread(target=self._run, name="rsi-engine", daemon=True)
        self._worker.start()

    def _warm_up(self) -> None:
        """One tiny generation, so the first real request does not pay for kernel set-up."""
        req = GenRequest(model=self.model_id, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)
        self._generate_batch([(req, self.render(req))])

    def _stop_token_ids(self) -> list[int]:
        ids = {self.tokenizer.eos_token_id}
        for tok in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>"):
            tid = self.tokenizer.convert_tokens_to_ids(tok)
            if isinstance(tid, int) and tid != self.tokenizer.unk_token_id:
                ids.add(tid)
        return sorted(i for i in ids if i is not None)

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
            self.adapters[name] = str(p)

    def unload_adapter(self, name: str) -> None:
        with self._lock:
            if name not in self.adapters:
                raise EngineError(f"The lora adapter '{name}' cannot be found.", status=404)
            del self.adapters[name]
            if self.adapters:
                self.model.delete_adapter(name)
            else:  # last one: strip the LoRA layers so base requests run at full speed
                self.model = self.model.unload().eval()

    # -- prompts -------------------------------------------------------------------------

    def render(self, req: GenRequest) -> str:
        """The request's prompt text via the chat template (tools in the system prompt if needed)."""
        msgs: list[dict[str, Any]] = []
        for m in req.messages:
            content = m.get("content")
            if isinstance(content, list):  # OpenAI content parts: keep the text ones
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            content = content or ""
            if m.get("tool_calls"):
                content = "\n".join(x for x in (content, render_tool_calls(m["tool_calls"])) if x)
            msgs.append({"role": m["role"], "content": content})
        kwargs: dict[str, Any] = {}
        if req.tools:
            if self._template_has_tools:
                kwargs["tools"] = req.tools
            else:
                tool_text = tools_system_text(req.tools)
                if msgs and msgs[0]["role"] == "system":
                    msgs[0] = {"role": "system", "content": msgs[0]["content"] + "\n\n" + tool_text}
                else:
                    msgs.insert(0, {"role": "system", "content": tool_text})
        try:
            return str(self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True, **kwargs))
        except Exception as e:  # jinja errors from the model's own template
            raise EngineError(f"messages could not be rendered with the chat template: {e}") from e

    # -- generation ----------------------------------------------------------------------

    def generate(self, req: GenRequest) -> GenResult:
        """Run one request (queued behind others; batched with compatible ones)."""
        if req.model != self.model_id and req.model not in self.adapters:
            raise EngineError(f"The model `{req.model}` does not exist.", status=404)
        job = _Job(req)
        self._queue.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        assert job.result is not None
        return job.result

    def _run(self) -> None:
        held: list[_Job] = []
        while True:
            first = held.pop(0) if held else self._queue.get()
            batch = [first]
            if first.request.greedy:
                while len(batch) < self.max_batch:
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    (batch if nxt.request.greedy else held).append(nxt)
            try:
                with self._lock:
                    began = time.monotonic()
                    batch = self._admit(batch)
                    results = self._generate_batch([(j.request, j.prompt) for j in batch]) if batch else []
                for job, res in zip(batch, results, strict=True):
                    res.queue_sec = max(0.0, began - job.queued_at)
                    job.result = res
            except BaseException as e:  # noqa: BLE001 — handed to the waiting request threads
                for job in batch:
                    job.error = e if isinstance(e, EngineError) else EngineError(f"generation failed: {e}", 500)
            for job in batch:
                job.done.set()

    def _admit(self, batch: list[_Job]) -> list[_Job]:
        """Render each job's prompt; answer at once those that cannot run, keep the rest.

        A job fails alone (its adapter was unloaded while it waited, its messages do not render,
        or prompt + max_tokens exceed the context), so it never takes its batch mates down.
        """
        keep = []
        for job in batch:
            req = job.request
            try:
                if req.model != self.model_id and req.model not in self.adapters:
                    raise EngineError(f"The model `{req.model}` does not exist.", status=404)
                job.prompt = self.render(req)
                n = len(self.tokenizer(job.prompt, add_special_tokens=False)["input_ids"])
                if n + req.max_tokens > self.context_len:
                    raise EngineError(
                        f"This model's maximum context length is {self.context_len} tokens. However, you "
                        f"requested {n + req.max_tokens} tokens ({n} in the messages, {req.max_tokens} in "
                        "the completion). Please reduce the length of the messages or completion."
                    )
                keep.append(job)
            except EngineError as e:
                job.error = e
                job.done.set()
        return keep

    @torch.inference_mode()
    def _generate_batch(self, items: list[tuple[GenRequest, str]]) -> list[GenResult]:
        reqs = [r for r, _ in items]
        prompts = [p for _, p in items]
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        prompt_len = int(enc["input_ids"].shape[1])
        first = reqs[0]
        kwargs: dict[str, Any] = {
            "max_new_tokens": max(r.max_tokens for r in reqs),
            "eos_token_id": self._stop_ids,
            "pad_token_id": self.tokenizer.pad_token_id,
            "stopping_criteria": StoppingCriteriaList(
                [_RowStops(self.tokenizer, prompt_len, [r.max_tokens for r in reqs], [r.stop for r in reqs])]
            ),
        }
        if first.greedy:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            # top_k=0: OpenAI sampling has no top-k (transformers would default to 50)
            kwargs.update(do_sample=True, temperature=first.temperature, top_p=first.top_p, top_k=0)
            if first.seed is not None:
                torch.manual_seed(first.seed)
        if self.adapters:
            kwargs["adapter_names"] = [BASE_ADAPTER if r.model == self.model_id else r.model for r in reqs]
        out = self.model.generate(**enc, **kwargs)
        return [self._finish(r, out[i, prompt_len:], int(enc["attention_mask"][i].sum())) for i, r in enumerate(reqs)]

    def _finish(self, req: GenRequest, new_ids: torch.Tensor, prompt_tokens: int) -> GenResult:
        ids = new_ids.tolist()
        finish = "length"
        for k, t in enumerate(ids):
            if t in self._stop_ids:
                ids, finish = ids[: k + 1], "stop"
                break
        ids = ids[: req.max_tokens]
        text = str(self.tokenizer.decode(ids, skip_special_tokens=True))
        hits = [(text.find(s), s) for s in req.stop if s and s in text]
        stop_reason = None
        if hits:
            cut, stop_reason = min(hits)
            text, finish = text[:cut], "stop"
        content, calls = parse_tool_calls(text, tools_offered=bool(req.tools))
        if calls:
            finish = "tool_calls"
        return GenResult(
            text=content,
            tool_calls=calls,
            finish_reason=finish,
            prompt_tokens=prompt_tokens,
            completion_tokens=len(ids),
            stop_reason=stop_reason,
        )


def request_from_body(body: Any) -> GenRequest:
    """Validate an OpenAI chat-completions body into a GenRequest (EngineError 400 if malformed)."""
    if not isinstance(body, dict):
        raise EngineError("request body must be a JSON object")
    model, messages = body.get("model"), body.get("messages")
    if not isinstance(model, str) or not model:
        raise EngineError("'model' is required and must be a string")
    if not isinstance(messages, list) or not messages:
        raise EngineError("'messages' must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise EngineError(f"messages[{i}] must be an object with a string 'role'")
    if body.get("stream"):
        raise EngineError("'stream' is not supported by the embedded server")
    stop = body.get("stop") or []
    if isinstance(stop, str):
        stop = [stop]
    tools = body.get("tools") or None
    try:
        req = GenRequest(
            model=model,
            messages=messages,
            tools=tools,
            temperature=float(body["temperature"]) if body.get("temperature") is not None else 0.0,
            top_p=float(body["top_p"]) if body.get("top_p") is not None else 1.0,
            max_tokens=int(body.get("max_tokens") or body.get("max_completion_tokens") or 256),
            stop=[str(s) for s in stop],
            seed=int(body["seed"]) if body.get("seed") is not None else None,
        )
    except (TypeError, ValueError) as e:
        raise EngineError(f"invalid sampling parameter: {e}") from None
    if req.temperature < 0 or not 0 < req.top_p <= 1 or req.max_tokens < 1:
        raise EngineError("need temperature >= 0, 0 < top_p <= 1 and max_tokens >= 1")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        raise EngineError("'tools' must be a list of objects")
    json.dumps(tools)  # tools travel into the prompt as JSON
    return req
