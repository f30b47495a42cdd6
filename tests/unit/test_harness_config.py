"""Harness configs: the shipped default fits the contract, identity is content-addressed, and
`search_space` is checked path by path and value by value."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from rsi.cli.app import app
from rsi.core.contract import Contract
from rsi.core.errors import InputError
from rsi.core.harness_config import (
    FieldProblem,
    HarnessConfig,
    contract_violations,
    get_path,
    search_space_violations,
    set_path,
    with_values,
)
from rsi.core.variants import apply_variant
from rsi.harness.prompts import initial_messages, prompt_variables
from rsi.loop.context import check_config
from rsi.store.files import load_harness_config

ROOT = Path(__file__).resolve().parents[2]
CONTRACT_PATH = ROOT / "contracts" / "hcp-1.0.yaml"


def _raw() -> dict[str, Any]:
    raw = yaml.safe_load((ROOT / "harness_configs" / "default.yaml").read_text())
    assert isinstance(raw, dict)
    return raw


def _load() -> tuple[HarnessConfig, Contract]:
    cfg = HarnessConfig.model_validate(_raw())
    contract = Contract.model_validate(yaml.safe_load(CONTRACT_PATH.read_text()))
    return cfg, contract


def _write(tmp_path: Path, raw: dict[str, Any], name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_default_config_fits_the_contract() -> None:
    cfg, contract = _load()
    assert contract_violations(cfg, contract) == []
    assert cfg.action_format == "text" and cfg.loop.finish_word == "DONE"


def test_every_search_space_value_also_fits_the_contract() -> None:
    cfg, contract = _load()
    assert cfg.search_space
    for key, values in cfg.search_space.items():
        for value in values:
            variant = apply_variant(cfg, {key: value}, contract)
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


# --- identity ------------------------------------------------------------------------------------


def test_digest_ignores_key_order_comments_and_written_out_defaults(tmp_path: Path) -> None:
    raw = _raw()
    base = load_harness_config(_write(tmp_path, raw, "a.yaml")).digest()
    reordered = dict(reversed(list(raw.items())))
    reordered["sampling"] = dict(reversed(list(raw["sampling"].items())))
    path = _write(tmp_path, reordered, "b.yaml")
    path.write_text("# a comment\n" + path.read_text().replace("\nloop:", "\n# another\nloop:"))
    assert load_harness_config(path).digest() == base
    with_defaults = dict(raw, limits={"cpus": None}, sampling=dict(raw["sampling"], seed=None))
    assert load_harness_config(_write(tmp_path, with_defaults, "c.yaml")).digest() == base
    # the shipped file, comments and all, has that same identity
    assert load_harness_config(ROOT / "harness_configs" / "default.yaml").digest() == base


def test_digest_ignores_search_space_but_not_behaviour() -> None:
    cfg, _ = _load()
    base = cfg.digest()
    assert HarnessConfig.model_validate(dict(_raw(), search_space={})).digest() == base
    assert HarnessConfig.model_validate(dict(_raw(), search_space={"loop.max_turns": [2]})).digest() == base
    assert "search_space" not in cfg.identity() and "prompt" in cfg.identity()
    for path, value in [
        ("prompt.system", "Another prompt."),
        ("prompt.few_shot.0.content", "Task: something else"),
        ("sampling.temperature", 0.1),
        ("loop.max_turns", 3),
        ("tools", ["bash", "read_file", "submit"]),
        ("limits.cpus", 1.0),
        ("action_format", "tool_calls"),
        ("model.endpoint", "http://127.0.0.1:8000/v1"),
        ("contract", ">=1.0,<1.5"),
    ]:
        assert with_values(cfg, {path: value}).digest() != base, path


def test_few_shot_file_is_inlined_and_its_content_is_in_the_digest(tmp_path: Path) -> None:
    raw = _raw()
    raw["prompt"]["few_shot"][1]["content"] = "file:shot.j2"
    path = _write(tmp_path, raw)
    (tmp_path / "shot.j2").write_text("```bash\nls\n```")
    cfg = load_harness_config(path)
    assert cfg.prompt.few_shot[1].content == "```bash\nls\n```"
    first = cfg.digest()
    assert load_harness_config(path).digest() == first
    (tmp_path / "shot.j2").write_text("```bash\nls -la\n```")
    assert load_harness_config(path).digest() != first


def test_missing_few_shot_file_names_file_and_field(tmp_path: Path) -> None:
    raw = _raw()
    raw["prompt"]["few_shot"][2]["content"] = "file:nope.j2"
    path = _write(tmp_path, raw)
    with pytest.raises(InputError) as e:
        load_harness_config(path)
    assert e.value.file == str(path) and e.value.field == "prompt.few_shot[2].content"
    assert "nope.j2" in str(e.value) and e.value.exit_code == 2


def test_search_space_prompt_files_are_inlined(tmp_path: Path) -> None:
    raw = _raw()
    raw["search_space"] = {"prompt.system": ["file:alt.j2"]}
    (tmp_path / "alt.j2").write_text("Alt system prompt.")
    cfg = load_harness_config(_write(tmp_path, raw))
    assert cfg.search_space["prompt.system"] == ["Alt system prompt."]
    raw["search_space"] = {"prompt.system": ["file:gone.j2"]}
    with pytest.raises(InputError) as e:
        load_harness_config(_write(tmp_path, raw))
    assert e.value.field == "search_space.prompt.system[0]"


def test_canonical_yaml_is_deterministic_sorted_and_round_trips() -> None:
    cfg, _ = _load()
    text = cfg.canonical_yaml()
    reordered = HarnessConfig.model_validate(dict(reversed(list(_raw().items()))))
    assert reordered.canonical_yaml() == text
    top = [line.split(":")[0] for line in text.splitlines() if line and line[0] not in " -"]
    assert top == sorted(top) and "search_space" in top
    back = HarnessConfig.model_validate(yaml.safe_load(text))
    assert back == cfg and back.digest() == cfg.digest()
    assert "system: |-" in text  # prompts stay readable


# --- dotted paths --------------------------------------------------------------------------------


def test_paths_reach_nested_fields_and_list_items() -> None:
    cfg, _ = _load()
    data = cfg.model_dump(mode="json")
    assert get_path(data, "sampling.temperature") == 0.7
    assert get_path(data, "prompt.few_shot.3.content") == "{{ finish_word }}"
    assert get_path(data, "tools[1]") == get_path(data, "tools.1") == "submit"
    set_path(data, "tools.0", "read_file")
    assert data["tools"] == ["read_file", "submit"]
    for bad in ("sampling.temprature", "tools.2", "prompt.few_shot.x", "loop..max_turns", ""):
        with pytest.raises(FieldProblem):
            get_path(data, bad)


# --- search_space --------------------------------------------------------------------------------


def _space(space: dict[str, list[Any]]) -> list[str]:
    cfg, contract = _load()
    return search_space_violations(HarnessConfig.model_validate(dict(_raw(), search_space=space)), contract)


def test_search_space_value_that_loosens_names_path_index_and_both_values() -> None:
    assert _space({"loop.max_turns": [4, 40]}) == [
        "search_space.loop.max_turns[1]: 40 loosens the contract's limits.max_turns (30)"
    ]
    assert _space({"limits.network": [True]}) == [
        "search_space.limits.network[0]: true loosens the contract's limits.sandbox.network (false)"
    ]


def test_search_space_unknown_or_forbidden_or_invalid() -> None:
    assert _space({"sampling.temprature": [0.1]}) == ["search_space.sampling.temprature: no such field"]
    assert _space({"prompt.few_shot.9.content": ["x"]}) == ["search_space.prompt.few_shot.9.content: no such field"]
    for key in ("model.endpoint", "name", "search_space", "contract"):
        (msg,) = _space({key: ["x"]})
        assert msg.startswith(f"search_space.{key}: not a field rsi expand may vary"), msg
    (msg,) = _space({"sampling.temperature": [0.2, -1]})
    assert msg.startswith("search_space.sampling.temperature[1]: -1 is not valid") and "0.7" in msg
    (msg,) = _space({"tools": [["bash", "browser"]]})
    assert msg.startswith("search_space.tools[0]: tools[1]: 'browser' is not in the contract substrate")
    (msg,) = _space({"action_format": ["json"]})
    assert msg.startswith("search_space.action_format[0]: 'json' is not valid")


def test_search_space_refusal_names_file_and_field_at_load(tmp_path: Path) -> None:
    raw = dict(_raw(), search_space={"loop.max_turns": [4, 40]})
    path = _write(tmp_path, raw)
    cfg, contract = _load()
    with pytest.raises(InputError) as e:
        check_config(load_harness_config(path), contract, path)
    assert e.value.file == str(path) and e.value.field == "search_space.loop.max_turns[1]"
    assert str(e.value) == (
        f"{path}: search_space.loop.max_turns[1]: 40 loosens the contract's limits.max_turns (30)"
    )
    r = CliRunner().invoke(app, ["config", "check", str(path), "--contract", str(CONTRACT_PATH)])
    assert r.exit_code == 2
    assert "search_space.loop.max_turns[1]" in r.output and "40" in r.output and "(30)" in r.output
    path = _write(tmp_path, dict(_raw(), search_space={"sampling.temprature": [0.1]}), "typo.yaml")
    with pytest.raises(InputError) as e:
        check_config(load_harness_config(path), contract, path)
    assert str(e.value) == f"{path}: search_space.sampling.temprature: no such field"
