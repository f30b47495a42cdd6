"""Mixture-of-LoRA in the harness: manifests and the mol spec, per-turn routing, own-view prompts that
token-extend per adapter, summaries, per-call records, and route/summary/adapter failures as infra."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pydantic import ValidationError

from rsi.core.contract import Contract
from rsi.core.generation import AdapterRef, BaseModelRef, GenerationManifest, HarnessRef
from rsi.core.harness_config import HarnessConfig
from rsi.core.mol import MolSpec, keyword_route, route_question
from rsi.core.trial import ErrorType, is_infra
from rsi.harness.agent_loop import HarnessAgent
from rsi.harness.atif import load_trajectory
from rsi.harness.fakes import ScriptedChatModel, ScriptedSandbox, make_context, text_result
from rsi.harness.history import TurnEvent, chatml
from rsi.harness.mol import MolInfraError, MolSession, render_mol_view
from rsi.models.client import ChatClient, ChoiceRefused, ModelRequestError
from rsi.store.files import write_yaml_model

ROOT = Path(__file__).resolve().parents[2]
DOMAINS = {"L0": [], "L1": ["files", "text", "pipeline"], "L2": ["data", "logs"], "L3": ["pyfix"]}


def _contract() -> Contract:
    return Contract.model_validate(yaml.safe_load((ROOT / "contracts" / "hcp-1.0.yaml").read_text()))


def _config(**mol: Any) -> HarnessConfig:
    raw = yaml.safe_load((ROOT / "harness_configs" / "default.yaml").read_text())
    raw["mol"] = {"domains": DOMAINS, **mol}
    return HarnessConfig.model_validate(raw)


def _gen(domains: dict[str, list[str]] | None = None) -> GenerationManifest:
    d = domains or DOMAINS
    return GenerationManifest(
        id="gen-0001", parent="gen-0000", contract="1.0.0", base_model=BaseModelRef(id="base"),
        harness_config=HarnessRef(name="default", digest="0" * 64), schema_version=2,
        adapters={lab: AdapterRef(path=f"adapters/{lab}", sha256=str(i) * 64, serve_name=f"{lab.lower()}-g1-{i}",
                                  role="chat+router" if lab == "L0" else "specialist", domains=fams)
                  for i, (lab, fams) in enumerate(reversed(list(d.items())))})


# -- formats -------------------------------------------------------------------------------------------


def test_one_adapter_manifest_reads_and_writes_as_before(tmp_path: Path) -> None:
    old = {"schema_version": 1, "id": "gen-0001", "parent": "gen-0000", "state": "candidate", "contract": "1.0.0",
           "base_model": {"id": "b"}, "harness_config": {"name": "default", "digest": "d"},
           "adapters": {"default": {"path": "adapters/default/g1", "sha256": "a" * 64, "serve_name": "default-g1"}}}
    m = GenerationManifest.model_validate(old)
    assert not m.is_mol and m.serve_name() == "default-g1" and m.mol_domains() == {}
    write_yaml_model(tmp_path / "g.yaml", m)
    assert yaml.safe_load((tmp_path / "g.yaml").read_text())["adapters"] == old["adapters"]


def test_mol_manifest_orders_labels_and_names_each_adapter() -> None:
    m = _gen()
    assert m.is_mol and list(m.adapters) == ["L0", "L1", "L2", "L3"]
    assert m.serve_name() == m.adapters["L0"].serve_name and m.serve_name("L2") == "l2-g1-1"
    assert m.mol_domains()["L2"] == ["data", "logs"]
    again = GenerationManifest.model_validate_json(m.model_dump_json())
    assert again == m


@pytest.mark.parametrize(("domains", "problem"), [
    ({"L0": [], "L2": ["files"], "L1": ["files"]}, "served by both L1 and L2"),
    ({"L1": ["files"], "L2": ["data"]}, "L0"),
    ({"L0": [], "X": ["files"]}, "not of the form"),
])
def test_bad_groupings_are_refused(domains: dict[str, list[str]], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        MolSpec(domains=domains)
    with pytest.raises(ValidationError, match=problem):
        _gen(domains)


def test_every_family_of_the_pool_is_served_once() -> None:
    spec = MolSpec(domains=DOMAINS)
    assert spec.check_families(["files", "text", "pipeline", "data", "logs", "pyfix"]) == []
    probs = spec.check_families(["files", "text", "pipeline", "data", "logs", "pyfix", "web"])
    assert probs == ["mol.domains: family 'web' is served by no adapter"]
    assert spec.label_of("logs") == "L2" and spec.label_of("web") == "L0"


def test_config_without_mol_keeps_its_digest() -> None:
    raw = yaml.safe_load((ROOT / "harness_configs" / "default.yaml").read_text())
    plain = HarnessConfig.model_validate(raw)
    assert "mol" not in plain.identity()
    assert _config().digest() != plain.digest() and _config().identity()["mol"]["summary_tokens"] == 192


def test_summary_tokens_may_not_loosen_the_contract() -> None:
    from rsi.core.harness_config import config_violations

    c = _contract()
    big = _config(summary_tokens=min(1024, c.limits.max_tokens_per_turn + 1))
    if c.limits.max_tokens_per_turn < 1024:
        assert any(v.startswith("mol.summary_tokens") for v in config_violations(big, c))


def test_keyword_router_baseline() -> None:
    assert keyword_route("clean the logs directory", DOMAINS) == "L2"
    assert keyword_route("hello there", DOMAINS) == "L0"


# -- own-view ------------------------------------------------------------------------------------------


def _conversation(model: ScriptedChatModel, users: list[str],
                  routes: list[str] | None = None) -> tuple[MolSession, dict[str, list[str]]]:
    """Drive a multi-message conversation; return each adapter's prompts (ChatML) in call order
    (`routes`, if given, collects the route prompts alone)."""
    spec = MolSpec(domains=DOMAINS, summary_tokens=32)
    gen = _gen()
    s = MolSession(spec, {lab: gen.serve_name(lab) for lab in gen.adapters}, [{"role": "system", "content": "sys"}])
    prompts: dict[str, list[str]] = {lab: [] for lab in DOMAINS}
    for k, u in enumerate(users):
        s.add_user(u)
        route_prompt = chatml(s.view("L0") + [{"role": "user", "content": route_question(DOMAINS)}])
        prompts["L0"].append(route_prompt)
        if routes is not None:
            routes.append(route_prompt)
        s.route(model)
        for t in (1, 2):
            prompts[s.label].append(chatml(s.messages()))
            res = model.chat(s.serve_names[s.label], s.messages())
            s.record_answer(res, 0.0)
            s.append(TurnEvent(turn=t, author=s.label, format="text", content=res.content,
                               observations=(f"out {k}.{t}",)))
        summary_prompt = s.view(s.label) + [{"role": "user", "content": _summary_req(spec)}]
        prompts[s.label].append(chatml(summary_prompt))
        s.summarize(model)
    return s, prompts


def _summary_req(spec: MolSpec) -> str:
    from rsi.core.mol import summary_request

    return summary_request(spec.summary_tokens)


def test_each_adapters_new_prompt_extends_its_previous_one() -> None:
    model = ScriptedChatModel(["```bash\nls\n```", "DONE", "I listed files."] * 6,
                              labels=["L1", "L2", "L1", "L3", "L0"])
    routes: list[str] = []
    s, prompts = _conversation(model, ["list files", "parse the log", "rename a file", "fix it", "hi"], routes)
    assert [r["label"] for r in s.as_json()["routes"]] == ["L1", "L2", "L1", "L3", "L0"]
    for lab, ps in prompts.items():
        assert ps, lab
        for a, b in zip(ps, ps[1:], strict=False):
            assert b.startswith(a), f"{lab}: a prompt does not extend the previous one"
    # what was sent is exactly the rebuild from the timeline
    assert [chatml(r["messages"]) for r in model.choice_requests] == routes
    # others' user turns appear as summaries, own turns verbatim
    l2 = render_mol_view(s.head, s.timeline, "L2")
    assert {"role": "assistant", "content": "[L1] I listed files."} in l2
    assert not any("```bash" in (m.get("content") or "") for m in l2[:3])


def test_the_rebuild_is_deterministic_and_token_extends() -> None:
    m1 = ScriptedChatModel(["```bash\nls\n```", "DONE", "sum"] * 4, labels=["L1", "L3", "L1"])
    m2 = ScriptedChatModel(["```bash\nls\n```", "DONE", "sum"] * 4, labels=["L1", "L3", "L1"])
    s1, p1 = _conversation(m1, ["a", "b", "c"])
    s2, p2 = _conversation(m2, ["a", "b", "c"])
    assert p1 == p2 and [r["messages"] for r in m1.requests] == [r["messages"] for r in m2.requests]
    try:
        from transformers import AutoTokenizer

        from rsi.models.server.model_files import resolve_model

        tok = AutoTokenizer.from_pretrained(str(resolve_model(None)[0]))
    except Exception:  # noqa: BLE001 — the bundled model is optional for unit tests
        pytest.skip("the bundled tokenizer is not installed")
    for lab, ps in p1.items():
        ids = [tok(p, add_special_tokens=False)["input_ids"] for p in ps]
        for a, b in zip(ids, ids[1:], strict=False):
            assert b[: len(a)] == a, f"{lab}: not a token extension"


# -- the agent loop ------------------------------------------------------------------------------------


def _run(tmp_path: Path, model: ScriptedChatModel, sandbox: ScriptedSandbox | None = None) -> Any:
    ctx = make_context(tmp_path / "trial", contract=_contract(), config=_config(), chat_model=model,
                       instruction="Count the ERROR lines in /app/app.log.")
    ctx.generation = _gen()
    return HarnessAgent().run(sandbox or ScriptedSandbox(), ctx), ctx


def test_a_trial_is_routed_answered_by_the_chosen_adapter_and_summarised(tmp_path: Path) -> None:
    model = ScriptedChatModel(["```bash\ngrep -c ERROR /app/app.log\n```", "DONE", "Counted ERROR lines."],
                              labels=["L2"])
    out, ctx = _run(tmp_path, model, ScriptedSandbox(outputs={"grep -c ERROR /app/app.log": "3"}))
    assert out.error_type is None
    assert [r["model"] for r in model.requests] == ["l2-g1-1"] * 3  # two answer turns + the summary
    assert model.choice_requests[0]["model"] == ctx.generation.serve_name("L0")
    assert model.choice_requests[0]["labels"] == ["L0", "L1", "L2", "L3"]
    assert model.requests[-1]["max_tokens"] == 192
    traj = load_trajectory(ctx.trial_dir / "trajectory.json")
    agent_steps = [s for s in traj.steps if s.source == "agent"]
    assert agent_steps[0].extra["hop"] == "route" and agent_steps[0].extra["label"] == "L2"
    assert agent_steps[0].extra["margin"] == 1.0
    assert [s.extra["hop"] for s in agent_steps] == ["route", "answer", "answer", "summary"]
    assert {s.extra["adapter"] for s in agent_steps[1:]} == {"L2"}
    mol = traj.extra["rsi"]["mol"]
    assert mol["summaries"] == [{"user_turn": 1, "label": "L2", "text": "Counted ERROR lines."}]
    assert [c["hop"] for c in mol["calls"]] == ["route", "answer", "answer", "summary"]
    assert all({"prompt_tokens", "cached_tokens", "wall_sec", "label"} <= set(c) for c in mol["calls"])
    assert out.usage.calls == 4


def test_a_label_outside_the_set_is_infra_and_nothing_answers(tmp_path: Path) -> None:
    model = ScriptedChatModel(["DONE"], labels=["L9"])
    out, _ = _run(tmp_path, model)
    assert out.error_type == ErrorType.MODEL_UNAVAILABLE and is_infra(out.error_type)
    assert not model.requests and len(model.choice_requests) == 3  # hop_retries=2: three tries


def test_a_failed_summary_is_infra(tmp_path: Path) -> None:
    model = ScriptedChatModel(["DONE", ModelRequestError("bad", status_code=400)], labels=["L1"])
    out, _ = _run(tmp_path, model)
    assert out.error_type == ErrorType.MODEL_UNAVAILABLE and "summary" in (out.error_message or "")


def test_an_adapter_missing_on_the_endpoint_is_infra(tmp_path: Path) -> None:
    model = ScriptedChatModel([ModelRequestError("The model `l3-g1-0` does not exist.", status_code=404)],
                              labels=["L3"])
    out, _ = _run(tmp_path, model)
    assert out.error_type == ErrorType.MODEL_UNAVAILABLE


def test_the_client_checks_every_label_and_fails_closed() -> None:
    calls: list[dict[str, Any]] = []

    def handler(req: httpx.Request) -> httpx.Response:
        import json

        body = json.loads(req.content)
        calls.append(body)
        content = "Sure! L1 is best" if len(calls) < 3 else "L1"
        return httpx.Response(200, json={"model": body["model"], "choices": [
            {"message": {"role": "assistant", "content": content}, "finish_reason": "stop",
             "choice": {"label": content, "margin": 0.7}}], "usage": {"prompt_tokens": 5, "completion_tokens": 1}})

    with ChatClient("http://x/v1", transport=httpx.MockTransport(handler), max_attempts=3) as c:
        got = c.choose("l0", [{"role": "user", "content": "q"}], ["L0", "L1"])
        assert got.label == "L1" and got.margin == 0.7 and got.attempts == 3
        assert calls[0]["structured_outputs"] == {"choice": ["L0", "L1"]} and "guided_choice" not in calls[0]
        calls.clear()
    with ChatClient("http://x/v1", transport=httpx.MockTransport(handler), max_attempts=2) as c:
        with pytest.raises(ChoiceRefused):
            c.choose("l0", [{"role": "user", "content": "q"}], ["L0", "L1"], constraint="regex")
        assert calls[0]["regex"] == "(L0|L1)" and "structured_outputs" not in calls[0]


def test_a_session_needs_every_label_served() -> None:
    with pytest.raises(MolInfraError, match="L3"):
        MolSession(MolSpec(domains=DOMAINS), {"L0": "a", "L1": "b", "L2": "c"}, [])
    _ = text_result  # the fakes' helper stays importable for MoL tests


def test_a_mixture_whose_adapter_bytes_changed_is_refused_before_any_trial(tmp_path: Path) -> None:
    import hashlib

    from rsi.core.errors import ConfigError
    from rsi.models.adapters import check_adapter_files

    refs = {}
    for lab in DOMAINS:
        d = tmp_path / "adapters" / lab
        d.mkdir(parents=True)
        (d / "adapter_config.json").write_text("{}")
        (d / "adapter_model.safetensors").write_bytes(lab.encode() * 8)
        sha = hashlib.sha256(lab.encode() * 8).hexdigest()
        refs[lab] = AdapterRef(path=f"adapters/{lab}", sha256=sha, serve_name=f"{lab}-{sha[:8]}", domains=DOMAINS[lab])
    gen = _gen().model_copy(update={"adapters": refs})
    assert set(check_adapter_files(gen, tmp_path)) == {r.serve_name for r in refs.values()}
    (tmp_path / "adapters" / "L2" / "adapter_model.safetensors").write_bytes(b"other weights")
    with pytest.raises(ConfigError, match="adapter 'L2'.*sha256"):
        check_adapter_files(gen, tmp_path)
