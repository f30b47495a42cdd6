"""An external harness end to end: mini-swe-agent 2.4.6 (installed from the `external` extra), unmodified, acting
in real Docker sandboxes through the recording gateway in front of the embedded SmolLM2 server.

1. `rsi run TASKS --harness mini-swe`: every trial's trajectory is the gateway's records (gateway.jsonl), and the
   prompt ids recorded are the ones the server itself tokenises for that request (sent again directly).
2. `rsi cycle` on a workspace whose gen-0000 pairs with mini-swe: every phase runs; update's dataset is the
   gateway-recorded samples and the ids it trains on equal the ids served; the candidate's trials (promote) and a
   run after its promotion sample the trained adapter — the served model and adapter digest recorded per call
   equal the manifest's.
Small: 2 train tasks, 5 holdout tasks, a step limit of 2, 2 optimiser steps.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from rsi.models.gateway import read_calls
from tests.integration.test_cycle_docker import _holdout
from tests.integration.test_update_local import ALWAYS, ANY_FILE
from tests.served_model import served_model
from tests.taskgen import make_task

pytestmark = [pytest.mark.docker, pytest.mark.model, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def port(model_ready: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    with served_model(tmp_path_factory.mktemp("serve")) as port:
        yield port


def _workspace(root: Path, env: dict[str, str], step_limit: int = 2) -> None:
    r = subprocess.run([sys.executable, "-m", "rsi", "init", str(root), "--no-tasks", "--harness", "mini-swe"],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "harness config mini-swe" in r.stdout
    msa = root / "harness_configs" / "mini-swe.config.yml"
    cfg = yaml.safe_load(msa.read_text())
    cfg["agent"]["step_limit"] = step_limit
    cfg["model"]["model_kwargs"]["max_tokens"] = 64
    msa.write_text(yaml.safe_dump(cfg, sort_keys=False))
    make_task(root / "tasks", "say-hello", test=ALWAYS, agent_timeout=300,
              instruction="Print the word hello with echo.\n")
    make_task(root / "tasks", "touch-ok", test=ANY_FILE, agent_timeout=300,
              instruction="Create the file /app/out.txt containing ok.\n")


def _rsi(root: Path, env: dict[str, str], *args: str, timeout: float = 2000) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rsi", "-w", str(root), *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def _trial_dirs(root: Path, sql: str, params: tuple[Any, ...] = ()) -> list[Path]:
    with sqlite3.connect(root / ".rsi" / "rsi.db", timeout=30) as db:
        rows = db.execute(sql, params).fetchall()
    return [p if (p := Path(r[0])).is_absolute() else root / p for r in rows]


def _check_records(trial: Path) -> list[Any]:
    """The trajectory is the gateway's records: one agent step per call, the same ids and log-probs."""
    calls = read_calls(trial / "gateway.jsonl")
    traj = json.loads((trial / "trajectory.json").read_text())
    assert traj["extra"]["rsi"]["source"] == "gateway" and traj["agent"]["name"] == "mini-swe-agent"
    steps = [s for s in traj["steps"] if s["source"] == "agent"]
    assert len(steps) == len(calls) >= 1
    for s, c in zip(steps, calls, strict=True):
        if c.ok:
            assert c.prompt_token_ids and c.completion_token_ids and c.logprobs
            assert s["extra"]["prompt_token_ids"] == c.prompt_token_ids
            assert s["extra"]["completion_token_ids"] == c.completion_token_ids
            assert s["extra"]["logprobs"] == c.logprobs
            asked = (c.forwarded or {}).get("max_tokens", c.request.get("max_tokens"))
            assert len(c.completion_token_ids) <= asked <= 192  # the config's max_tokens, under the contract's
    return calls


def test_rsi_run_with_mini_swe_records_every_call(tmp_path: Path, port: int) -> None:
    env = dict(os.environ, RSI_MODEL_PORT=str(port), HF_HUB_OFFLINE="1")
    root = tmp_path / "ws"
    _workspace(root, env)
    r = _rsi(root, env, "run", str(root / "tasks"), "--harness", "mini-swe", "-k", "1", "-n", "2", "--json",
             timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    trials = _trial_dirs(root, "SELECT trial_dir FROM trials")
    assert len(trials) == 2
    for trial in trials:
        calls = _check_records(trial)
        ok = [c for c in calls if c.ok]
        assert ok and all(c.served_model == "SmolLM2-135M-Instruct" for c in ok)
        assert len(ok) <= 2  # the step limit
        # the server tokenises the recorded request into exactly the recorded prompt ids
        direct = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=300, json={
            **ok[0].request, "max_tokens": 1, "return_token_ids": True}).json()
        assert direct["prompt_token_ids"] == ok[0].prompt_token_ids
    with sqlite3.connect(root / ".rsi" / "rsi.db") as db:
        digests = {d for (d,) in db.execute("SELECT DISTINCT harness_config_digest FROM trials")}
    from rsi.store.files import load_harness_config

    assert digests == {load_harness_config(root / "harness_configs" / "mini-swe.yaml").digest()}


def test_cycle_with_mini_swe_trains_on_the_served_ids_and_samples_the_trained_adapter(tmp_path: Path,
                                                                                        port: int) -> None:
    env = dict(os.environ, RSI_MODEL_PORT=str(port), HF_HUB_OFFLINE="1", COLUMNS="160")
    env.pop("RSI_HOME", None)
    root = tmp_path / "ws"
    _workspace(root, env)
    contract = root / "contracts" / "hcp-1.0.yaml"
    c = yaml.safe_load(contract.read_text())
    c["promotion"]["trials_per_task"] = 1
    c["promotion"]["suites"] = []
    contract.write_text(yaml.safe_dump(c, sort_keys=False))
    for i in range(5):  # five holdout units: the fewest the paired test measures
        _holdout(root / "tasks", i)

    r = _rsi(root, env, "cycle", "--budget", "24", "--candidates", "1", "-g", "text", "-k", "1", "--proposals", "0",
             "--steps", "2", "-n", "2", "--json")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    out = json.loads(r.stdout)
    assert set(out["phases"]) == {"discover", "expand", "update", "promote"}, out
    assert all(p["status"] == "done" for p in out["phases"].values()), out["phases"]
    assert out["candidate"] == "gen-0001" and out["verdict"] in ("promoted", "rejected")

    # update trained on the gateway's records: the dataset's ids are the ids the gateway recorded as served
    with sqlite3.connect(root / ".rsi" / "rsi.db") as db:
        (run_dir,) = db.execute("SELECT dataset_path FROM training_runs WHERE candidate = 'gen-0001'").fetchone()
    lines = [json.loads(x) for x in Path(run_dir if Path(run_dir).is_absolute() else root / run_dir)
             .read_text().splitlines() if x.strip()]
    trained = [ln for ln in lines if ln.get("tokens")]
    assert trained and all(ln["source"] == "gateway" for ln in lines)
    for ln in trained:
        trial = Path(ln["provenance"]["trial_id"])
        (tdir,) = _trial_dirs(root, "SELECT trial_dir FROM trials WHERE id = ?", (str(trial),))
        served = [c for c in read_calls(tdir / "gateway.jsonl") if c.ok]
        assert [t["prompt_token_ids"] for t in ln["tokens"]] == [c.prompt_token_ids for c in served]
        assert [t["completion_token_ids"] for t in ln["tokens"]] == [c.completion_token_ids for c in served]

    # the candidate's own trials (promote's) sampled the trained adapter, call by call
    manifest = yaml.safe_load((root / "generations" / "gen-0001.yaml").read_text())
    (ref,) = manifest["adapters"].values()
    cand = _trial_dirs(root, "SELECT trial_dir FROM trials WHERE generation = 'gen-0001'")
    assert cand
    for trial in cand:
        for call in (c for c in _check_records(trial) if c.ok):
            assert call.served_model == ref["serve_name"] and call.adapter_sha256 == ref["sha256"], call
            # the digest is of the weights the server says it loaded (its /v1/models root), not the serve name's
            assert call.adapter_check == "endpoint-root", call

    # after promotion `rsi run --harness mini-swe` samples the promoted adapter (promoted here by the store when the
    # small cycle's gate rejected it: what is checked is which adapter is sampled, not the gate)
    if out["verdict"] != "promoted":
        from rsi.core.generation import GenerationState
        from rsi.loop.context import WorkspaceContext
        from rsi.store.files import write_yaml_model

        ctx = WorkspaceContext.open(root)
        ctx.store.set_generation_state("gen-0001", GenerationState.PROMOTED, "test: promote to check sampling")
        ctx.store.set_generation_state("gen-0000", GenerationState.SUPERSEDED, "test")
        for g in ("gen-0000", "gen-0001"):
            write_yaml_model(root / "generations" / f"{g}.yaml", ctx.store.get_generation(g))
    r = _rsi(root, env, "run", str(root / "tasks" / "say-hello"), "--harness", "mini-swe", "-k", "1", "--json",
             timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    job = json.loads(r.stdout)["job"]
    (trial,) = _trial_dirs(root, "SELECT trial_dir FROM trials WHERE job_id = ?", (job,))
    ok = [c for c in _check_records(trial) if c.ok]
    assert ok and all(c.served_model == ref["serve_name"] and c.adapter_sha256 == ref["sha256"] for c in ok)
    assert all(c.adapter_check == "endpoint-root" for c in ok)
