"""External harnesses (kind: external): config, limits, and mini-swe-agent run against a scripted sandbox with a
fake model endpoint behind a real recording gateway. The trajectory is built from the gateway's records only."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from rsi.core.contract import Contract
from rsi.core.external import PROGRAMS
from rsi.core.harness_config import HarnessConfig, contract_violations, with_values
from rsi.core.limits import effective_limits
from rsi.harness.agent import AgentSetupError
from rsi.harness.agent_loop import HarnessAgent
from rsi.harness.atif import load_trajectory
from rsi.harness.external.base import installed_version
from rsi.harness.external.runner import RUNNERS, ExternalResult, ExternalRun
from rsi.harness.fakes import ScriptedSandbox, make_context
from rsi.models.gateway import Gateway, read_calls
from rsi.store.files import load_harness_config

ROOT = Path(__file__).resolve().parents[2]
MSWE = ROOT / "harness_configs" / "mini-swe.yaml"
needs_msa = pytest.mark.skipif(installed_version("mini-swe-agent") is None,
                               reason="mini-swe-agent is not installed (pip install 'rsi[external]')")


@pytest.fixture
def contract() -> Contract:
    return Contract.model_validate(yaml.safe_load((ROOT / "contracts" / "hcp-1.0.yaml").read_text()))


@pytest.fixture
def config() -> HarnessConfig:
    return load_harness_config(MSWE)


class Endpoint:
    """A fake OpenAI-compatible endpoint: scripted replies, token ids from a counter, every body kept."""

    def __init__(self, replies: list[str]) -> None:
        self.replies = replies
        self.bodies: list[dict[str, Any]] = []

    def __call__(self, req: httpx.Request) -> httpx.Response:
        if req.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": []})
        body = json.loads(req.content)
        self.bodies.append(body)
        k = len(self.bodies) - 1
        text = self.replies[min(k, len(self.replies) - 1)]
        n_prompt = sum(len(str(m.get("content") or "")) for m in body["messages"]) // 10 + 1
        data = {"id": f"c{k}", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                             "logprobs": {"content": [{"token": "t", "logprob": -0.25 - k}] * 3}}],
                "usage": {"prompt_tokens": n_prompt, "completion_tokens": 3},
                "prompt_token_ids": list(range(n_prompt)), }
        data["choices"][0]["token_ids"] = [100 + k, 200 + k, 300 + k]
        return httpx.Response(200, json=data)


def _run(tmp_path: Path, contract: Contract, config: HarnessConfig, endpoint: Endpoint,
         sandbox: ScriptedSandbox | None = None, **kw: Any) -> tuple[Any, Any, Gateway]:
    gw = Gateway(transport=httpx.MockTransport(endpoint))
    ctx = make_context(tmp_path / "trial", contract=contract, config=config, **kw)
    ctx.model_endpoint = "http://endpoint/v1"
    ctx.extra["gateway"] = gw
    ctx.limits = effective_limits(ctx.task.spec, contract, config)
    box = sandbox or ScriptedSandbox()
    try:
        out = HarnessAgent().run(box, ctx)  # type: ignore[arg-type]
    finally:
        gw.close()
    return out, box, gw


def test_config_identity_covers_the_program_its_version_and_its_config(config: HarnessConfig,
                                                                       contract: Contract) -> None:
    assert config.kind == "external" and config.external is not None
    assert config.external.program == "mini-swe-agent" and config.external.version == "2.4.6"
    assert "system_template" in config.external.config["agent"]  # the file was inlined
    assert contract_violations(config, contract) == []
    d = config.digest()
    assert with_values(config, {"external.config.agent.step_limit": 5}).digest() != d
    other = config.model_copy(update={"external": config.external.model_copy(update={"version": "2.4.7"})})
    assert other.digest() != d
    # a built-in config's digest does not see the new fields
    assert "kind" not in load_harness_config(ROOT / "harness_configs" / "default.yaml").identity()


@pytest.mark.parametrize(("path", "value", "needle"), [
    ("external.config.agent.step_limit", 31, "loosens the contract's limits.max_turns (30)"),
    ("external.config.agent.step_limit", 0, "(no limit) loosens the contract's limits.max_turns"),
    ("external.config.model.model_kwargs.max_tokens", 4096, "limits.max_tokens_per_turn (2048)"),
    ("external.config.environment.timeout", 600, "limits.command_timeout_sec (120)"),
])
def test_an_external_config_cannot_loosen_the_contract(config: HarnessConfig, contract: Contract, path: str,
                                                       value: Any, needle: str) -> None:
    bad = with_values(config, {path: value})
    assert any(v.startswith(path) and needle in v for v in contract_violations(bad, contract)), \
        contract_violations(bad, contract)


def test_fields_rsi_owns_and_frozen_fields(config: HarnessConfig, contract: Contract) -> None:
    raw = config.model_dump(mode="json")
    raw["external"]["config"]["model"]["model_name"] = "openai/gpt-4o"
    raw["external"]["config"]["environment"]["environment_class"] = "local"
    v = contract_violations(HarnessConfig.model_validate(raw), contract)
    assert any("model.model_name: set by rsi" in x for x in v) and any("environment_class" in x for x in v)
    raw = config.model_dump(mode="json")
    raw["search_space"] = {"external.version": ["2.5.0"]}
    assert any("not a field rsi expand may vary" in x
               for x in contract_violations(HarnessConfig.model_validate(raw), contract))
    with pytest.raises(ValueError, match="prompts live in its own config"):
        HarnessConfig.model_validate({**config.model_dump(mode="json"), "prompt": {"system": "hi"}})


def test_search_space_values_are_checked(config: HarnessConfig, contract: Contract) -> None:
    raw = config.model_dump(mode="json")
    raw["search_space"] = {"external.config.agent.step_limit": [4, 99]}
    v = contract_violations(HarnessConfig.model_validate(raw), contract)
    assert v == ["search_space.external.config.agent.step_limit[1]: 99 loosens the contract's limits.max_turns (30)"]


def test_effective_limits_take_the_programs_own(config: HarnessConfig, contract: Contract) -> None:
    lim = effective_limits(None, contract, config)
    assert (lim.max_turns, lim.max_tokens_per_turn, lim.command_timeout_sec) == (6, 192, 60)


@needs_msa
def test_mini_swe_agent_runs_and_the_trajectory_is_the_gateways_records(tmp_path: Path, contract: Contract,
                                                                        config: HarnessConfig) -> None:
    ep = Endpoint(["I will write it.\n```bash\necho hello > /app/hello.txt\n```",
                   "no command here",
                   "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"])
    box = ScriptedSandbox(outputs={"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT":
                                   "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n"})
    out, box, _ = _run(tmp_path, contract, config, ep, box)
    assert out.error_type is None, out.error_message
    assert [c[0] for c in box.commands] == ["echo hello > /app/hello.txt", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"]
    assert all(t is not None and t <= 60 for _, t, _ in box.commands)  # the config's timeout, under the contract's
    trial = tmp_path / "trial"
    calls = read_calls(trial / "gateway.jsonl")
    assert len(calls) == 3 and all(c.ok for c in calls)
    assert [b["model"] for b in ep.bodies] == ["SmolLM2-135M-Instruct"] * 3  # pinned; litellm's prefix stripped
    assert all(b["max_tokens"] == 192 and b["temperature"] == 0.7 for b in ep.bodies)
    traj = load_trajectory(trial / "trajectory.json")
    agent_steps = [s for s in traj.steps if s.source == "agent"]
    assert [s.extra["completion_token_ids"] for s in agent_steps] == [c.completion_token_ids for c in calls]
    assert [s.extra["prompt_token_ids"] for s in agent_steps] == [c.prompt_token_ids for c in calls]
    assert [s.message for s in agent_steps] == ep.replies
    rsi = traj.rsi
    assert rsi["source"] == "gateway" and rsi["stop_reason"] == "Submitted"
    assert rsi["harness_config_digest"] == config.digest()
    msgs = rsi["messages"]
    assert msgs[0]["role"] == "system" and "Task: Create the file" in msgs[1]["content"]
    assert [m["content"] for m in msgs if m["role"] == "assistant"] == ep.replies
    # the malformed reply was not in mini-swe-agent's next prompt: recorded, not hidden
    assert [s.extra["gateway"]["in_next_prompt"] for s in agent_steps] == [True, False, True]
    # each call's prompt is exactly what the harness sent: the first two messages of every call agree
    assert all(b["messages"][:2] == ep.bodies[0]["messages"][:2] for b in ep.bodies)
    assert out.turns == 3 and out.usage.completion_tokens == 9
    assert (trial / "mini-swe-agent.traj.json").is_file()


@needs_msa
def test_the_step_limit_is_the_contracts_when_the_config_is_looser(tmp_path: Path, contract: Contract,
                                                                   config: HarnessConfig) -> None:
    tight = contract.model_copy(update={"limits": contract.limits.model_copy(update={"max_turns": 2})})
    ep = Endpoint(["```bash\nls\n```"])
    out, box, _ = _run(tmp_path, tight, config, ep)
    assert len(ep.bodies) == 2 and len(box.commands) == 2
    assert load_trajectory(tmp_path / "trial" / "trajectory.json").rsi["stop_reason"] == "LimitsExceeded"


class _Rogue:
    """A program that ignores every limit its config states: many calls, huge max_tokens, long commands."""

    program = "rogue"

    def run(self, run: ExternalRun) -> ExternalResult:
        from rsi.harness.external.mini_swe import SandboxEnvironment

        env = SandboxEnvironment(run.sandbox, workdir=run.workdir, command_timeout=run.limits.command_timeout_sec,
                                 deadline=run.deadline, observation_max_chars=run.limits.observation_max_chars,
                                 timeout=10_000)
        codes = []
        for _ in range(8):
            r = httpx.post(f"{run.base_url}/chat/completions", headers={"Authorization": f"Bearer {run.api_key}"},
                           json={"model": run.model, "messages": [{"role": "user", "content": "go"}],
                                 "max_tokens": 100_000})
            codes.append(r.status_code)
            httpx.post(f"{run.base_url}/chat/completions",
                       json={"model": "SmolLM2-135M-Instruct-base", "messages": [{"role": "user", "content": "x"}]})
            env.execute({"command": "sleep 1"}, timeout=10_000)
        return ExternalResult(exit_status="done", extra={"codes": codes})


def test_an_external_harness_cannot_loosen_the_limits_at_run_time(tmp_path: Path, contract: Contract,
                                                                  config: HarnessConfig,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("rsi.harness.external.base.check_installed", lambda ext: None)
    rogue = config.model_copy(update={"external": config.external.model_copy(  # type: ignore[union-attr]
        update={"program": "rogue"})})
    RUNNERS.add("rogue", _Rogue)
    monkeypatch.setitem(PROGRAMS, "rogue", PROGRAMS["mini-swe-agent"])
    ep = Endpoint(["hi"])
    out, box, _ = _run(tmp_path, contract, rogue, ep, command_timeout_sec=7.0)
    codes = load_trajectory(tmp_path / "trial" / "trajectory.json").rsi["program_result"]["codes"]
    assert codes == [200] * 6 + [403] * 2  # the config's step limit (6): the gateway refuses the rest
    assert len(ep.bodies) == 6  # neither the refused calls nor the base-model requests were forwarded
    assert all(b["max_tokens"] == 192 for b in ep.bodies)  # clamped to the effective ceiling
    assert len(box.commands) == 8 and all(t is not None and t <= 7.0 for _, t, _ in box.commands)  # rsi's timeout
    calls = read_calls(tmp_path / "trial" / "gateway.jsonl")
    assert sum(1 for c in calls if c.refused and "pinned" in c.refused) == 8
    assert out.turns == 6


def test_an_uninstalled_or_other_version_is_a_setup_error(tmp_path: Path, contract: Contract,
                                                          config: HarnessConfig) -> None:
    other = config.model_copy(update={"external": config.external.model_copy(  # type: ignore[union-attr]
        update={"version": "0.0.1"})})
    with pytest.raises(AgentSetupError, match="0.0.1"):
        _run(tmp_path, contract, other, Endpoint(["x"]))


@needs_msa
def test_update_trains_on_exactly_the_ids_the_gateway_served(tmp_path: Path, contract: Contract,
                                                             config: HarnessConfig) -> None:
    """The trial's dataset line carries each call's served ids and log-probs; the trainer's samples are those ids,
    even where the trainer's own rendering of the messages would differ (no re-tokenisation)."""
    from rsi.loop.update.data import dataset_line, load_trial
    from rsi.store.tables import TrialRow
    from rsi.train.local import build_samples

    ep = Endpoint(["```bash\nls\n```", "```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```"])
    box = ScriptedSandbox(outputs={"echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT":
                                   "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n"})
    _run(tmp_path, contract, config, ep, box)
    row = TrialRow(id="t1", job_id="j", task_name="hello", task_digest="0" * 64, generation="gen-0000",
                   agent="harness", attempt=1, status="done", reward=1.0, passed=True,
                   harness_config_digest=config.digest(), trial_dir=str(tmp_path / "trial"), turns=2)
    loaded = load_trial(row, tmp_path, 6)
    assert not isinstance(loaded, str), loaded
    assert loaded.record.source == "gateway" and loaded.record.own
    calls = read_calls(tmp_path / "trial" / "gateway.jsonl")
    assert [t["completion_token_ids"] for t in loaded.tokens or []] == [c.completion_token_ids for c in calls]
    line = dataset_line(loaded, accepted=True, group_id="g", sample_index=0, advantage=0.5,
                        serving_digest=config.digest())

    class Tok:  # a tokenizer whose rendering never matches the served prompt ids
        def apply_chat_template(self, msgs: list[dict[str, str]], **_: Any) -> str:
            return "rendered differently"

        def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
            return {"input_ids": [ord(c) for c in text]}

        def convert_tokens_to_ids(self, tok: str) -> int:
            return 0

    samples, stats = build_samples([line], Tok(), 100_000)
    assert [s.prompt for s in samples] == [c.prompt_token_ids for c in calls]
    assert [s.completion for s in samples] == [c.completion_token_ids for c in calls]
    assert [s.old_logprobs for s in samples] == [c.logprobs for c in calls]
    assert stats["token_served"] == 2 and stats["token_mismatch"] == 0 and all(s.advantage == 0.5 for s in samples)
    # a gateway line without ids is dropped, never rendered
    samples, stats = build_samples([type(line)(**{**line.__dict__, "tokens": None})], Tok(), 100_000)
    assert samples == [] and stats["no_tokens_gateway"] == 2
