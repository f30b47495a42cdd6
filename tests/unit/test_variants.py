"""Variants: setting dotted paths on a config, refused when the contract forbids the result."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rsi.core.contract import Contract
from rsi.core.errors import ConfigError
from rsi.core.harness_config import HarnessConfig
from rsi.core.variants import apply_variant, single_field_variants, variant_label

ROOT = Path(__file__).resolve().parents[2]


def _load() -> tuple[HarnessConfig, Contract]:
    cfg = HarnessConfig.model_validate(yaml.safe_load((ROOT / "harness_configs" / "default.yaml").read_text()))
    contract = Contract.model_validate(yaml.safe_load((ROOT / "contracts" / "hcp-1.0.yaml").read_text()))
    return cfg, contract


def test_nested_path_and_list_index() -> None:
    cfg, contract = _load()
    v = apply_variant(
        cfg,
        {"sampling.temperature": 0.2, "prompt.few_shot.1.content": "```bash\nls\n```", "loop.max_turns": 4},
        contract,
    )
    assert v.sampling.temperature == 0.2 and v.loop.max_turns == 4
    assert v.prompt.few_shot[1].content == "```bash\nls\n```"
    assert v.prompt.few_shot[0] == cfg.prompt.few_shot[0] and v.sampling.top_p == cfg.sampling.top_p
    assert v.digest() != cfg.digest() and v.search_space == cfg.search_space
    assert cfg.sampling.temperature == 0.7 and cfg.loop.max_turns == 6  # the base is untouched
    t = apply_variant(cfg, {"tools.1": "read_file", "tools[0]": "bash"}, contract)
    assert t.tools == ["bash", "read_file"]
    assert apply_variant(cfg, {}, contract) == cfg


def test_value_that_fails_validation_names_field_and_both_values() -> None:
    cfg, contract = _load()
    with pytest.raises(ConfigError) as e:
        apply_variant(cfg, {"sampling.temperature": -1}, contract)
    msg = str(e.value)
    assert msg.startswith("sampling.temperature: -1 is not valid") and "0.7" in msg and e.value.exit_code == 2
    with pytest.raises(ConfigError, match=r"^loop\.history: 'all' is not valid.*'own_view'"):
        apply_variant(cfg, {"loop.history": "all"}, contract)
    with pytest.raises(ConfigError, match=r"^prompt\.few_shot\.0: .*prompt\.few_shot\.0\.role"):
        apply_variant(cfg, {"prompt.few_shot.0": {"role": "robot", "content": "x"}}, contract)


def test_contract_refusal_names_field_and_both_values() -> None:
    cfg, contract = _load()
    with pytest.raises(ConfigError) as e:
        apply_variant(cfg, {"loop.max_turns": 40}, contract)
    assert str(e.value) == "loop.max_turns: 40 loosens the contract's limits.max_turns (30)"
    assert e.value.exit_code == 2
    with pytest.raises(ConfigError, match=r"^limits\.cpus: 8 loosens the contract's limits\.sandbox\.cpus \(2\)"):
        apply_variant(cfg, {"limits.cpus": 8}, contract)
    with pytest.raises(ConfigError, match=r"^tools\[1\]: 'browser' is not in the contract substrate"):
        apply_variant(cfg, {"tools": ["bash", "browser"]}, contract)
    with pytest.raises(ConfigError, match="needs the 'bash' tool"):
        apply_variant(cfg, {"tools": ["submit"]}, contract)


def test_unknown_and_frozen_paths_are_refused() -> None:
    cfg, contract = _load()
    for path in ("sampling.temprature", "tools.5", "prompt.few_shot.9.content", "loop.max_turns.x"):
        with pytest.raises(ConfigError) as e:
            apply_variant(cfg, {path: 1}, contract)
        assert str(e.value) == f"{path}: no such field"
    frozen = ("search_space", "search_space.loop.max_turns", "name", "schema_version", "contract", "model.endpoint")
    for path in (*frozen, "model"):
        with pytest.raises(ConfigError, match="may not change"):
            apply_variant(cfg, {path: "x"}, contract)
    # other model settings are ordinary fields
    assert apply_variant(cfg, {"model.request_timeout_sec": 30}, contract).model.request_timeout_sec == 30


def test_variant_label_is_sorted_short_and_stable() -> None:
    label = variant_label({"sampling.temperature": 0.2, "loop.max_turns": 4})
    assert label == "loop.max_turns=4,sampling.temperature=0.2"
    assert variant_label({"loop.max_turns": 4, "sampling.temperature": 0.2}) == label
    long = variant_label({"prompt.system": "You solve tasks by running bash commands.\nThen say DONE."})
    assert long.startswith("prompt.system=#") and len(long) == len("prompt.system=#") + 8
    assert long == variant_label({"prompt.system": "You solve tasks by running bash commands.\nThen say DONE."})
    assert long != variant_label({"prompt.system": "Another prompt, also long enough to hash."})
    assert variant_label({"loop.history": "full", "limits.network": False}) == "limits.network=false,loop.history=full"
    assert variant_label({"tools": ["bash", "submit"]}).startswith("tools=#")
    assert variant_label({"tools[0]": "bash"}) == "tools.0=bash"
    assert variant_label({}) == "base"


def test_single_field_variants_skip_the_current_value_and_are_ordered() -> None:
    cfg, contract = _load()
    raw = cfg.model_dump()
    raw["search_space"] = {
        "sampling.temperature": [0.2, 0.7, 1, 0.2],
        "loop.max_turns": [4, 6, 8],
        "prompt.system": [cfg.prompt.system, "Short."],
    }
    cfg = HarnessConfig.model_validate(raw)
    got = single_field_variants(cfg)
    assert got == [
        {"loop.max_turns": 4},
        {"loop.max_turns": 8},
        {"prompt.system": "Short."},
        {"sampling.temperature": 0.2},
        {"sampling.temperature": 1},
    ]
    for a in got:
        apply_variant(cfg, a, contract)
    assert single_field_variants(HarnessConfig.model_validate(dict(raw, search_space={}))) == []


def test_single_field_variants_of_the_shipped_config() -> None:
    cfg, contract = _load()
    got = single_field_variants(cfg)
    # temperature 0.7 and the first system prompt are the config's own values
    assert [next(iter(a)) for a in got] == [
        "loop.max_turns",
        "loop.max_turns",
        "prompt.few_shot",
        "prompt.system",
        "sampling.temperature",
        "sampling.temperature",
    ]
    assert [variant_label(a) for a in got][:2] == ["loop.max_turns=4", "loop.max_turns=8"]
    assert got[2] == {"prompt.few_shot": []}  # the shipped example is searchable: no example at all
    assert got[3]["prompt.system"] == cfg.search_space["prompt.system"][1]
    assert [a.get("sampling.temperature") for a in got[4:]] == [0.2, 1.0]
    assert len({apply_variant(cfg, a, contract).digest() for a in got} | {cfg.digest()}) == len(got) + 1
