"""`rsi update --backend command` and the base model's two names (issue 36): the id the generation records and the
local directory an offline trainer loads. `{base_model_dir}` renders the directory; an adapter whose
`base_model_name_or_path` is that directory, or a copy with the same weights, is recorded under the id; a
directory with other weights is refused."""

from __future__ import annotations

import json
import shutil
import struct
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi.core.training import TrainSettings
from rsi.loop.context import WorkspaceContext
from rsi.loop.update.phase import UpdateFailed, UpdateRequest, run_update
from rsi.train.backends import CommandBackend, render_command
from rsi.train.base import TrainError, TrainRequest
from rsi.train.base_weights import weights_digest
from rsi.train.peft_dir import check_peft_dir
from tests.updatekit import T, add_trials, workspace

MODEL_ID = "SmolLM2-135M-Instruct"

# an offline trainer: loads nothing from a hub, names the base as PEFT does (the path it was given)
TRAINER = r'''
import json, struct, sys
from pathlib import Path
out, base = Path(sys.argv[1]), sys.argv[2]
assert Path(base, "config.json").is_file(), f"not a local model directory: {base}"
out.mkdir(parents=True, exist_ok=True)
cfg = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "base_model_name_or_path": base}
(out / "adapter_config.json").write_text(json.dumps(cfg))
header = {"base_model.model.layers.0.q_proj.lora_A.weight": {"dtype": "F32", "shape": [4, 2], "data_offsets": [0, 32]}}
h = json.dumps(header).encode()
(out / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(h)) + h + bytes(32))
print("trained on", base, flush=True)
'''


def fake_model(d: Path, fill: int = 1) -> Path:
    """A model directory with a config and one safetensors file (two small tensors)."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
    header = {"a.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
              "b.weight": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}}
    h = json.dumps(header).encode()
    (d / "model.safetensors").write_bytes(struct.pack("<Q", len(h)) + h + bytes([fill]) * 24)
    return d


def request(tmp_path: Path, named_dir: Path, located: list[int], *, base: Path | None = None) -> TrainRequest:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    base = base or tmp_path / "models" / f"{MODEL_ID}-abcd1234"

    def locate() -> Path:
        located.append(1)
        return base

    return TrainRequest(dataset=tmp_path / "dataset.jsonl", output_dir=tmp_path / "run" / "adapter",
                        base_model=MODEL_ID, objective="sft", settings=TrainSettings(),
                        command=f"{sys.executable} {script} {{output_dir}} {shlex_q(named_dir)}",
                        log=lambda m: None, locate_base=locate)


def shlex_q(p: Path) -> str:
    import shlex

    return shlex.quote(str(p))


def test_base_model_dir_renders_the_local_directory_and_base_model_id_the_id(tmp_path: Path) -> None:
    base = fake_model(tmp_path / "models" / f"{MODEL_ID}-abcd1234")
    located: list[int] = []
    req = request(tmp_path, base, located)
    assert render_command("train {base_model_id} {output_dir}", req).split()[1] == MODEL_ID
    assert not located  # a template that does not ask for the directory never resolves it
    assert render_command("train {base_model_dir}", req) == f"train {base}"
    assert render_command("train {base_model}", req) == f"train {base}"  # the run has the directory now
    with pytest.raises(TrainError, match=r"\{base_model_dir\}.*\{parent_adapter\}"):
        render_command("train {base_dir}", req)  # a misspelt placeholder lists the real ones
    req.locate_base = None
    req.base_model_dir = None
    with pytest.raises(TrainError, match="no local directory"):
        render_command("train {base_model_dir}", req)


@pytest.mark.parametrize("where", ["same", "copy"])
def test_an_adapter_naming_the_local_base_is_recorded_under_the_model_id(tmp_path: Path, where: str) -> None:
    base = fake_model(tmp_path / "models" / f"{MODEL_ID}-abcd1234")
    named = base if where == "same" else Path(shutil.copytree(base, tmp_path / "elsewhere" / "smol"))
    req = request(tmp_path, named, [])
    with pytest.raises(Exception, match="base_model_name_or_path"):
        check_peft_dir(_train_raw(req), MODEL_ID)  # what the trainer wrote alone is refused
    res = CommandBackend().train(request(tmp_path, named, []))
    assert res.adapter_dir is not None
    cfg = json.loads((res.adapter_dir / "adapter_config.json").read_text())
    assert cfg["base_model_name_or_path"] == MODEL_ID
    assert check_peft_dir(res.adapter_dir, MODEL_ID).rank == 4
    assert str(named) in str(res.metrics["base_model_name"])


def _train_raw(req: TrainRequest) -> Path:
    import subprocess

    subprocess.run(render_command(req.command or "", req), shell=True, check=True, capture_output=True)
    return req.output_dir


def test_an_adapter_naming_a_directory_with_other_weights_is_refused(tmp_path: Path) -> None:
    base = fake_model(tmp_path / "models" / f"{MODEL_ID}-abcd1234", fill=1)
    other = fake_model(tmp_path / "other" / MODEL_ID, fill=2)  # same name, other weights
    assert weights_digest(base) != weights_digest(other)
    assert weights_digest(base) == weights_digest(Path(shutil.copytree(base, tmp_path / "copy")))
    req = request(tmp_path, other, [], base=base)
    assert check_peft_dir(_train_raw(req), MODEL_ID)  # the name alone passes: its last part is the id
    with pytest.raises(TrainError, match=r"'.*other/SmolLM2-135M-Instruct' holds other weights than the run's base"):
        CommandBackend().train(request(tmp_path, other, [], base=base))


@pytest.fixture
def ctx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[WorkspaceContext]:
    monkeypatch.setenv("RSI_MODEL_PORT", "9")  # nothing answers: no endpoint to load into
    c = workspace(tmp_path / "ws")
    yield c
    c.store.close()


def test_update_with_an_offline_command_trainer_registers_a_candidate(
        ctx: WorkspaceContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base = fake_model(tmp_path / "models" / f"{MODEL_ID}-abcd1234")
    monkeypatch.setattr("rsi.loop.update.phase._base_model_dir", lambda _ctx: base)
    add_trials(ctx, [T("alpha", 0, 1.0), T("beta", 0, 1.0, reply="```bash\ncat x\n```\n")])
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    logged: list[str] = []
    out = run_update(UpdateRequest(backend="command", command=f"{sys.executable} {script} {{output_dir}} "
                                   "{base_model_dir}", log=logged.append), ctx.ws.root)
    assert any(f"trained on {base}" in m for m in logged)
    ref = ctx.store.get_generation(out.candidate or "").adapters["agent"]
    assert json.loads((ctx.ws.root / ref.path / "adapter_config.json").read_text())["base_model_name_or_path"] \
        == MODEL_ID
    # the same trainer given a directory with other weights: no candidate
    other = fake_model(tmp_path / "other" / "smol", fill=7)
    with pytest.raises(UpdateFailed, match="no candidate registered.*holds other weights"):
        run_update(UpdateRequest(backend="command", command=f"{sys.executable} {script} {{output_dir}} "
                                 f"{shlex_q(other)}"), ctx.ws.root)
