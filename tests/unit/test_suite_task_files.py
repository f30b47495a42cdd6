"""The regression suite `suites/starter` is well formed (offline: reads files, runs no container).

Promote gates every candidate on the suite, so a malformed suite task fails promotions for every user, and a suite
of few families cannot tell a skill forgotten from noise. Checked here: the suite's size and spread, and per task
the shape every shipped task has (the starter pool's rules, tests/unit/test_starter_task_files.py), a Dockerfile the
build-free path takes (rsi.sandbox.files_env) and a verifier that reads only what it declares or the image holds.
Oracle passes and nop fails in Docker: tests/integration/test_starter_tasks.py.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from rsi.core.task import TaskSpec, parse_task_toml
from rsi.sandbox.files_env import plan_files_only
from tests.unit.test_starter_task_files import (
    check_instruction,
    check_required_files,
    check_scripts,
    check_starter_limits,
)

ROOT = Path(__file__).resolve().parents[2]
SUITE_DIR = ROOT / "suites" / "starter"
SUITE_DIRS = sorted(p for p in SUITE_DIR.iterdir() if p.is_dir()) if SUITE_DIR.is_dir() else []
NAMES = [p.name for p in SUITE_DIRS]

MIN_TASKS = 48
MIN_FAMILIES = 16
MIN_PER_FAMILY = 2


def _spec(task_dir: Path) -> TaskSpec:
    path = task_dir / "task.toml"
    return parse_task_toml(path.read_text(), str(path))


def test_suite_has_enough_tasks_and_families() -> None:
    assert len(SUITE_DIRS) >= MIN_TASKS, f"only {len(SUITE_DIRS)} tasks in {SUITE_DIR}"
    specs = {d.name: _spec(d) for d in SUITE_DIRS}
    per_family = Counter(s.family for s in specs.values())
    assert len(per_family) >= MIN_FAMILIES, f"families: {dict(per_family)}"
    thin = {f: n for f, n in per_family.items() if n < MIN_PER_FAMILY}
    assert not thin, f"families with fewer than {MIN_PER_FAMILY} tasks: {thin}"
    splits = Counter(s.split for s in specs.values())
    assert set(splits) <= {"train", "holdout"} and splits["holdout"] >= 1 and splits["train"] >= 1, splits


@pytest.mark.parametrize("name", NAMES)
def test_task_has_required_files_and_starter_limits(name: str) -> None:
    check_required_files(SUITE_DIR / name)
    check_starter_limits(SUITE_DIR / name)


@pytest.mark.parametrize("name", NAMES)
def test_environment_needs_no_build_and_copies_every_input(name: str) -> None:
    env_dir = SUITE_DIR / name / "environment"
    lines = [ln.strip() for ln in (env_dir / "Dockerfile").read_text().splitlines() if ln.strip()]
    assert lines[:3] == ["ARG BASE_IMAGE=python:3.12-slim", "FROM ${BASE_IMAGE}", "WORKDIR /app"]
    plan = plan_files_only(env_dir, {"BASE_IMAGE": "rsi-base:bookworm"})
    assert plan is not None, f"{name}: the Dockerfile is not files-only (FROM, WORKDIR, COPY, RUN mkdir -p)"
    copied = {src for ln in lines if ln.upper().startswith("COPY ") for src in ln.split()[1:-1]}
    inputs = {p.name for p in env_dir.iterdir() if p.name != "Dockerfile"}
    assert inputs <= copied, f"{name}: inputs never copied into the image: {inputs - copied}"
    size = sum(p.stat().st_size for p in env_dir.rglob("*") if p.is_file())
    assert size < 64 * 1024, f"{name}: environment/ is {size} bytes; suite inputs must stay small"


@pytest.mark.parametrize("name", NAMES)
def test_scripts_are_bash_and_verifier_always_writes_reward(name: str) -> None:
    check_scripts(SUITE_DIR / name)


@pytest.mark.parametrize("name", NAMES)
def test_instruction_names_paths_under_app(name: str) -> None:
    check_instruction(SUITE_DIR / name)


@pytest.mark.parametrize("name", NAMES)
def test_verifier_reads_only_declared_paths_or_image_inputs(name: str) -> None:
    import yaml

    from rsi.core.contract import Contract
    from rsi.exec.grading import grading_policy
    from rsi.store.files import load_task

    task = load_task(SUITE_DIR / name)
    contract = Contract.model_validate(yaml.safe_load((ROOT / "contracts" / "hcp-1.0.yaml").read_text()))
    policy = grading_policy(task, contract)
    assert policy.integrity == "declared_outputs" and policy.reads
    plan = plan_files_only(SUITE_DIR / name / "environment", {"BASE_IMAGE": "rsi-base:bookworm"})
    assert plan is not None
    image = set(plan.files) | set(plan.dirs)  # what the pristine image the verifier starts from holds
    test_sh = (SUITE_DIR / name / "tests" / "test.sh").read_text()
    for path in re.findall(r"/app/[A-Za-z0-9_./-]+", test_sh):
        path = path.rstrip("/.")
        declared = any(path == r or path.startswith(r + "/") for r in policy.reads)
        assert declared or path in image, f"test.sh reads {path}: neither declared nor an input of the image"
