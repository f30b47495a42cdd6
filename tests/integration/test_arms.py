"""Arms with the real model in real Docker: two configs side by side in one job, resumed after
kill -9; an old generation after its config file changed; a generation that brings an adapter.

One embedded server (SmolLM2-135M) serves the whole module on a free port (RSI_MODEL_PORT), so
`rsi` finds it instead of loading the model again. Configs are cut to 2 turns of 48 tokens.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from rsi.core.generation import AdapterRef, GenerationManifest
from rsi.loop.context import WorkspaceContext
from rsi.loop.init import init_workspace
from rsi.loop.run import RunRequest, run_job
from rsi.models.adapters import file_sha256
from rsi.models.client import ChatClient
from rsi.store.files import write_yaml_model
from tests.served_model import served_model
from tests.taskgen import make_task

pytestmark = [pytest.mark.docker, pytest.mark.model, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def port(model_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with served_model(tmp_path_factory.mktemp("serve")) as port:
        yield port


@pytest.fixture
def ws(tmp_path: Path, port: int, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RSI_MODEL_PORT", str(port))
    root = tmp_path / "ws"
    init_workspace(root, starter_tasks=False)
    cfg = yaml.safe_load((REPO / "harness_configs" / "default.yaml").read_text())
    cfg["loop"]["max_turns"], cfg["sampling"]["max_tokens"] = 2, 48
    for name, temp in (("cold", 0.0), ("warm", 0.9)):
        cfg["name"], cfg["sampling"]["temperature"] = name, temp
        (root / "harness_configs" / f"{name}.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    make_task(root / "tasks", "write-ok", instruction="Write the word ok to the file /app/out.txt.\n")
    make_task(root / "tasks", "write-ok-2", instruction="Create /app/out.txt containing ok.\n")
    return root


def _rows(ws: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple]:  # type: ignore[type-arg]
    with sqlite3.connect(ws / ".rsi" / "rsi.db", timeout=30) as conn:
        return list(conn.execute(sql, params))


def _rsi(ws: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "rsi", "-w", str(ws), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def test_two_configs_side_by_side_resumed_after_kill_9(ws: Path) -> None:
    cfgs = [str(ws / "harness_configs" / f"{n}.yaml") for n in ("cold", "warm")]
    proc = _rsi(ws, "run", str(ws / "tasks"), "--agent", "harness", "--config", cfgs[0], "--config", cfgs[1])
    deadline = time.monotonic() + 400
    while not _rows(ws, "SELECT id FROM trials WHERE status='done'") if (ws / ".rsi" / "rsi.db").exists() else True:
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no trial finished"
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    ((job, status),) = _rows(ws, "SELECT id, status FROM jobs")
    assert status == "running"  # what kill -9 leaves
    done_before = _rows(ws, "SELECT id, finished_at FROM trials WHERE status='done'")
    assert 1 <= len(done_before) < 4

    again = _rsi(ws, "run", "--resume", job, "--json")
    out, err = again.communicate(timeout=600)
    assert again.returncode == 0, err[-3000:]
    trials = _rows(ws, "SELECT id, arm_id, task_name, status, harness_config_digest, finished_at FROM trials")
    assert len(trials) == 4 and all(t[3] == "done" for t in trials), trials
    assert len({t[0] for t in trials}) == 4 and len({t[1] for t in trials}) == 2
    for tid, finished in done_before:  # finished before the kill: recorded once, never re-run
        assert [t[5] for t in trials if t[0] == tid] == [finished]
    arms = dict(_rows(ws, "SELECT id, config_digest FROM arms"))
    for tid, arm, _task, _s, digest, _f in trials:
        assert digest == arms[arm], f"{tid} ran under {digest}, its arm pins {arms[arm]}"
    assert _rows(ws, "SELECT status FROM jobs") == [("done",)]
    assert '"arms"' in out and out.count('"label"') == 2


def test_an_old_generation_runs_after_its_config_file_was_edited(ws: Path) -> None:
    ctx = WorkspaceContext.open(ws)
    gen = ctx.store.get_generation("gen-0000")
    default = ws / "harness_configs" / "default.yaml"
    default.write_text(default.read_text().replace("max_turns: 6", "max_turns: 1"))  # a new file digest
    out = run_job(ctx, RunRequest(paths=[ws / "tasks" / "write-ok"], agent="harness"))
    (t,) = out.trials
    assert t.status == "done" and t.error_type != "model_config_error"
    assert t.harness_config_digest == gen.harness_config.digest
    ctx.store.close()


def test_a_generation_with_an_adapter_gets_it_loaded_before_its_first_trial(ws: Path, port: int) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from rsi.models.embedded import DEFAULT_MODEL_ID, cache_dir

    model_dir = next((cache_dir() / "models").glob(f"{DEFAULT_MODEL_ID}-*/config.json")).parent
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))
    lora = ws / "adapters" / "agent-g1"
    get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])).save_pretrained(lora)
    sha = file_sha256(lora / "adapter_model.safetensors")
    serve = f"agent-g0001-{sha[:8]}"
    ctx = WorkspaceContext.open(ws)
    gen0 = ctx.store.get_generation("gen-0000")
    gen1 = GenerationManifest.model_validate({
        **gen0.model_dump(mode="json"), "id": "gen-0001", "parent": "gen-0000", "state": "candidate",
        "adapters": {"agent": AdapterRef(path="adapters/agent-g1", sha256=sha, serve_name=serve).model_dump()},
    })
    write_yaml_model(ws / "generations" / "gen-0001.yaml", gen1)
    ctx.store.put_generation(gen1)
    with ChatClient(f"http://127.0.0.1:{port}/v1") as c:
        assert serve not in c.list_models()
    out = run_job(ctx, RunRequest(paths=[ws / "tasks" / "write-ok"], agent="harness", generation="gen-0001"))
    (t,) = out.trials
    assert t.model_name == serve and t.error_type not in ("model_config_error", "model_unavailable")
    with ChatClient(f"http://127.0.0.1:{port}/v1") as c:
        assert serve in c.list_models()
        c.unload_adapter(serve)

    # an altered adapter file is an error before the job starts, not a trial outcome
    (lora / "adapter_model.safetensors").write_bytes(b"not the weights")
    jobs_before = len(ctx.store.list_jobs())
    from rsi.core.errors import ConfigError

    with pytest.raises(ConfigError, match="sha256"):
        run_job(ctx, RunRequest(paths=[ws / "tasks" / "write-ok"], agent="harness", generation="gen-0001"))
    assert len(ctx.store.list_jobs()) == jobs_before
    ctx.store.close()
