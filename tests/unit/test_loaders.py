"""Loading tasks and harness configs: every bad input is an InputError naming the file and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rsi.core.errors import InputError
from rsi.loop.context import check_config
from rsi.store.bundled import bundled_contract, bundled_harness_configs
from rsi.store.files import load_contract, load_harness_config, load_task, load_tasks
from tests.taskgen import make_task

GOOD_TOML = (
    'version = "1.0"\n[task]\nname = "t"\n[agent]\ntimeout_sec = 10\n'
    '[environment]\ncpus = 1\nmemory_mb = 256\n'
)


def test_generated_task_loads(tmp_path: Path) -> None:
    t = load_task(make_task(tmp_path, "good", cpus=0.5, memory_mb=256, agent_timeout=7))
    assert (t.name, t.spec.environment.cpus, t.spec.environment.memory_mb, t.spec.agent.timeout_sec) == (
        "good", 0.5, 256, 7
    )
    assert t.has_solution


def test_type_error_in_environment_cpus_names_file_and_field(tmp_path: Path) -> None:
    d = make_task(tmp_path, "bad-cpus", toml=GOOD_TOML.replace("cpus = 1", 'cpus = "two"'))
    with pytest.raises(InputError) as e:
        load_task(d)
    msg = str(e.value)
    assert str(d / "task.toml") in msg and "environment.cpus" in msg
    assert e.value.exit_code == 2 and "\n" not in msg


def test_negative_memory_names_field(tmp_path: Path) -> None:
    d = make_task(tmp_path, "bad-mem", toml=GOOD_TOML.replace("memory_mb = 256", "memory_mb = -5"))
    with pytest.raises(InputError, match=r"task\.toml: environment\.memory_mb"):
        load_task(d)


def test_typo_in_rsi_metadata_is_caught(tmp_path: Path) -> None:
    d = make_task(tmp_path, "typo", toml=GOOD_TOML + '[metadata.rsi]\nfamly = "x"\n')
    with pytest.raises(InputError, match=r"metadata\.rsi\.famly"):
        load_task(d)


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    d = make_task(tmp_path, "bad-toml", toml='[task\nname = "x"\n')
    with pytest.raises(InputError) as e:
        load_task(d)
    assert str(d / "task.toml") in str(e.value) and "invalid TOML" in str(e.value)


def test_missing_test_sh_names_the_file(tmp_path: Path) -> None:
    d = make_task(tmp_path, "no-tests")
    (d / "tests" / "test.sh").unlink()
    with pytest.raises(InputError) as e:
        load_task(d)
    assert str(d / "tests" / "test.sh") in str(e.value) and "missing" in str(e.value)


def test_directory_of_tasks_fails_on_the_bad_one(tmp_path: Path) -> None:
    make_task(tmp_path, "a")
    bad = make_task(tmp_path, "b", toml=GOOD_TOML.replace("timeout_sec = 10", "timeout_sec = 0"))
    with pytest.raises(InputError, match=rf"{bad / 'task.toml'}: agent\.timeout_sec"):
        load_tasks([tmp_path])


def test_path_without_tasks_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such task"):
        load_tasks([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="holds no tasks"):
        load_tasks([tmp_path / "empty"])


# --- harness configs against the contract -------------------------------------------------------

def _config(tmp_path: Path, edit: dict[str, Any]) -> Path:
    """The bundled default config with `edit` ("a.b" -> value) applied, written beside its templates."""
    src = bundled_harness_configs() / "default.yaml"
    raw = yaml.safe_load(src.read_text())
    for dotted, value in edit.items():
        node = raw
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    for f in bundled_harness_configs().iterdir():  # prompt templates referenced as file:NAME
        if f.is_file() and f.name != "default.yaml":
            (tmp_path / f.name).write_bytes(f.read_bytes())
    out = tmp_path / "loose.yaml"
    out.write_text(yaml.safe_dump(raw))
    return out


def test_default_config_satisfies_the_contract(tmp_path: Path) -> None:
    path = _config(tmp_path, {})
    check_config(load_harness_config(path), load_contract(bundled_contract()), path)


@pytest.mark.parametrize(
    ("edit", "field", "values"),
    [
        ({"loop.max_turns": 99}, "loop.max_turns", ("99", "30")),
        ({"limits.agent_timeout_sec": 5000}, "limits.agent_timeout_sec", ("5000", "900")),
        ({"limits.command_timeout_sec": 500}, "limits.command_timeout_sec", ("500", "120")),
        ({"limits.verifier_timeout_sec": 1000}, "limits.verifier_timeout_sec", ("1000", "300")),
        ({"limits.cpus": 8}, "limits.cpus", ("8", "2")),
        ({"limits.memory_mb": 99999}, "limits.memory_mb", ("99999", "4096")),
        ({"limits.pids": 100000}, "limits.pids", ("100000", "512")),
        ({"limits.network": True}, "limits.network", ("true", "false")),
        ({"sampling.max_tokens": 100000}, "sampling.max_tokens", ("100000", "2048")),
        ({"tools": ["bash", "submit", "browser"]}, "tools[2]", ("browser", "bash, read_file")),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_loosening_config_names_field_and_both_values(
    tmp_path: Path, edit: dict[str, Any], field: str, values: tuple[str, str]
) -> None:
    path = _config(tmp_path, edit)
    with pytest.raises(InputError) as e:
        check_config(load_harness_config(path), load_contract(bundled_contract()), path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: {field}:"), msg
    for v in values:
        assert v in msg, f"{v!r} missing from: {msg}"


def test_tightening_config_is_accepted(tmp_path: Path) -> None:
    path = _config(tmp_path, {"limits.cpus": 0.5, "limits.agent_timeout_sec": 10, "loop.max_turns": 3})
    check_config(load_harness_config(path), load_contract(bundled_contract()), path)


def test_unknown_config_key_names_field(tmp_path: Path) -> None:
    path = _config(tmp_path, {"loop.max_turn": 5})
    with pytest.raises(InputError, match=r"loop\.max_turn"):
        load_harness_config(path)


def test_a_compose_environment_is_refused_not_ignored(tmp_path: Path) -> None:
    d = make_task(tmp_path, "multi")
    (d / "environment" / "docker-compose.yaml").write_text("services:\n  app: {build: .}\n  db: {image: redis}\n")
    with pytest.raises(InputError, match="docker-compose.yaml: cannot be honoured: rsi runs one container per task"):
        load_task(d)
