"""P3 — prefix reuse: how much of each prompt a serving engine's prefix cache can reuse.

For every call i > 0 of a recorded multi-turn trial, the prompt the server sees (ChatML text
`<|im_start|>role\\ncontent<|im_end|>\\n`... + the generation prompt) is compared with the previous
call's prompt followed by its reply — exactly what is in the KV cache after call i-1. Two figures:

- reuse share: common byte prefix / length of prompt i (the part of call i served from cache;
  bounded below 1 by the new observation each turn adds);
- preserved share: common byte prefix / length of (prompt i-1 + reply) (1.0 when the history policy
  never rewrites the past).

The trial is scripted (fake chat model + canned sandbox), so the run is deterministic and needs no
Docker and no model. Policies: the shipped `full` and `own_view`, and as baseline a `rewrite`
policy typical of naive harnesses (strips replies, re-truncates older observations, keeps the last
3 turns). Prints one line per figure; ratios are against the baseline measured in the same run.

`--recorded DIR` computes the reuse share instead over the real trials of a job directory
(`.rsi/jobs/<job>`), as the model and the sandbox produced them.
"""

from __future__ import annotations

import copy
import sys
import tempfile
from pathlib import Path
from statistics import mean
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _records import Recorder  # noqa: E402

from rsi.core.contract import Contract  # noqa: E402
from rsi.core.harness_config import HarnessConfig  # noqa: E402
from rsi.harness.agent_loop import HarnessAgent  # noqa: E402
from rsi.harness.fakes import ScriptedChatModel, ScriptedSandbox, make_context, text_result  # noqa: E402
from rsi.harness.history import (  # noqa: E402
    TurnEvent,
    chatml,
    common_prefix_len,
    render_turn,
    serialize_messages,
)
from rsi.models.client import ToolCall  # noqa: E402

SCRIPT = """import sys

def average(path):
    nums = [float(line) for line in open(path) if line.strip()]
    return sum(nums) / (len(nums) + 1)

if __name__ == "__main__":
    print(f"{average(sys.argv[1]):.2f}")
"""
TRACE = "".join(f"DEBUG step {i}: loaded value {i * 7 % 13}\n" for i in range(120))

REPLIES = [
    "Let me look at the script first.\n```bash\ncat /app/average.py\n```\n",
    "```bash\npython3 /app/average.py /app/numbers.txt\n```",
    "The divisor is wrong. Run it verbosely:\n"
    "```bash\npython3 -X dev /app/average.py /app/numbers.txt -v\n```",
    "I will fix the divisor.\n```bash\nsed -i 's/len(nums) + 1/len(nums)/' /app/average.py\n```\n",
    "```bash\npython3 /app/average.py /app/numbers.txt\n```",
    "DONE",
]
OUTPUTS = {
    "cat /app/average.py": SCRIPT,
    "python3 /app/average.py /app/numbers.txt": "3.20\n",
    "python3 -X dev /app/average.py /app/numbers.txt -v": TRACE + "3.20\n",
    "sed -i 's/len(nums) + 1/len(nums)/' /app/average.py": "",
}


class RewriteHistory:
    """Baseline, not shipped: rebuilds the prompt each call, stripping replies, re-truncating older
    observations to 200 characters and keeping only the last 3 turns."""

    policy = "rewrite"

    def __init__(self, head: list[dict[str, Any]]) -> None:
        self.head = copy.deepcopy(head)
        self.turns: list[TurnEvent] = []

    def append(self, turn: TurnEvent) -> None:
        self.turns.append(turn)

    def messages(self) -> list[dict[str, Any]]:
        msgs = copy.deepcopy(self.head)
        recent = self.turns[-3:]
        for k, t in enumerate(recent):
            obs = t.observations if k == len(recent) - 1 else tuple(o[:200] for o in t.observations)
            msgs += render_turn(
                TurnEvent(t.turn, t.author, t.format, (t.content or "").strip(), t.calls, obs, t.note),
                server_ids=False,
            )
        return msgs


def _setup(policy: str, **over: Any) -> tuple[Contract, HarnessConfig]:
    contract = Contract.model_validate(yaml.safe_load((ROOT / "contracts" / "hcp-1.0.yaml").read_text()))
    raw = yaml.safe_load((ROOT / "harness_configs" / "default.yaml").read_text())
    raw["loop"]["history"] = "full" if policy == "rewrite" else policy
    raw.update(over)
    return contract, HarnessConfig.model_validate(raw)


def record(policy: str) -> tuple[list[list[dict[str, Any]]], list[str]]:
    """Run the scripted trial under one policy; return each call's messages and each reply."""
    contract, config = _setup(policy)
    model = ScriptedChatModel(REPLIES)
    with tempfile.TemporaryDirectory() as tmp:
        ctx = make_context(
            Path(tmp),
            contract=contract,
            config=config,
            chat_model=model,
            task_name="fix-average",
            instruction="The script `/app/average.py` should print the average of the numbers in "
            "its argument file with two decimals. Fix the bug.",
        )
        if policy == "rewrite":
            ctx.extra["history_factory"] = RewriteHistory
        HarnessAgent().run(ScriptedSandbox(outputs=dict(OUTPUTS)), ctx)
    return [r["messages"] for r in model.requests], REPLIES[: len(model.requests)]


def shares(prompts: list[list[dict[str, Any]]], replies: list[str]) -> tuple[float, float]:
    reuse, preserved = [], []
    for i in range(1, len(prompts)):
        cached = chatml(prompts[i - 1]) + replies[i - 1]
        now = chatml(prompts[i])
        common = common_prefix_len(cached, now)
        reuse.append(common / len(now))
        preserved.append(common / len(cached))
    return mean(reuse), mean(preserved)


def cross_trial_identity(policy: str) -> float:
    """tool_calls format: two trials making the same moves, the server assigning different call ids.
    Share of the last prompt (canonical JSONL) the two trials have in common as a prefix."""
    contract, config = _setup(policy, action_format="tool_calls", tools=["bash", "submit"])
    last = []
    for trial in ("a", "b"):
        replies = [
            text_result(
                None,
                tool_calls=[
                    ToolCall(f"chatcmpl-tool-{trial}{n}", "bash", {"command": cmd}, f'{{"command": "{cmd}"}}')
                ],
            )
            for n, cmd in enumerate(c for c in OUTPUTS)
        ]
        model = ScriptedChatModel(replies)
        with tempfile.TemporaryDirectory() as tmp:
            ctx = make_context(Path(tmp), contract=contract, config=config, chat_model=model)
            HarnessAgent().run(ScriptedSandbox(outputs=dict(OUTPUTS)), ctx)
        last.append(serialize_messages(model.requests[-1]["messages"]))
    return common_prefix_len(last[0], last[1]) / max(len(last[0]), len(last[1]))


def recorded_calls(root: Path) -> tuple[int, list[float]]:
    """Per-call reuse shares over real trials recorded by `rsi run --agent harness` under `root`.

    Each trajectory keeps the final messages it sent (extra.rsi.messages); call k's prompt is the
    messages before the k-th model reply (few-shot replies are part of the prompt, not calls). Only trials
    with at least two model calls count.
    """
    trials, per_call = 0, []
    for path in sorted(root.rglob("trajectory.json")):
        import json

        rsi_extra = json.loads(path.read_text()).get("extra", {}).get("rsi", {}) or {}
        msgs = rsi_extra.get("messages") or []
        head = 1 + len(rsi_extra.get("few_shot") or []) + 1  # system, few-shot, the instruction
        idx = [i for i, m in enumerate(msgs) if m.get("role") == "assistant" and i >= head]
        if len(idx) < 2:
            continue
        trials += 1
        prompts = [msgs[:i] for i in idx]
        replies = [str(msgs[i].get("content") or "") for i in idx]
        for k in range(1, len(prompts)):
            cached = chatml(prompts[k - 1]) + replies[k - 1]
            now = chatml(prompts[k])
            per_call.append(common_prefix_len(cached, now) / len(now))
    return trials, per_call


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--recorded":
        trials, per_call = recorded_calls(Path(sys.argv[2]))
        if not per_call:
            raise SystemExit(f"no multi-call trajectories under {sys.argv[2]}")
        share = mean(per_call)
        print(
            f"P3 recorded trials={trials} calls={len(per_call)} mean reuse share={share:.4f} "
            f"min={min(per_call):.4f} target>=0.95 {'PASS' if share >= 0.95 else 'FAIL'}"
        )
        return
    results = {}
    for policy in ("full", "own_view", "rewrite"):
        prompts, replies = record(policy)
        results[policy] = shares(prompts, replies)
        print(
            f"P3 {policy:9s} calls={len(prompts)} mean reuse share={results[policy][0]:.4f} "
            f"mean preserved share={results[policy][1]:.4f}"
        )
    ov, full, base = results["own_view"], results["full"], results["rewrite"]
    rec = Recorder("prefix_reuse", "P3 prompt-prefix reuse per history policy",
                   context="A scripted multi-turn trial (no Docker, no model): the share of each call's prompt that "
                           "repeats the previous call's prompt + reply byte for byte (what a prefix cache reuses).")
    for policy in ("full", "own_view", "rewrite"):
        rec.add(f"preserved_{policy}", f"preserved prefix share, {policy} history", results[policy][1],
                target=">= 0.95" if policy != "rewrite" else None,
                note="rewrite: the baseline that rebuilds the history each turn" if policy == "rewrite" else "")
    rec.add("own_view_over_rewrite", "own_view / rewrite (preserved share)", ov[1] / base[1], "x")
    print(f"P3 ratio own_view/full      reuse={ov[0] / full[0]:.4f} preserved={ov[1] / full[1]:.4f}")
    print(f"P3 ratio own_view/rewrite   reuse={ov[0] / base[0]:.4f} preserved={ov[1] / base[1]:.4f}")
    for policy in ("full", "own_view"):
        print(
            f"P3 cross-trial {policy:9s} (tool_calls, different server ids) shared prompt prefix="
            f"{cross_trial_identity(policy):.4f}"
        )
    print(
        f"P3 target preserved share >= 0.95: own_view {'PASS' if ov[1] >= 0.95 else 'FAIL'}, "
        f"full {'PASS' if full[1] >= 0.95 else 'FAIL'}"
    )
    for policy in ("full", "own_view"):
        rec.add(f"cross_trial_{policy}", f"shared prompt prefix across trials, {policy} (tool calls)",
                cross_trial_identity(policy))
    rec.write()


if __name__ == "__main__":
    main()
