"""The starter task pool in `tasks/` is well formed (offline: reads files, runs no container).

A malformed starter task breaks `rsi run tasks` for every user on first contact, and a pool
without enough families or without holdout tasks makes promotion meaningless, so both the
per-task shape and the pool's composition are checked here.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest

from rsi.core.task import REQUIRED_FILES, TaskSpec, parse_task_toml

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"
TASK_DIRS = sorted(p for p in TASKS_DIR.iterdir() if p.is_dir()) if TASKS_DIR.is_dir() else []
TASK_NAMES = [p.name for p in TASK_DIRS]

MIN_TASKS = 12
MIN_FAMILIES = 4
MIN_PER_FAMILY = 3


def _spec(task_dir: Path) -> TaskSpec:
    path = task_dir / "task.toml"
    return parse_task_toml(path.read_text(), str(path))


def test_pool_has_enough_tasks_and_families_each_with_a_holdout() -> None:
    assert len(TASK_DIRS) >= MIN_TASKS, f"only {len(TASK_DIRS)} tasks in {TASKS_DIR}"
    specs = {d.name: _spec(d) for d in TASK_DIRS}
    per_family = Counter(s.family for s in specs.values())
    big = {f: n for f, n in per_family.items() if n >= MIN_PER_FAMILY}
    assert len(big) >= MIN_FAMILIES, f"families with >= {MIN_PER_FAMILY} tasks: {dict(per_family)}"
    for family in per_family:
        splits = Counter(s.split for s in specs.values() if s.family == family)
        assert splits["holdout"] >= 1, f"family {family!r} has no holdout task"
        assert splits["train"] >= 1, f"family {family!r} has no train task"


def check_required_files(task_dir: Path) -> None:
    """Kebab-case name, every required file present and non-empty (shared with the suite's checks)."""
    name = task_dir.name
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", name), f"task name {name!r} is not kebab-case"
    for rel in (*REQUIRED_FILES, "solution/solve.sh"):
        path = task_dir / rel
        assert path.is_file(), f"{path} is missing"
        assert path.read_text().strip(), f"{path} is empty"


def check_starter_limits(task_dir: Path) -> None:
    """task.toml parses with the metadata and the limits every task rsi ships has."""
    spec = _spec(task_dir)
    assert spec.version == "1.0"
    assert spec.metadata.author_name == "rsi"
    assert spec.metadata.difficulty in {"easy", "medium", "hard"}
    assert spec.metadata.category and spec.metadata.tags
    assert 1 <= spec.metadata.rsi.difficulty <= 3
    assert spec.family != "misc", "family left at its default"
    env = spec.environment
    assert (env.network_mode, env.cpus, env.memory_mb, env.workdir) == ("none", 1, 512, "/app")
    assert spec.agent.timeout_sec <= 300
    assert spec.verifier.timeout_sec <= 120


def check_scripts(task_dir: Path) -> None:
    """Bash, executable, and a verifier that writes the reward on both branches (never a missing reward)."""
    for rel in ("tests/test.sh", "solution/solve.sh"):
        path = task_dir / rel
        assert path.read_text().startswith("#!/bin/bash\n"), f"{path} does not start with #!/bin/bash"
        assert os.access(path, os.X_OK), f"{path} is not executable"
    test_sh = (task_dir / "tests/test.sh").read_text()
    assert "mkdir -p /logs/verifier" in test_sh
    assert "echo 1 > /logs/verifier/reward.txt" in test_sh
    assert "echo 0 > /logs/verifier/reward.txt" in test_sh
    assert "set -e" not in test_sh, "set -e could exit before the reward is written"


def check_instruction(task_dir: Path) -> None:
    text = (task_dir / "instruction.md").read_text()
    assert "/app/" in text, f"{task_dir.name}: instruction names no path under /app"
    assert len(text) < 1500, f"{task_dir.name}: instruction too long for a small model's context"


@pytest.mark.parametrize("name", TASK_NAMES)
def test_task_has_required_files(name: str) -> None:
    check_required_files(TASKS_DIR / name)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_task_toml_parses_with_starter_limits(name: str) -> None:
    check_starter_limits(TASKS_DIR / name)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_dockerfile_names_base_through_build_arg_and_copies_existing_inputs(name: str) -> None:
    env_dir = TASKS_DIR / name / "environment"
    lines = [ln.strip() for ln in (env_dir / "Dockerfile").read_text().splitlines() if ln.strip()]
    assert lines[:3] == ["ARG BASE_IMAGE=python:3.12-slim", "FROM ${BASE_IMAGE}", "WORKDIR /app"]
    copied = set()
    for line in lines:
        assert not line.upper().startswith(("RUN PIP", "ADD HTTP")), f"{name}: network at build: {line}"
        if line.upper().startswith("COPY "):
            *sources, _dest = line.split()[1:]
            for src in sources:
                assert (env_dir / src).exists(), f"{name}: COPY source {src} not in environment/"
                copied.add(src)
    inputs = {p.name for p in env_dir.iterdir() if p.name != "Dockerfile"}
    assert inputs <= copied, f"{name}: inputs never copied into the image: {inputs - copied}"
    size = sum(p.stat().st_size for p in env_dir.rglob("*") if p.is_file())
    assert size < 64 * 1024, f"{name}: environment/ is {size} bytes; starter inputs must stay small"


@pytest.mark.parametrize("name", TASK_NAMES)
def test_scripts_are_bash_and_verifier_always_writes_reward(name: str) -> None:
    check_scripts(TASKS_DIR / name)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_instruction_names_paths_under_app(name: str) -> None:
    check_instruction(TASKS_DIR / name)


@pytest.mark.parametrize("name", [p.name for p in TASK_DIRS])
def test_task_declares_what_its_verifier_reads(name: str) -> None:
    # Every task rsi ships is graded at integrity level 1: the verifier sees only these paths.
    import yaml

    from rsi.core.contract import Contract
    from rsi.exec.grading import grading_policy
    from rsi.store.files import load_task

    task = load_task(TASKS_DIR / name)
    contract = Contract.model_validate(yaml.safe_load((TASKS_DIR.parent / "contracts" / "hcp-1.0.yaml").read_text()))
    policy = grading_policy(task, contract)
    assert policy.integrity == "declared_outputs" and policy.reads
    test_sh = (TASKS_DIR / name / "tests" / "test.sh").read_text()
    inputs = {f"/app/{p.name}" for p in (TASKS_DIR / name / "environment").iterdir()}  # in the pristine image
    for path in re.findall(r"/app/[A-Za-z0-9_./-]+", test_sh):
        declared = any(path == r or path.startswith(r + "/") for r in policy.reads)
        assert declared or path in inputs, f"test.sh reads {path}: neither declared nor an input of the image"
