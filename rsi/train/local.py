"""The `local` training backend: PEFT LoRA on the frozen base with torch (CPU here, a GPU when there is one).

Samples are policy turns: for every assistant turn of a trajectory after the harness's head, the prompt
the server saw and the completion it sampled. Where the dataset carries the server's token ids (the
embedded server returns them; vLLM does with `return_token_ids`), those exact ids are trained on, and
the trainer's own rendering of the same messages (chat template + tokenizer, as the embedded server
renders them) is checked against them token for token; a turn where they differ is refused and counted.
Without token ids the turn is rendered (text-format trajectories only). A `gateway` line (an external harness's
calls as the recording gateway saw them) is trained on its served ids exactly, never rendered or re-tokenised; a
gateway turn without ids is dropped and counted (`no_tokens_gateway`).

Throughput (issue 36; `train.pack`, `train.dtype`, `train.threads`): the turns of a trajectory share one
sequence where their tokens chain, sequences are batched by length into forwards of at most `pack_tokens`
padded tokens (rsi.train.packing), the vocabulary projection runs only at completion tokens (in float32), and
the decoder's matmuls run under bfloat16 autocast where the device has native bf16; torch uses the physical
cores and one inter-op thread. `benchmarks/train_throughput.py` measures it against the machine's matmul rate.

Objectives (`sft`, `pg`, `sft+pg`), KL to the parent and early stopping: rsi.train.fit. Lines marked
`validation` (templates held out of training) are never trained on: their accepted completions make the
early-stopping curve.

Deterministic on the CPU for a seed (fixed sample order, no dropout by default, deterministic algorithms).
The base weights are never written: their digest before and after is recorded (`base_unchanged`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path
from typing import Any

from rsi.train.base import TrainError, TrainRequest, TrainResult
from rsi.train.dataset import DatasetLine, read_dataset
from rsi.train.fit import Sample, fit, pick_validation
from rsi.train.packing import chain_rows, plan_forwards


def render_prompt(tok: Any, messages: list[dict[str, Any]]) -> list[int]:
    """The prompt ids the embedded server builds for text-format messages (chat template, no extra specials)."""
    msgs = [{"role": m["role"], "content": m.get("content") or ""} for m in messages]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    return list(tok(text, add_special_tokens=False)["input_ids"])


def build_samples(lines: list[DatasetLine], tok: Any, max_len: int) -> tuple[list[Sample], dict[str, int]]:
    """Samples of every policy turn, and counts: turns, token-checked, equal, refused (mismatch), too long."""
    stats = {"turns": 0, "token_checked": 0, "token_equal": 0, "token_mismatch": 0, "too_long": 0,
             "no_tokens_tool_calls": 0, "token_served": 0, "no_tokens_gateway": 0}
    end_id = tok.convert_tokens_to_ids("<|im_end|>")
    out: list[Sample] = []
    for ln in lines:
        turn_idx = [i for i, m in enumerate(ln.messages) if i >= ln.prompt_messages and m["role"] == "assistant"]
        tokens = ln.tokens if ln.tokens and len(ln.tokens) == len(turn_idx) else None
        textual = not ln.tools and not any(m.get("tool_calls") for m in ln.messages)
        for k, i in enumerate(turn_idx):
            stats["turns"] += 1
            old: list[float] | None = None
            gateway = ln.source == "gateway"
            if gateway and tokens is None:  # a gateway sample is its served ids or nothing: never re-rendered
                stats["no_tokens_gateway"] += 1
                continue
            if tokens is not None:
                prompt = [int(x) for x in tokens[k]["prompt_token_ids"]]
                completion = [int(x) for x in tokens[k]["completion_token_ids"]]
                lp = tokens[k].get("logprobs")
                old = [float(x) for x in lp] if lp and len(lp) == len(completion) else None
                if gateway:  # the ids the endpoint served, as the gateway recorded them: trained as they are
                    stats["token_served"] += 1
                elif textual:
                    stats["token_checked"] += 1
                    if render_prompt(tok, ln.messages[:i]) != prompt:
                        stats["token_mismatch"] += 1
                        continue
                    stats["token_equal"] += 1
            elif textual:
                prompt = render_prompt(tok, ln.messages[:i])
                completion = list(tok(ln.messages[i].get("content") or "", add_special_tokens=False)["input_ids"])
                completion.append(int(end_id))
            else:
                stats["no_tokens_tool_calls"] += 1
                continue
            if not completion:
                continue
            if len(prompt) + len(completion) > max_len:
                stats["too_long"] += 1
                continue
            # only the model's own rollouts carry a policy-gradient term (hinted and oracle lines are SFT only)
            own = ln.source in ("self", "gateway")
            out.append(Sample(prompt, completion, old if own else None, ln.advantage if own else 0.0, ln.accepted,
                              str(ln.provenance.get("trial_id", "")), validation=ln.validation,
                              template=str(ln.provenance.get("template") or ln.provenance.get("task") or "")))
    return out, stats


def _base_digest(model: Any) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        if "lora_" in name:
            continue
        h.update(name.replace("base_model.model.", "").replace(".base_layer", "").encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def physical_cores() -> int:
    """Physical cores this process may use (hyper-threads share a core's matmul units)."""
    import psutil

    logical = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    phys = psutil.cpu_count(logical=False) or logical
    per_core = max(1, (psutil.cpu_count(logical=True) or logical) // phys)
    return max(1, logical // per_core)


def native_bf16(device: Any) -> bool:
    """Whether `device` multiplies bfloat16 natively (AVX512-BF16 or AMX on a CPU, a bf16 GPU)."""
    import torch

    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    cpu = getattr(torch, "cpu", None)
    return any(bool(getattr(cpu, f, lambda: False)()) for f in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"))


def compute_dtype(setting: str, device: Any) -> Any:
    """The autocast dtype for `train.dtype` (None: plain float32)."""
    import torch

    if setting == "bfloat16" or (setting == "auto" and native_bf16(device)):
        return torch.bfloat16
    return None


def set_threads(threads: int | None) -> dict[str, int]:
    """torch's intra-op threads (`threads`, else the physical cores) and one inter-op thread (a training step
    is one chain of ops: a second pool only competes for the same cores)."""
    import torch

    torch.set_num_threads(threads or physical_cores())
    with contextlib.suppress(RuntimeError):  # fixed for good once parallel work ran in this process
        torch.set_num_interop_threads(1)
    return {"intra_op": torch.get_num_threads(), "inter_op": torch.get_num_interop_threads()}


class TorchScorer:
    """Completion log-probabilities from a causal LM (a PEFT model): with `pack`, samples chained into rows and
    rows batched into padded forwards, the vocabulary projection only at completion tokens and in float32, the
    rest under `autocast` (a dtype, or None); without, one sample a forward with every position's logits (the
    pre-issue-36 loop)."""

    def __init__(self, model: Any, device: Any, *, pack: bool, max_tokens: int, autocast: Any = None) -> None:
        self.model, self.device, self.pack, self.max_tokens, self.autocast = model, device, pack, max_tokens, autocast
        # the work done, for the throughput figures: forwards, tokens through the decoder (`padded`: with the
        # padding), attention query-key pairs (causal), positions through the vocabulary projection; the
        # `train` counts are the forwards that build a graph (the optimisation steps), `all` every forward
        self.counts: dict[str, dict[str, int]] = {k: dict.fromkeys(("forwards", "tokens", "padded", "pairs", "head"), 0)
                                                  for k in ("train", "all")}

    def _count(self, lengths: list[int], width: int, head: int) -> None:
        import torch

        for key in ("train", "all") if torch.is_grad_enabled() else ("all",):
            c = self.counts[key]
            c["forwards"] += 1
            c["tokens"] += sum(lengths)
            c["padded"] += width * len(lengths)
            c["pairs"] += sum(n * (n + 1) // 2 for n in lengths)
            c["head"] += head

    def split(self, samples: list[Sample]) -> list[list[Sample]]:
        if not self.pack:
            return [[x] for x in samples]
        return [[samples[sp.index] for r in fwd for sp in r.spans]
                for fwd in plan_forwards(chain_rows(samples), self.max_tokens)]

    def __call__(self, samples: list[Sample]) -> list[Any]:
        import torch

        if not self.pack:
            return [self._one(x) for x in samples]
        rows = chain_rows(samples)
        width = max(len(r.ids) for r in rows)
        ids = torch.zeros((len(rows), width), dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for b, r in enumerate(rows):
            ids[b, : len(r.ids)] = torch.tensor(r.ids)
            mask[b, : len(r.ids)] = 1
        # position p predicts token p + 1: a completion ids[start:end] is scored at positions start-1 .. end-2
        bi, pi, order, sizes = [], [], [], []
        for b, r in enumerate(rows):
            for sp in r.spans:
                bi += [b] * (sp.end - sp.start)
                pi += list(range(sp.start - 1, sp.end - 1))
                order.append(sp.index)
                sizes.append(sp.end - sp.start)
        ids = ids.to(self.device)
        b_idx, p_idx = torch.tensor(bi, device=self.device), torch.tensor(pi, device=self.device)
        lm = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        decoder = getattr(lm, lm.base_model_prefix)  # the transformer without its vocabulary projection
        with self._autocast():
            hidden = decoder(input_ids=ids, attention_mask=None if bool(mask.all()) else mask.to(self.device),
                              use_cache=False).last_hidden_state
        with torch.autocast(self.device.type, enabled=False):
            logits = lm.get_output_embeddings()(hidden[b_idx, p_idx].float()).float()
            lp = torch.log_softmax(logits, dim=-1).gather(1, ids[b_idx, p_idx + 1][:, None])[:, 0]
        self._count([len(r.ids) for r in rows], width, len(bi))
        out: list[Any] = [None] * len(samples)
        for i, part in zip(order, torch.split(lp, sizes), strict=True):
            out[i] = part
        return out

    def _one(self, x: Sample) -> Any:
        import torch

        ids = torch.tensor([x.prompt + x.completion], device=self.device)
        with self._autocast():
            logits = self.model(input_ids=ids).logits[0, len(x.prompt) - 1 : -1].float()
        lp = torch.log_softmax(logits, dim=-1)
        self._count([ids.shape[1]], ids.shape[1], ids.shape[1])  # the vocabulary projection at every position
        return lp.gather(1, torch.tensor(x.completion, device=self.device)[:, None])[:, 0]

    def _autocast(self) -> Any:
        import torch

        if self.autocast is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast)


class LocalBackend:
    name = "local"

    def train(self, req: TrainRequest) -> TrainResult:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import warnings

        import torch
        from peft import LoraConfig, PeftModel, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        # the CLI draws its own bar for the steps: no weight-loading bar or deprecation notes in between
        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"(transformers|peft)\.")
        # PEFT looks for the base's config by its hub name to check the vocabulary; offline it cannot, and says so
        warnings.filterwarnings("ignore", message="Could not find a config file", category=UserWarning)

        base_dir = req.base_dir()
        if base_dir is None:
            raise TrainError("the local backend needs the base model as a transformers directory")
        t0 = time.monotonic()
        s = req.settings
        torch.manual_seed(s.seed)
        # every physical core: no trial runs while an update trains (the model server, if up, sits idle)
        threads = set_threads(s.threads)
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        autocast = compute_dtype(s.dtype, device)
        # cuBLAS is deterministic only with a fixed workspace; on the GPU a nondeterministic op warns
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=device.type == "cuda")
        tok = AutoTokenizer.from_pretrained(str(base_dir))
        base: Any = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
        base = base.to(device)
        base_before = _base_digest(base)
        if req.parent_adapter is not None:
            model = PeftModel.from_pretrained(base, str(req.parent_adapter), is_trainable=True)
        else:
            cfg = LoraConfig(r=s.rank, lora_alpha=s.alpha, lora_dropout=s.dropout, target_modules=s.target_modules,
                             bias="none", task_type="CAUSAL_LM")
            model = get_peft_model(base, cfg)
        samples, stats = build_samples(read_dataset(req.dataset), tok, s.max_seq_len)
        held = [x for x in samples if x.validation]
        samples = [x for x in samples if not x.validation]
        req.log(f"samples: {len(samples)} policy turns, {len(held)} held out for validation ({stats})")
        want_sft, want_pg = "sft" in req.objective, "pg" in req.objective
        sft = [x for x in samples if x.accepted] if want_sft else []
        pg = [x for x in samples if x.advantage != 0.0] if want_pg else []
        if not sft and not pg:
            raise TrainError(f"nothing to train on for objective {req.objective}: {len(samples)} samples, "
                             f"{sum(x.accepted for x in samples)} accepted, "
                             f"{sum(x.advantage != 0 for x in samples)} with a non-zero advantage ({stats})")
        evaluate = pick_validation([x for x in samples if x.accepted] or sft + pg, s.eval_max_samples)
        validation = pick_validation([x for x in held if x.accepted], s.validation_max_samples)

        scorer = TorchScorer(model, device, pack=s.pack, max_tokens=s.pack_tokens, autocast=autocast)
        kl_coef = float(s.kl_coef or 0.0)
        model.train()
        t_fit = time.monotonic()
        res = fit(model, scorer, sft=sft, pg=pg, validation=validation, s=s, kl_coef=kl_coef, evaluate=evaluate,
                  progress=req.progress)
        fit_sec = time.monotonic() - t_fit
        before, after, losses = res.logprob_before, res.logprob_after, res.losses
        base_after = _base_digest(model.get_base_model())
        if base_after != base_before:
            raise TrainError("the base weights changed during training (only the adapter may)")
        req.output_dir.mkdir(parents=True, exist_ok=True)
        for c in model.peft_config.values():
            c.base_model_name_or_path = req.base_model
        model.save_pretrained(str(req.output_dir))
        metrics: dict[str, Any] = {
            "device": str(device), "samples": len(samples), "sft_samples": len(sft), "pg_samples": len(pg),
            "tokens": stats, "logprob_before": round(before, 6), "logprob_after": round(after, 6),
            "logprob_delta": round(after - before, 6), "logprob_eval_samples": len(evaluate),
            "steps_planned": s.steps, "kl_coef": kl_coef,
            "kl_reference": ("parent adapter" if req.parent_adapter else "base model (the parent has no adapter)")
            if kl_coef > 0 else None,
            "kl_curve": [round(k, 6) for k in res.kl_curve],
            "kl_last": round(res.kl_curve[-1], 6) if res.kl_curve else None,
            "validation": res.validation,
            "base_digest": base_before, "base_unchanged": True, "seed": s.seed,
            "parent_adapter": str(req.parent_adapter) if req.parent_adapter else None,
            "wall_sec": round(time.monotonic() - t0, 2),
            "throughput": {"pack": s.pack, "pack_tokens": s.pack_tokens, "threads": threads,
                           "dtype": str(autocast or torch.float32).replace("torch.", ""), "fit_sec": round(fit_sec, 2),
                           "setup_sec": round(t_fit - t0, 2),  # loading the model and tokenising, before the fit
                           "train_sec": round(res.train_sec, 3), "forward_sec": round(res.forward_sec, 3),
                           "backward_sec": round(res.backward_sec, 3), "optimizer_sec": round(res.optimizer_sec, 3),
                           "trained_samples": res.trained_samples,
                           "trained_tokens": res.trained_tokens,
                           "samples_per_sec": round(res.trained_samples / res.train_sec, 3) if res.train_sec else None,
                           "tokens_per_sec": round(res.trained_tokens / res.train_sec, 1) if res.train_sec else None,
                           **{f"{k}_work": v for k, v in scorer.counts.items()}},
        }
        req.log(f"mean logprob of accepted completions {before:.4f} -> {after:.4f}")
        v = res.validation
        if v.get("curve"):
            req.log(f"validation ({v['samples']} completions of {len(v['templates'])} held-out template(s)): "
                    + " ".join(f"{st}:{val:.3f}" for st, val in v["curve"])
                    + (f"; stopped at step {v['stopped_at']}" if v.get("stopped_at") is not None else "")
                    + (f"; kept step {v['restored_step']}" if v.get("restored_step") is not None else ""))
        return TrainResult(adapter_dir=Path(req.output_dir), steps=res.steps, losses=losses, metrics=metrics)


__all__ = ["LocalBackend", "Sample", "TorchScorer", "build_samples", "compute_dtype", "physical_cores",
           "render_prompt", "set_threads"]
