"""The example trainer of docs/own-model.md (`examples/train_peft_sft.py`) trains a real candidate on the embedded
model through `rsi update --backend command`: the adapter it leaves is checked, recorded under the model's id and
registered as gen-0001, and its LoRA weights moved off their zero start."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.updatekit import T, add_trials, workspace

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train_peft_sft.py"


def test_the_example_trainer_makes_a_candidate_through_the_command_backend(tmp_path: Path) -> None:
    ctx = workspace(tmp_path)
    add_trials(ctx, [T("alpha", 0, 1.0), T("beta", 0, 1.0, reply="```bash\ncat /app/x > /app/out.txt\n```\n"),
                     T("gamma", 0, 0.0, reply="```bash\nls\n```\n")])
    root = ctx.ws.root
    ctx.store.close()
    cmd = f"{sys.executable} {SCRIPT} {{dataset}} {{base_model_dir}} {{output_dir}} --steps 3 --batch-size 2"
    env = dict(os.environ, HF_HUB_OFFLINE="1", RSI_MODEL_PORT="9")  # nothing serves: no adapter load
    r = subprocess.run([sys.executable, "-m", "rsi", "update", "-w", str(root), "--backend", "command",
                        "--command", cmd, "--json"], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-3000:])
    out = json.loads(r.stdout)
    assert out["candidate"] == "gen-0001"
    log = "\n".join(p.read_text() for p in root.rglob("train.log"))
    assert "training on 2 samples (2 accepted) for 3 steps" in log  # the failed trial is no training data
    losses = [float(x) for x in re.findall(r"step \d+/3 loss ([0-9.]+)", log)]
    assert len(losses) == 3 and all(0 < x < 20 for x in losses), log[-2000:]
    m = yaml.safe_load((root / "generations" / "gen-0001.yaml").read_text())
    ref = m["adapters"]["agent"]
    adapter = root / ref["path"]
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == "SmolLM2-135M-Instruct"  # the local directory recorded as the id
    from safetensors.torch import load_file

    weights = load_file(str(adapter / "adapter_model.safetensors"))
    lora_b = [t for k, t in weights.items() if "lora_B" in k]
    assert lora_b and any(float(t.abs().max()) > 0 for t in lora_b), "LoRA B starts at zero: training moved it"
    assert m["provenance"]["training"]["backend"] == "command"
