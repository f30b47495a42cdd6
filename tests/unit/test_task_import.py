"""`rsi tasks import`: TB1 conversion, Harbor copies with origin, refusals that write nothing."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from rsi.core.errors import InputError
from rsi.store.task_import import import_tasks
from tests.taskgen import make_task


def _tb1(root: Path, services: int = 1) -> Path:
    d = root / "tb1-task"
    (d / "tests").mkdir(parents=True)
    (d / "task.yaml").write_text("instruction: Do it.\ndifficulty: hard\ncategory: games\nmax_agent_timeout_sec: 77\n")
    (d / "Dockerfile").write_text("FROM ubuntu:24.04\n")
    (d / "run-tests.sh").write_text("#!/bin/bash\ntrue\n")
    svc = "".join(f"  s{i}:\n    image: x\n" for i in range(services))
    (d / "docker-compose.yaml").write_text("services:\n" + svc)
    return d


def test_tb1_converts_to_harbor(tmp_path: Path) -> None:
    (task,) = import_tasks(_tb1(tmp_path / "src"), tmp_path / "out")
    assert task.spec.agent.timeout_sec == 77 and task.family == "games"
    # graded at the snapshot level (the contract's default), so its passes may feed training
    assert task.spec.verifier.environment_mode is None and task.spec.network() == "public"
    assert (Path(task.path) / "tests" / "run-tests.sh").is_file() and (Path(task.path) / "tests" / "test.sh").is_file()
    assert task.instruction.strip() == "Do it."


def test_a_multi_service_compose_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with pytest.raises(InputError) as e:
        import_tasks(_tb1(tmp_path / "src", services=2), tmp_path / "out")
    assert e.value.field == "services" and "docker-compose.yaml" in e.value.file
    assert list((tmp_path / "out").iterdir()) == []


def test_harbor_copy_keeps_its_origin_and_refuses_to_overwrite(tmp_path: Path) -> None:
    src = make_task(tmp_path / "src", "h1")
    (task,) = import_tasks(tmp_path / "src", tmp_path / "out")
    meta = tomllib.loads((Path(task.path) / "task.toml").read_text())["metadata"]["rsi"]
    assert meta["origin"] == f"harbor:{src.resolve()}" and meta["family"] == "test"
    with pytest.raises(InputError, match="already exists"):
        import_tasks(tmp_path / "src", tmp_path / "out")
