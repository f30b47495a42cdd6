"""A trainer of your own behind `rsi update --backend command`: LoRA SFT with PEFT on rsi's dataset.

rsi writes the accepted trajectories to `dataset.jsonl` (docs/formats.md) and runs your command; whatever the
command leaves in `{output_dir}` as a PEFT adapter (adapter_config.json + adapter_model.safetensors) becomes the
candidate generation. This script is the smallest complete such trainer: it renders each trajectory with the base
model's own chat template, trains only on the assistant turns after the harness's head (`prompt_messages`), and
saves the adapter.

    rsi update --backend command \\
      --command 'python examples/train_peft_sft.py {dataset} {base_model_dir} {output_dir} --steps 60'

On a GPU box the same command runs as is (it moves to CUDA when there is one); swap the loop for TRL's
`SFTTrainer` on the `trl_sft.jsonl` export beside the dataset if you prefer, as long as a PEFT adapter ends up
in `{output_dir}`. Needs torch, transformers and peft (`pip install 'rsi[model]'`).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any


def load_samples(dataset: Path) -> list[dict[str, Any]]:
    """Accepted training lines (validation lines are for measuring, never for training)."""
    path = dataset / "dataset.jsonl" if dataset.is_dir() else dataset
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    return [d for d in lines if d.get("accepted") and not d.get("validation")]


def as_chat(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Plain role/content messages any chat template takes: tool calls as JSON text, tool results as user turns
    (a model whose template takes `tools` can be given them instead)."""
    out = []
    for m in messages:
        content = m.get("content") or ""
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if m.get("tool_calls"):
            calls = [{"name": c["function"]["name"], "arguments": c["function"].get("arguments")}
                     for c in m["tool_calls"]]
            content = (content + "\n" if content else "") + json.dumps(calls)
        role = m["role"] if m["role"] in ("system", "user", "assistant") else "user"
        out.append({"role": role, "content": content})
    return out


def encode(tok: Any, sample: dict[str, Any], max_len: int) -> tuple[list[int], list[int]] | None:
    """Token ids of the whole conversation and labels that keep only the trained assistant turns (-100 elsewhere)."""
    msgs = as_chat(sample["messages"])
    head = int(sample.get("prompt_messages", 0))

    def ids(upto: int, gen_prompt: bool) -> list[int]:
        out = tok.apply_chat_template(msgs[:upto], add_generation_prompt=gen_prompt, tokenize=True)
        return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "keys") else out)

    full = ids(len(msgs), False)
    labels = [-100] * len(full)
    for i, m in enumerate(msgs):
        if m["role"] != "assistant" or i < head:
            continue
        start, end = len(ids(i, True)), len(ids(i + 1, False))
        labels[start:end] = full[start:end]
    full, labels = full[:max_len], labels[:max_len]
    return (full, labels) if any(x != -100 for x in labels) else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dataset", type=Path, help="rsi's dataset.jsonl (or the directory holding it): {dataset}")
    ap.add_argument("base", help="the base model's transformers directory or hub id: {base_model_dir}")
    ap.add_argument("output_dir", type=Path, help="where the PEFT adapter goes: {output_dir}")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    samples = load_samples(args.dataset)
    tok = AutoTokenizer.from_pretrained(args.base)
    rows = [r for s in samples if (r := encode(tok, s, args.max_len)) is not None]
    if not rows:
        print(f"no trainable samples in {args.dataset} ({len(samples)} accepted)", file=sys.stderr)
        return 1
    print(f"training on {len(rows)} samples ({len(samples)} accepted) for {args.steps} steps", flush=True)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = AutoModelForCausalLM.from_pretrained(args.base, dtype=torch.float32).to(device)
    model = get_peft_model(model, LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0,
                                             target_modules=["q_proj", "k_proj", "v_proj", "o_proj"],
                                             task_type="CAUSAL_LM"))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    model.train()
    for step in range(1, args.steps + 1):
        batch = [rows[rng.randrange(len(rows))] for _ in range(args.batch_size)]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in batch], device=device)
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in batch], device=device)
        mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in batch], device=device)
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}/{args.steps} loss {loss.item():.4f}", flush=True)
    args.output_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.output_dir)
    print(f"adapter saved to {args.output_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
