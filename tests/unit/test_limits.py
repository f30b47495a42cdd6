"""Effective limits: each is the tightest of the task's request, the contract's ceiling and the config's."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from rsi.core.contract import Contract
from rsi.core.harness_config import HarnessConfig
from rsi.core.limits import EffectiveLimits, effective_limits
from rsi.core.task import TaskSpec

ROOT = Path(__file__).resolve().parents[2]


def _contract(network: bool = False) -> Contract:
    c = Contract.model_validate(yaml.safe_load((ROOT / "contracts" / "hcp-1.0.yaml").read_text()))
    return c.model_copy(update={"limits": c.limits.model_copy(update={"sandbox": c.limits.sandbox.model_copy(
        update={"network": network})})})


def _config(**limits: object) -> HarnessConfig:
    raw = yaml.safe_load((ROOT / "harness_configs" / "default.yaml").read_text())
    raw["limits"] = limits
    return HarnessConfig.model_validate(raw)


def _task(**env: object) -> TaskSpec:
    return TaskSpec.model_validate(
        {"agent": {"timeout_sec": 60}, "verifier": {"timeout_sec": 500}, "environment": {"cpus": 4, **env}}
    )


def test_task_contract_and_config_each_bind_where_tightest() -> None:
    lim = effective_limits(_task(memory_mb=8192, pids=100), _contract(), _config(cpus=0.5, command_timeout_sec=30))
    assert lim.agent_timeout_sec == 60  # task (contract 900)
    assert lim.verifier_timeout_sec == 300  # contract (task asked 500)
    assert lim.command_timeout_sec == 30  # config (contract 120)
    assert lim.cpus == 0.5  # config (task 4, contract 2)
    assert lim.memory_mb == 4096  # contract (task asked 8192)
    assert lim.pids == 100  # task (contract 512)
    assert lim.max_turns == 6 and lim.max_tokens_per_turn == 192 and lim.observation_max_chars == 1500  # config
    assert lim.network is False


def test_without_task_or_config_the_contract_decides() -> None:
    c = _contract()
    lim = effective_limits(None, c, None)
    assert lim == EffectiveLimits(
        agent_timeout_sec=900,
        command_timeout_sec=120,
        verifier_timeout_sec=300,
        cpus=2,
        memory_mb=4096,
        pids=512,
        network=False,
        max_turns=30,
        max_tokens_per_turn=2048,
        observation_max_chars=8000,
    )
    assert effective_limits(_task(), c, None).agent_timeout_sec == 60


@pytest.mark.parametrize(
    ("mode", "contract_allows", "config_network", "expected"),
    [
        ("bridge", True, None, True),
        ("bridge", True, True, True),
        ("bridge", True, False, False),  # the config turns it off
        ("bridge", False, True, False),  # the contract forbids
        ("none", True, True, False),  # the task asks for none
    ],
)
def test_network_is_on_only_if_task_contract_and_config_all_agree(
    mode: str, contract_allows: bool, config_network: bool | None, expected: bool
) -> None:
    lim = effective_limits(_task(network_mode=mode), _contract(contract_allows), _config(network=config_network))
    assert lim.network is expected


def test_no_task_leaves_network_to_contract_and_config() -> None:
    assert effective_limits(None, _contract(True), None).network is True
    assert effective_limits(None, _contract(True), _config(network=False)).network is False


def test_effective_limits_are_frozen() -> None:
    lim = effective_limits(None, _contract(), None)
    with pytest.raises(ValidationError):
        lim.cpus = 16  # type: ignore[misc]
