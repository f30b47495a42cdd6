"""A workspace with one finished, demo-shaped `rsi cycle`, built without Docker or the real model: the fixture
of `rsi view`'s tests.

discover (a fake generator, gated and probed on FakeSandboxProvider), expand (the real harness against the
deterministic policy server: real ATIF trajectories, attribution verdicts, a config search), update (a scripted
training backend that writes a valid PEFT directory and reports a loss and a validation curve) and promote
(a scripted agent that is better under gen-0001 on six holdout tasks) — so gen-0001 is promoted, holdout tasks
flip, and every page has something to show.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from benchmarks.policy_server import CONFIG, Policy, serve
from rsi.harness.agent import AGENTS
from rsi.loop.context import WorkspaceContext
from rsi.loop.cycle.phase import CycleHooks, CycleRequest, cycle
from rsi.loop.discover.generators import GENERATORS
from rsi.loop.init import init_workspace
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.train.backends import BACKENDS
from rsi.train.base import TrainRequest, TrainResult
from tests.taskgen import R, make_task
from tests.unit.test_discover_loop import FakeGen
from tests.unit.test_promote_loop import BetterAgent, holdout_task

LOSSES = [2.0, 1.6, 1.3, 1.1, 0.9, 0.8]
VALIDATION = [[0, -0.9], [3, -0.6], [6, -0.45]]


class ScriptedBackend:
    """Writes a tiny valid PEFT adapter and reports per-step figures, as the local backend would."""

    name = "scripted"

    def train(self, req: TrainRequest) -> TrainResult:
        out = req.output_dir
        out.mkdir(parents=True, exist_ok=True)
        cfg = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"],
               "base_model_name_or_path": req.base_model}
        (out / "adapter_config.json").write_text(json.dumps(cfg))
        header = {"base_model.model.layers.0.q_proj.lora_A.weight": {"dtype": "F32", "shape": [4, 2],
                                                                     "data_offsets": [0, 32]}}
        h = json.dumps(header).encode()
        (out / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(h)) + h + bytes(32))
        return TrainResult(adapter_dir=out, steps=len(LOSSES), losses=list(LOSSES),
                           metrics={"logprob_before": -0.9, "logprob_after": -0.45,
                                    "validation": {"curve": VALIDATION, "best_step": 6, "samples": 2}})


class _Quiet(CycleHooks):
    def message(self, text: str) -> None:
        pass


def build_cycle_workspace(base: Path) -> Path:
    """Make the workspace under `base` and run one cycle in it; returns its root (the store is closed)."""
    FakeGen.flaky_dir = base
    GENERATORS.add("fakegen", FakeGen)
    AGENTS.add("better", BetterAgent)
    BACKENDS.add("scripted", ScriptedBackend)
    saved = os.environ.pop("RSI_DATABASE_URL", None)
    try:
        with serve(Policy(rules={"easy0": {}, "easy1": {}, "hard0": None})) as url:
            root = base / "ws"
            (root / "harness_configs").mkdir(parents=True)
            (root / "harness_configs" / "default.yaml").write_text(CONFIG.format(endpoint=url))
            init_workspace(root, starter_tasks=False)
            for name in ("easy0", "easy1", "hard0"):
                make_task(root / "tasks", name)
            for i in range(6):
                holdout_task(root / "tasks", f"h{i}", family="a" if i % 2 else "b")
                # a reference of its own: update refuses training data that repeats an unseen holdout reference
                (root / "tasks" / f"h{i}" / "solution" / "solve.sh").write_text(
                    f'printf ok | tee "{R}/app/out.txt" >/dev/null\n')
            contract = root / "contracts" / "hcp-1.0.yaml"  # the fake sandbox cannot run the starter suite
            contract.write_text(contract.read_text().replace("suites: [suites/starter]", "suites: []"))
            ctx = WorkspaceContext.open(root)
            try:
                req = CycleRequest(budget=100, n=2, generators=["fakegen"], attempts=2, probe_agent="nop",
                                   expand_attempts=1, proposals=0, round_size=2, backend="scripted", load=False,
                                   promote_agent="better", provider=FakeSandboxProvider(base / "fake"))
                out = cycle(ctx, req, _Quiet())
                assert out.verdict == "promoted", (out.stopped, out.verdict)
            finally:
                ctx.store.close()
    finally:
        if saved is not None:
            os.environ["RSI_DATABASE_URL"] = saved
    return root


__all__ = ["LOSSES", "ScriptedBackend", "build_cycle_workspace"]
