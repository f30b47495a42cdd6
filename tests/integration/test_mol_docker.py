"""Mixture-of-LoRA end to end: a generation of four LoRA adapters on the real SmolLM2, served by the embedded
server, one `rsi run` trial in a real Docker sandbox. L0 routes the instruction with a choice constraint (the
server scores the labels), the chosen adapter acts, then summarises; the trajectory shows every hop with its
adapter, the route's margin, and per-call prompt/cached tokens. Also: the server scores choices exactly (the
label's log-probability after the prompt), serves them from an adapter, and refuses `guided_choice` with 400."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml

from rsi.harness.atif import load_trajectory
from tests.integration.test_harness_run import family_tasks, free_port, rsi

pytestmark = [pytest.mark.model, pytest.mark.timeout(900)]

DOMAINS = {"L0": [], "L1": ["file-ops"], "L2": ["data-query", "text-processing"], "L3": ["python-fix"]}


def _adapters(root: Path) -> dict[str, dict[str, str]]:
    """Four small LoRA adapters (rank 2, q_proj) on the bundled base, saved as PEFT directories."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from rsi.models.server.model_files import resolve_model

    base = AutoModelForCausalLM.from_pretrained(str(resolve_model(None)[0]), dtype=torch.float32)
    out = {}
    for i, label in enumerate(DOMAINS):
        torch.manual_seed(i)
        model = get_peft_model(base, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
        rel = f"adapters/mol/{label.lower()}/g1"
        model.save_pretrained(str(root / rel))
        base = model.unload()
        sha = hashlib.sha256((root / rel / "adapter_model.safetensors").read_bytes()).hexdigest()
        out[label] = {"path": rel, "sha256": sha, "serve_name": f"mol-{label.lower()}-g0001-{sha[:8]}",
                      "role": "chat+router" if label == "L0" else "specialist", "domains": DOMAINS[label]}
    return out


@pytest.mark.docker
def test_a_mol_trial_routes_answers_and_summarises(tmp_path: Path) -> None:
    from rsi.core.harness_config import HarnessConfig

    env = dict(os.environ, RSI_MODEL_PORT=str(free_port()), HF_HUB_OFFLINE="1")
    env.pop("RSI_HOME", None)
    root = tmp_path / "ws"
    assert rsi("init", str(root), env=env, cwd=tmp_path).returncode == 0
    raw = yaml.safe_load((root / "harness_configs" / "default.yaml").read_text())
    raw["name"] = "mol"
    raw["loop"]["max_turns"] = 2
    raw["mol"] = {"domains": DOMAINS, "summary_tokens": 48}
    cfg = HarnessConfig.model_validate(raw)
    (root / "harness_configs" / "mol.yaml").write_text(cfg.canonical_yaml())
    g0 = yaml.safe_load((root / "generations" / "gen-0000.yaml").read_text())
    g1 = {**g0, "schema_version": 2, "id": "gen-0001", "parent": "gen-0000", "state": "candidate",
          "adapters": _adapters(root), "harness_config": {"name": "mol", "digest": cfg.digest()}}
    (root / "generations" / "gen-0001.yaml").write_text(yaml.safe_dump(g1, sort_keys=False))
    from rsi.core.generation import GenerationManifest
    from rsi.loop.context import WorkspaceContext

    wctx = WorkspaceContext.open(root)
    wctx.store.put_generation(GenerationManifest.model_validate(g1))  # registered as `rsi update` would
    wctx.store.close()
    task = family_tasks(root, "file-ops")[0]
    r = rsi("run", str(task), "--agent", "harness", "--gen", "gen-0001", "-k", "1", "--json", env=env, cwd=root,
            timeout=800)
    assert r.returncode == 0, r.stderr[-3000:]
    (t,) = json.loads(r.stdout)["trials"]
    assert t["error_type"] not in {"model_unavailable", "sandbox_error", "model_config_error"}, t
    traj = load_trajectory(Path(t["trial_dir"]) / "trajectory.json")
    steps = [s for s in traj.steps if s.source == "agent"]
    hops = [s.extra["hop"] for s in steps]
    assert hops[0] == "route" and hops[-1] == "summary" and set(hops[1:-1]) == {"answer"}, hops
    route = steps[0].extra
    assert route["label"] in DOMAINS and isinstance(route["margin"], float) and route["margin"] >= 0
    served = g1["adapters"][route["label"]]["serve_name"]
    assert all(s.model_name == served for s in steps[1:]), [s.model_name for s in steps]
    mol = traj.extra["rsi"]["mol"]
    assert mol["routes"][0]["label"] == route["label"] and mol["summaries"][0]["label"] == route["label"]
    calls = mol["calls"]
    assert [c["hop"] for c in calls] == hops and all(c["prompt_tokens"] > 0 for c in calls)
    # the summary's prompt extends the answering adapter's last answer prompt: the prefix cache serves it
    assert calls[-1]["cached_tokens"] > 0, calls
    assert steps[-1].metrics is not None and (steps[-1].metrics.completion_tokens or 0) <= 48
    # the runner let the summary run while it graded the trial, then recorded it (rsi.harness.deferred)
    assert mol["turn_sec"] > 0 and mol["summary_wait_sec"] >= 0 and t["tokens"]["prompt"] == sum(
        c["prompt_tokens"] for c in calls), (mol, t)


def test_the_engine_scores_choices_exactly_and_refuses_legacy_fields(model_ready: None, tmp_path: Path) -> None:
    import torch
    from fastapi.testclient import TestClient

    from rsi.models.server.app import create_app
    from rsi.models.server.engine import Engine, GenRequest
    from rsi.models.sizing import size_server

    eng = Engine(sizing=size_server(max_batch=1, prefix_cache_mb=16, env={}))
    try:
        msgs = [{"role": "system", "content": "Route the request."},
                {"role": "user", "content": "Count the lines of /app/data.csv. Which label: L0, L1 or L2?"}]
        labels = ["L0", "L1", "L2"]
        res = eng.generate(GenRequest(model=eng.model_id, messages=msgs, choice=labels))
        assert res.text in labels and res.choice_scores is not None
        ids = eng.prompt_ids(GenRequest(model=eng.model_id, messages=msgs))
        with torch.inference_mode():
            for lab in labels:
                lab_ids = eng.tokenizer(lab, add_special_tokens=False)["input_ids"]
                full = torch.cat([ids, torch.tensor(lab_ids)])[None]
                logp = torch.log_softmax(eng.model(input_ids=full).logits[0].float(), -1)
                want = sum(float(logp[len(ids) - 1 + j, t]) for j, t in enumerate(lab_ids))
                assert res.choice_scores[lab] == pytest.approx(want, abs=2e-2)
        # the next route prompt extends this one: its prefix comes from the cache
        again = eng.generate(GenRequest(model=eng.model_id, choice=labels, messages=[
            *msgs, {"role": "assistant", "content": res.text}, {"role": "user", "content": "And now?"}]))
        assert again.cached_tokens > 0
        c = TestClient(create_app(eng))
        body = {"model": eng.model_id, "messages": msgs}
        assert c.post("/v1/chat/completions", json={**body, "guided_choice": labels}).status_code == 400
        ok = c.post("/v1/chat/completions", json={**body, "structured_outputs": {"choice": labels}}).json()
        assert ok["choices"][0]["message"]["content"] == ok["choices"][0]["choice"]["label"] in labels
    finally:
        eng.close()
