"""The shipped default harness config: loads, fits the contract, renders."""

from __future__ import annotations

from pathlib import Path

import yaml

from rsi.core.contract import Contract
from rsi.core.harness_config import HarnessConfig, contract_violations
from rsi.harness.prompts import initial_messages, prompt_variables

ROOT = Path(__file__).resolve().parents[2]


def _load() -> tuple[HarnessConfig, Contract]:
    cfg = HarnessConfig.model_validate(
        yaml.safe_load((ROOT / "harness_configs" / "default.yaml").read_text())
    )
    contract = Contract.model_validate(yaml.safe_load((ROOT / "contracts" / "hcp-1.0.yaml").read_text()))
    return cfg, contract


def test_default_config_fits_the_contract() -> None:
    cfg, contract = _load()
    assert contract_violations(cfg, contract) == []
    assert cfg.action_format == "text" and cfg.loop.finish_word == "DONE"


def test_every_search_space_value_also_fits_the_contract() -> None:
    cfg, contract = _load()
    assert cfg.search_space
    for key, values in cfg.search_space.items():
        section, field = key.split(".")
        for value in values:
            raw = cfg.model_dump()
            raw[section][field] = value
            variant = HarnessConfig.model_validate(raw)
            assert contract_violations(variant, contract) == [], (key, value)
            tools = contract.openai_tools(variant.tools)
            v = prompt_variables(variant, instruction="x", workdir="/app", tools=tools, max_turns=4, task="t")
            initial_messages(variant, v)  # StrictUndefined: every variant renders


def test_file_template_next_to_config(tmp_path: Path) -> None:
    cfg, contract = _load()
    (tmp_path / "sys.j2").write_text("Tools: {{ tool_names | join(', ') }}")
    raw = cfg.model_dump()
    raw["prompt"]["system"] = "file:sys.j2"
    variant = HarnessConfig.model_validate(raw)
    v = prompt_variables(
        variant,
        instruction="x",
        workdir="/app",
        tools=contract.openai_tools(variant.tools),
        max_turns=4,
        task="t",
    )
    assert initial_messages(variant, v, config_dir=tmp_path)[0]["content"] == "Tools: bash, submit"
