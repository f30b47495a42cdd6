"""`rsi update` for a Mixture-of-LoRA generation: each specialist trains on its own domains only, an adapter
with nothing new keeps its bytes, sha256 and serve name, misrouted trajectories are refused for the
specialist, and --add-specialist registers a new label without touching the others."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rsi.core.errors import InputError
from rsi.core.generation import GenerationState
from rsi.core.harness_config import HarnessConfig
from rsi.loop.context import WorkspaceContext
from rsi.loop.update.phase import UpdateRequest, run_update
from tests.updatekit import T, add_trials, workspace

DOMAINS = {"L0": [], "L1": ["files", "text"], "L2": ["data"], "L3": ["pyfix"]}

# writes a PEFT-shaped adapter whose tensor bytes are a digest of the dataset it was given
SCRIPT = r'''
import hashlib, json, struct, sys
from pathlib import Path
out, base, dataset = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
out.mkdir(parents=True, exist_ok=True)
cfg = {"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": ["q_proj"], "base_model_name_or_path": base}
(out / "adapter_config.json").write_text(json.dumps(cfg))
data = hashlib.sha256(dataset.read_bytes()).digest()
data += hashlib.sha256(data).digest()
header = {"base_model.model.layers.0.q_proj.lora_A.weight": {"dtype": "F32", "shape": [4, 2], "data_offsets": [0, 32]},
          "base_model.model.layers.0.q_proj.lora_B.weight": {"dtype": "F32", "shape": [2, 4], "data_offsets": [32, 64]}}
h = json.dumps(header).encode()
(out / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(h)) + h + data)
'''


def _serve_mol(c: WorkspaceContext, gen_id: str) -> None:
    """Give `gen_id` a harness config with a `mol` section (so its update makes a mixture)."""
    raw = yaml.safe_load((c.ws.harness_configs_dir / "default.yaml").read_text())
    raw["name"], raw["mol"] = "mol", {"domains": DOMAINS}
    cfg = HarnessConfig.model_validate(raw)
    (c.ws.harness_configs_dir / "mol.yaml").write_text(cfg.canonical_yaml())
    g = c.generation(gen_id)
    c.store.put_generation(g.model_copy(update={"harness_config": g.harness_config.model_copy(
        update={"name": "mol", "digest": cfg.digest()})}))


@pytest.fixture
def ctx(tmp_path: Path) -> WorkspaceContext:
    c = workspace(tmp_path)
    _serve_mol(c, "gen-0000")
    return c


def _mark(ctx: WorkspaceContext, ids: list[str], families: dict[str, str | None],
          routes: dict[str, str] | None = None) -> None:
    """Give each trial's trajectory the family (and the route) a MoL trial records."""
    for tid in ids:
        row = ctx.store.get_trial(tid)
        p = Path(row.trial_dir) / "trajectory.json"
        data = json.loads(p.read_text())
        task = row.task_name
        mol: dict[str, Any] = {"family": families[task]}
        if routes and task in routes:
            mol["routes"] = [{"user_turn": 1, "label": routes[task], "margin": 1.0}]
        data["extra"]["rsi"]["mol"] = mol
        p.write_text(json.dumps(data))


def _cmd(tmp_path: Path) -> str:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return f"{sys.executable} {script} {{output_dir}} {{base_model}} {{dataset}}"


def _update(ctx: WorkspaceContext, tmp_path: Path, **kw: Any) -> Any:
    return run_update(UpdateRequest(backend="command", command=_cmd(tmp_path), load=False, **kw), ctx.ws.root)


def test_specialists_train_on_their_domains_and_untouched_adapters_keep_their_bytes(
        ctx: WorkspaceContext, tmp_path: Path) -> None:
    fams = {"alpha": "files", "beta": "data", "delta": None, "gamma": "pyfix"}
    ids = add_trials(ctx, [T("alpha", 1, 1.0), T("beta", 1, 1.0), T("delta", 1, 1.0), T("gamma", 1, 0.0)])
    _mark(ctx, ids, fams)
    out = _update(ctx, tmp_path)
    g1 = ctx.store.get_generation(out.candidate)
    assert g1.is_mol and list(g1.adapters) == ["L0", "L1", "L2", "L3"] and g1.schema_version == 2
    assert g1.mol_domains() == DOMAINS and g1.adapters["L0"].role == "chat+router"
    names = [r.serve_name for r in g1.adapters.values()]
    assert len(set(names)) == 4 and names[1].startswith("agent-l1-g0001-")
    # each trained adapter saw only its own domain's trajectory
    for lab, task in (("L1", "alpha"), ("L2", "beta"), ("L0", "delta")):
        lines = (Path(out.dataset["path"]) / lab / "dataset" / "dataset.jsonl").read_text().splitlines()
        assert [json.loads(x)["provenance"]["task"] for x in lines] == [task]
    # L3 had nothing accepted and the parent was the base: it starts as an identity LoRA (L0's shape, B zeroed,
    # so it answers as the base does), never with L0's routing weights, under its own serve name
    l0 = (ctx.ws.root / g1.adapters["L0"].path / "adapter_model.safetensors").read_bytes()
    l3 = (ctx.ws.root / g1.adapters["L3"].path / "adapter_model.safetensors").read_bytes()
    assert len(l3) == len(l0) and l3[-32:] == bytes(32) and l0[-32:] != bytes(32) and l3[:-32] == l0[:-32]
    assert g1.adapters["L3"].sha256 != g1.adapters["L0"].sha256
    assert "identity" in out.training["mol"]["L3"]["why"]
    ctx.store.put_generation(g1.model_copy(update={"state": GenerationState.PROMOTED}))

    # round 2 from the mixture: only L2's domain has a new accepted trajectory; a misrouted one is refused
    before = {lab: (r, (ctx.ws.root / r.path / "adapter_model.safetensors").read_bytes())
              for lab, r in g1.adapters.items()}
    ids2 = add_trials(ctx, [T("beta", 2, 1.0, generation=g1.id), T("alpha", 2, 1.0, generation=g1.id)],
                      job_id="job-upd-2")
    _mark(ctx, ids2, fams, routes={"beta": "L2", "alpha": "L2"})
    out2 = _update(ctx, tmp_path, gen=g1.id)
    g2 = ctx.store.get_generation(out2.candidate)
    assert out2.training["mol"]["L1"]["refused"] == 1  # alpha answered by L2: not L1's view
    assert g2.adapters["L2"].serve_name != g1.adapters["L2"].serve_name
    for lab in ("L0", "L1", "L3"):
        ref, data = before[lab]
        assert g2.adapters[lab] == ref  # same path, sha256, serve name, role, domains
        assert (ctx.ws.root / g2.adapters[lab].path / "adapter_model.safetensors").read_bytes() == data
    assert g2.metrics["mol_adapters_changed"] == 1.0
    assert g2.provenance.training and g2.provenance.training["mol"]["changed"] == ["L2"]

    # a new specialist for a new family touches no other adapter
    ctx.store.put_generation(g2.model_copy(update={"state": GenerationState.PROMOTED}))
    with pytest.raises(InputError, match="served by L2"):
        _update(ctx, tmp_path, gen=g2.id, add_specialist="L4", domains=["data"])
    out3 = _update(ctx, tmp_path, gen=g2.id, add_specialist="L4", domains=["logs"])
    g3 = ctx.store.get_generation(out3.candidate)
    assert g3.mol_domains()["L4"] == ["logs"] and g3.adapters["L4"].serve_name not in names
    assert all(g3.adapters[lab] == g2.adapters[lab] for lab in ("L0", "L1", "L2", "L3"))
    l4 = (ctx.ws.root / g3.adapters["L4"].path / "adapter_model.safetensors").read_bytes()
    assert l4[-32:] == bytes(32)  # the new family starts at the base, not as a copy of the router


def test_a_first_mixture_seeds_an_untrained_specialist_with_the_parents_adapter(tmp_path: Path) -> None:
    """From a one-adapter parent, a specialist with nothing accepted keeps answering as the parent did."""
    ctx = workspace(tmp_path)
    ids = add_trials(ctx, [T("alpha", 1, 1.0)])
    _mark(ctx, ids, {"alpha": "files"})
    g1 = ctx.store.get_generation(_update(ctx, tmp_path).candidate)
    assert not g1.is_mol and len(g1.adapters) == 1
    ctx.store.put_generation(g1.model_copy(update={"state": GenerationState.PROMOTED}))
    _serve_mol(ctx, g1.id)
    mol_digest = ctx.generation(g1.id).harness_config.digest
    ids2 = add_trials(ctx, [T("alpha", 2, 1.0, generation=g1.id, config_digest=mol_digest)], job_id="job-upd-2")
    _mark(ctx, ids2, {"alpha": "files"})
    out = _update(ctx, tmp_path, gen=g1.id)
    g2 = ctx.store.get_generation(out.candidate)
    parent = next(iter(g1.adapters.values()))
    for lab in ("L2", "L3"):
        assert g2.adapters[lab].sha256 == parent.sha256 and g2.adapters[lab].serve_name != parent.serve_name
        assert out.training["mol"][lab]["why"] == "new label: the parent's adapter"


def test_the_export_backend_writes_each_labels_dataset_and_registers_nothing(
        ctx: WorkspaceContext, tmp_path: Path) -> None:
    """`rsi update --backend export` on a mixture: every label with something to train gets its own dataset (its
    domains' trajectories only; L0's routing examples), no candidate is registered and no adapter is placed."""
    fams = {"alpha": "files", "beta": "data", "delta": None, "gamma": "pyfix"}
    ids = add_trials(ctx, [T("alpha", 1, 1.0), T("beta", 1, 1.0), T("delta", 1, 1.0), T("gamma", 1, 0.0)])
    _mark(ctx, ids, fams)
    gens_before = [g.id for g in ctx.store.list_generations()]
    out = run_update(UpdateRequest(backend="export", load=False), ctx.ws.root)
    assert out.candidate is None and out.manifest_path is None
    assert [g.id for g in ctx.store.list_generations()] == gens_before
    assert not (ctx.ws.root / "adapters").exists() or not any((ctx.ws.root / "adapters").rglob("*.safetensors"))
    exported = out.dataset["labels"]
    assert set(exported) == {"L0", "L1", "L2"}  # L3's one trajectory failed: nothing to train, nothing written
    for lab, task in (("L1", "alpha"), ("L2", "beta")):
        lines = Path(exported[lab]).read_text().splitlines()
        assert [json.loads(x)["provenance"]["task"] for x in lines] == [task]
    assert out.training["mol"]["L1"]["exported"] == exported["L1"]
