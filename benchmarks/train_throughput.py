"""The local training backend's throughput against the machine's matmul limit (issue 36, item 6).

Run (heavy: loads and trains the real model): `flock /tmp/heavy.lock python benchmarks/train_throughput.py`.
Everything is measured in this one run, on the bundled SmolLM2-135M (rsi.models.server.model_files.resolve_model,
offline), with the thread settings the backend uses (rsi.train.local.set_threads):

- **limit**: sustained GFLOP/s of torch matmuls at the model's shapes (per decoder layer: q, k, v, o, gate, up,
  down forward, and their input-gradient matmuls, over `--limit-tokens` rows), float32 and bfloat16.
- **training**: the local backend (rsi.train.local.LocalBackend, SFT, LoRA as `train:` defaults) on a synthetic
  dataset rendered like the harness's (harness_configs/default.yaml's system prompt, few-shot example and
  instruction, then a few ```bash turns with observations and the finish word; ~300 tokens a trajectory), in three
  arms on the same data: `old` (train.pack=false, dtype=float32: one turn a forward, the loop before issue 36),
  `pack-fp32` (pack, float32) and `new` (the defaults: pack, dtype=auto, bfloat16 here where the CPU has it).
  Training tokens/s counts each trained turn's prompt + completion (what one forward per turn computes), over the
  optimisation steps only; samples/s is turns per second.
- **ratio**: the FLOP rate each arm achieved (FLOPs of the work it did: decoder matmuls forward 2N and backward
  through activations 2N per token, padding included; causal attention; the vocabulary projection where it ran;
  LoRA's own forward, backward and weight gradients) over the matmul limit in its dtype, and each arm's
  throughput over `old`'s.
- **accuracy**: `pack-fp32` and `new` draw the same batches, so their loss curves compare step by step; all three
  measure the same completions before training (`logprob_before`).
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

print = functools.partial(print, flush=True)  # noqa: A001  (progress on a shared machine)
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from _records import Recorder  # noqa: E402

from rsi.core.contract import Contract  # noqa: E402
from rsi.core.harness_config import HarnessConfig  # noqa: E402
from rsi.core.training import TrainSettings  # noqa: E402
from rsi.harness.prompts import initial_messages, prompt_variables  # noqa: E402

# (instruction, [(command, observation)]) — everyday shell work in the shape the harness records
WORK = [
    ("Count the lines of /app/data.csv and write the number to /app/count.txt.",
     [("wc -l < /app/data.csv > /app/count.txt && cat /app/count.txt", "42"),
      ("head -3 /app/data.csv", "id,name,score\n1,ada,91\n2,bob,78")]),
    ("Write the names of the .log files in /app/logs, sorted, to /app/logs.txt.",
     [("ls /app/logs", "a.log\nb.txt\nc.log\nnotes.md"),
      ("ls /app/logs/*.log | xargs -n1 basename | sort > /app/logs.txt && cat /app/logs.txt", "a.log\nc.log")]),
    ("Replace every 'foo' with 'bar' in /app/config.ini.",
     [("grep -n foo /app/config.ini", "3:name=foo\n7:path=/srv/foo/data"),
      ("sed -i 's/foo/bar/g' /app/config.ini && grep -c bar /app/config.ini", "2")]),
    ("Find the largest file under /app/src and write its path to /app/largest.txt.",
     [("find /app/src -type f -printf '%s %p\\n' | sort -n | tail -1", "20480 /app/src/lib/core.py"),
      ("echo /app/src/lib/core.py > /app/largest.txt && cat /app/largest.txt", "/app/src/lib/core.py")]),
    ("Sum the third column of /app/sales.tsv into /app/total.txt.",
     [("head -2 /app/sales.tsv", "region\tunits\tamount\nnorth\t3\t120"),
      ("awk -F'\\t' 'NR>1 {s+=$3} END {print s}' /app/sales.tsv > /app/total.txt && cat /app/total.txt", "4315"),
      ("wc -l /app/sales.tsv", "38 /app/sales.tsv")]),
    ("Extract the unique IP addresses from /app/access.log into /app/ips.txt, one per line.",
     [("head -2 /app/access.log", "10.0.0.1 - - [01/Jan] \"GET /\" 200\n10.0.0.7 - - [01/Jan] \"GET /a\" 404"),
      ("cut -d' ' -f1 /app/access.log | sort -u > /app/ips.txt && wc -l /app/ips.txt", "6 /app/ips.txt")]),
]


def trajectories(cfg: HarnessConfig, contract: Contract, n: int, seed: int) -> list[Any]:
    """`n` dataset lines: the harness's head for an instruction, then its bash turns and DONE."""
    from rsi.train.dataset import DatasetLine

    rng = random.Random(seed)
    tools = contract.openai_tools(cfg.tools)
    out = []
    for i in range(n):
        instr, turns = WORK[i % len(WORK)]
        instr = instr.replace("/app/", f"/app/w{i}/") if i >= len(WORK) else instr
        head = initial_messages(cfg, prompt_variables(cfg, instruction=instr, workdir="/app", tools=tools,
                                                      max_turns=cfg.loop.max_turns, task=f"t{i}"))
        msgs = list(head)
        for cmd, obs in turns[: rng.randint(2, len(turns))] if len(turns) > 2 else turns:
            msgs.append({"role": "assistant", "content": f"```bash\n{cmd}\n```"})
            msgs.append({"role": "user", "content": f"{obs}\n[exit code 0]"})
        msgs.append({"role": "assistant", "content": cfg.loop.finish_word})
        out.append(DatasetLine(messages=msgs, tools=[], reward=1.0, accepted=True, group_id=f"g{i}", sample_index=0,
                               advantage=0.0, prompt_messages=len(head),
                               provenance={"trial_id": f"trial-{i}", "template": f"bench/{i % len(WORK)}"}))
    return out


def matmul_limit(dtype: Any, tokens: int, dims: dict[str, int], seconds: float) -> float:
    """Sustained GFLOP/s of one decoder layer's matmuls (forward and input-gradient) at `tokens` rows."""
    import torch

    d, kv, inter = dims["hidden"], dims["kv"], dims["intermediate"]
    shapes = [(d, d), (d, kv), (d, kv), (d, d), (d, inter), (d, inter), (inter, d)]  # (in, out)
    g = torch.Generator().manual_seed(0)
    ws = [torch.randn(o, i, generator=g).to(dtype) for i, o in shapes]
    xs = {i: torch.randn(tokens, i, generator=g).to(dtype) for i, _ in shapes}
    ys = {o: torch.randn(tokens, o, generator=g).to(dtype) for _, o in shapes}
    flops = sum(2 * 2 * tokens * i * o for i, o in shapes)

    def layer() -> None:
        for (i, o), w in zip(shapes, ws, strict=True):
            xs[i] @ w.t()  # forward
            ys[o] @ w  # gradient to the input

    for _ in range(3):
        layer()
    reps, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        layer()
        reps += 1
    return flops * reps / (time.perf_counter() - t0) / 1e9


def work_flops(work: dict[str, int], dims: dict[str, int], rank: int, targets: list[str]) -> float:
    """FLOPs of the training forwards+backwards counted in `work` (rsi.train.local.TorchScorer.counts['train'])."""
    d, kv, inter, layers, vocab = dims["hidden"], dims["kv"], dims["intermediate"], dims["layers"], dims["vocab"]
    shapes = {"q_proj": (d, d), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (d, d), "gate_proj": (d, inter),
              "up_proj": (d, inter), "down_proj": (inter, d)}
    dense = layers * sum(i * o for i, o in shapes.values())
    lora = layers * sum(rank * (i + o) for name, (i, o) in shapes.items() if name in targets)
    per_token = 2 * dense + 2 * dense + 3 * 2 * lora  # forward, input gradient; LoRA fwd, input grad, weight grad
    attention = layers * 4 * d * work["pairs"] * 3  # QK^T and PV forward, twice that backward
    head = 2 * d * vocab * work["head"] * 2  # the vocabulary projection forward and its input gradient
    return float(per_token * work["padded"] + attention + head)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectories", type=int, default=16)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--limit-tokens", type=int, default=2048)
    ap.add_argument("--limit-sec", type=float, default=3.0)
    ap.add_argument("--arms", default="old,pack-fp32,new")
    args = ap.parse_args()

    import torch

    from rsi.models.server.model_files import config_of, resolve_model
    from rsi.train.base import TrainRequest
    from rsi.train.dataset import write_dataset
    from rsi.train.local import LocalBackend, native_bf16, set_threads

    threads = set_threads(None)
    model_dir, model_id = resolve_model(None)
    mc = config_of(model_dir)
    dims = {"hidden": mc.hidden_size, "intermediate": mc.intermediate_size, "layers": mc.num_hidden_layers,
            "vocab": mc.vocab_size, "kv": mc.num_key_value_heads * (mc.hidden_size // mc.num_attention_heads)}
    print(f"model: {model_id} {dims}; threads intra-op {threads['intra_op']}, inter-op {threads['inter_op']}; "
          f"native bf16: {native_bf16(torch.device('cpu'))}")

    limit = {"float32": matmul_limit(torch.float32, args.limit_tokens, dims, args.limit_sec),
             "bfloat16": matmul_limit(torch.bfloat16, args.limit_tokens, dims, args.limit_sec)}
    print(f"limit matmul fp32: {limit['float32']:.1f} GFLOP/s ({args.limit_tokens} rows, layer shapes fwd+dgrad)")
    print(f"limit matmul bf16: {limit['bfloat16']:.1f} GFLOP/s ({limit['bfloat16'] / limit['float32']:.2f}x fp32)")

    contract = Contract.model_validate(yaml.safe_load((ROOT / "contracts" / "hcp-1.0.yaml").read_text()))
    cfg = HarnessConfig.model_validate(yaml.safe_load((ROOT / "harness_configs" / "default.yaml").read_text()))
    lines = trajectories(cfg, contract, args.trajectories, seed=0)
    arms = {"old": {"pack": False, "dtype": "float32"}, "pack-fp32": {"pack": True, "dtype": "float32"},
            "new": {}}
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="rsi-train-bench-") as tmp:
        info = write_dataset(Path(tmp) / "dataset", lines, {})
        for name in args.arms.split(","):
            s = TrainSettings(steps=args.steps, batch_size=args.batch, kl_coef=0.0, validation_every=10_000,
                              **arms[name])
            res = LocalBackend().train(TrainRequest(dataset=info.path, output_dir=Path(tmp) / name, base_model=model_id,
                                                    objective="sft", settings=s, base_model_dir=model_dir,
                                                    log=lambda m: None))
            m = res.metrics
            tp = m["throughput"]
            flops = work_flops(tp["train_work"], dims, s.rank, s.target_modules)
            rate = flops / tp["train_sec"] / 1e9
            results[name] = {"tp": tp, "losses": res.losses, "before": m["logprob_before"], "after": m["logprob_after"],
                             "rate": rate}
            w = tp["train_work"]
            print(f"train {name}: {tp['tokens_per_sec']:.1f} training tokens/s, {tp['samples_per_sec']:.3f} samples/s "
                  f"({tp['trained_samples']} turns, {tp['trained_tokens']} tokens in {tp['train_sec']:.1f} s over "
                  f"{res.steps} steps; {w['forwards']} forwards, {w['padded']} tokens computed of which "
                  f"{w['padded'] - w['tokens']} padding; dtype {tp['dtype']}, pack {tp['pack']})")
            print(f"ratio {name}: achieved {rate:.1f} GFLOP/s = {rate / limit[tp['dtype']]:.3f} of the "
                  f"{tp['dtype']} matmul limit, {rate / limit['float32']:.3f} of the fp32 limit")
    rec = Recorder("train_throughput", "Training throughput (local backend)",
                   context=f"{model_id}, {args.trajectories} synthetic trajectories, {args.steps} steps of batch "
                           f"{args.batch}; threads intra-op {threads['intra_op']}. The limit is the machine's own "
                           "matmul rate at the model's layer shapes, measured in the same run.")
    rec.add("limit_fp32", "matmul limit, fp32", limit["float32"], "GFLOP/s")
    rec.add("limit_bf16", "matmul limit, bf16", limit["bfloat16"], "GFLOP/s")
    names = {"old": "old loop (one turn per forward, fp32)", "pack-fp32": "packing, fp32",
             "new": "defaults (packing + bf16 autocast)"}
    for name, r in results.items():
        tp = r["tp"]
        rec.add(f"tokens_per_sec_{name}", f"training tokens/s, {names.get(name, name)}", tp["tokens_per_sec"],
                "tokens/s", note=f"{tp['samples_per_sec']:.3f} samples/s; {r['rate'] / limit[tp['dtype']]:.2f} of "
                                 f"the {tp['dtype']} limit")
    old = results.get("old")
    for name, r in results.items():
        if old is not None and name != "old":
            sp = r['tp']['tokens_per_sec'] / old['tp']['tokens_per_sec']
            print(f"speedup {name} / old: tokens/s {sp:.2f}x, "
                  f"samples/s {r['tp']['samples_per_sec'] / old['tp']['samples_per_sec']:.2f}x")
            rec.add(f"speedup_{name}", f"speedup over the old loop, {names.get(name, name)}", sp, "x")
    for name, r in results.items():
        if old is not None and name != "old":
            print(f"accuracy {name}: logprob_before {r['before']:.5f} vs old {old['before']:.5f} "
                  f"(diff {r['before'] - old['before']:+.5f})")
    if "pack-fp32" in results and "new" in results:
        a, b = results["pack-fp32"]["losses"], results["new"]["losses"]
        rel = max(abs(x - y) / max(abs(x), 1e-9) for x, y in zip(a, b, strict=True))
        print(f"accuracy new vs pack-fp32 loss curve (same batches): max relative diff {rel:.4f}, last step "
              f"{abs(a[-1] - b[-1]) / abs(a[-1]):.4f}; fp32 {[round(x, 4) for x in a]} bf16 {[round(x, 4) for x in b]}")
        rec.add("bf16_loss_rel_diff", "bf16 loss curve vs fp32 (same batches), max relative difference", rel,
                note=f"last step {abs(a[-1] - b[-1]) / abs(a[-1]):.4f}")
        fa, ba = results["pack-fp32"]["after"], results["new"]["after"]
        print(f"accuracy new vs pack-fp32 logprob_after (mean over the trained completions): {ba:.5f} vs {fa:.5f} "
              f"(diff {ba - fa:+.5f}; before training {results['new']['before']:.5f})")
    rec.write()


if __name__ == "__main__":
    main()
