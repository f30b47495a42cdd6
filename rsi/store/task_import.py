"""`rsi tasks import`: Terminal-Bench 1 tasks converted to Harbor format; Harbor tasks copied, checked.

A TB1 task (`task.yaml`, `Dockerfile`, `docker-compose.yaml` with one service, `run-tests.sh`,
`solution.sh`, `tests/`) becomes `instruction.md`, `task.toml`, `environment/`, `tests/` (with a
`test.sh` that runs `run-tests.sh` and writes the reward from its exit status) and `solution/`. TB1
ran its tests in the agent's container; rsi grades an import at the snapshot level (a fresh
verifier container from the frozen agent container: the same files, none of the agent's
processes), so its trials can feed training and promotion. A task whose tests talk to a service
the agent left running can say `environment_mode = "shared"` in its task.toml. Every
imported task records where it came from in `[metadata.rsi] origin`. Nothing is written for a task
that does not convert: the whole task is built in a temp directory and moved into place.
"""

from __future__ import annotations

import shutil
import tempfile
import tomllib
from pathlib import Path
from typing import Any, Literal

import yaml

from rsi.core.errors import InputError
from rsi.core.task import Task
from rsi.store.files import find_task_dirs, load_task

Format = Literal["tb1", "harbor"]

TB1_TEST_SH = """#!/bin/bash
# Written by `rsi tasks import` from a Terminal-Bench 1 task: run-tests.sh decides, its exit status is the reward.
mkdir -p /logs/verifier
export TEST_DIR=/tests
if bash /tests/run-tests.sh; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""
_TB1_OWN = {"task.yaml", "docker-compose.yaml", "docker-compose.yml", "run-tests.sh", "solution.sh", "tests"}


def detect(src: Path) -> Format:
    if (src / "task.yaml").is_file():
        return "tb1"
    if (src / "task.toml").is_file():
        return "harbor"
    raise InputError(str(src), None, "neither a Terminal-Bench 1 task (task.yaml) nor a Harbor task (task.toml)")


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _tb1_task_toml(meta: dict[str, Any], origin: str) -> str:
    tags = meta.get("tags") or []
    category = str(meta.get("category") or "misc")
    lines = [
        'version = "1.0"', "", "[metadata]",
        f"difficulty = {_toml_str(str(meta.get('difficulty') or 'medium'))}",
        f"category = {_toml_str(category)}",
        "tags = [" + ", ".join(_toml_str(str(t)) for t in tags) + "]", "",
        "[metadata.rsi]", f"family = {_toml_str(category)}", f"origin = {_toml_str(origin)}", "",
        "[agent]", f"timeout_sec = {float(meta.get('max_agent_timeout_sec') or 900):g}", "",
        "[verifier]", f"timeout_sec = {float(meta.get('max_test_timeout_sec') or 180):g}", "",
        # TB1 ran its compose service on Docker's default network (its run-tests.sh fetch uv and pytest);
        # the contract's ceiling still decides what a trial gets.
        "[environment]", 'network_mode = "public"', "",
    ]
    return "\n".join(lines)


def _convert_tb1(src: Path, out: Path) -> None:
    file = str(src / "task.yaml")
    try:
        meta = yaml.safe_load((src / "task.yaml").read_text()) or {}
    except yaml.YAMLError:
        raise InputError(file, None, "invalid YAML") from None
    instruction = meta.get("instruction")
    if not instruction and meta.get("descriptions"):
        instruction = (meta["descriptions"][0] or {}).get("description")
    if not instruction:
        raise InputError(file, "instruction", "missing")
    for rel in ("Dockerfile", "run-tests.sh"):
        if not (src / rel).is_file():
            raise InputError(str(src / rel), None, "required Terminal-Bench 1 file is missing")
    for name in ("docker-compose.yaml", "docker-compose.yml"):
        compose = src / name
        if compose.is_file():
            services = (yaml.safe_load(compose.read_text()) or {}).get("services") or {}
            if len(services) > 1:
                raise InputError(str(compose), "services", f"{len(services)} services; rsi runs one container per task")
    (out / "environment").mkdir(parents=True)
    for item in src.iterdir():
        if item.name in _TB1_OWN:
            continue
        dest = out / "environment" / item.name
        shutil.copytree(item, dest) if item.is_dir() else shutil.copy2(item, dest)
    if (src / "tests").is_dir():
        shutil.copytree(src / "tests", out / "tests")
    else:
        (out / "tests").mkdir()
    shutil.copy2(src / "run-tests.sh", out / "tests" / "run-tests.sh")
    (out / "tests" / "test.sh").write_text(TB1_TEST_SH)
    if (src / "solution.sh").is_file():
        (out / "solution").mkdir()
        shutil.copy2(src / "solution.sh", out / "solution" / "solve.sh")
    (out / "instruction.md").write_text(str(instruction).rstrip() + "\n")
    (out / "task.toml").write_text(_tb1_task_toml(meta, f"tb1:{src.resolve()}"))


def _copy_harbor(src: Path, out: Path) -> None:
    shutil.copytree(src, out, ignore=shutil.ignore_patterns("__pycache__", ".git"))
    toml = out / "task.toml"
    text = toml.read_text()
    if "origin" not in (tomllib.loads(text).get("metadata", {}).get("rsi") or {}):
        rsi = tomllib.loads(text).get("metadata", {}).get("rsi")
        line = f"origin = {_toml_str('harbor:' + str(src.resolve()))}\n"
        text = text.replace("[metadata.rsi]\n", "[metadata.rsi]\n" + line, 1) if rsi is not None else (
            text.rstrip() + "\n\n[metadata.rsi]\n" + line)
        toml.write_text(text)


def import_tasks(src: Path, into: Path, fmt: Format | None = None) -> list[Task]:
    """Import one task, or every task below `src`, into `into`; return the loaded (validated) tasks."""
    if not src.exists():
        raise InputError(str(src), None, "no such task or directory")
    sources = [src] if (src / "task.yaml").is_file() or (src / "task.toml").is_file() else sorted(
        p for p in src.iterdir() if p.is_dir() and ((p / "task.yaml").is_file() or (p / "task.toml").is_file()))
    if not sources:
        raise InputError(str(src), None, "holds no Terminal-Bench 1 or Harbor task")
    into.mkdir(parents=True, exist_ok=True)
    done: list[Task] = []
    for s in sources:
        kind = fmt or detect(s)
        dest = into / s.name
        if dest.exists():
            raise InputError(str(dest), None, "already exists; remove it or import into another directory")
        with tempfile.TemporaryDirectory(prefix="rsi-import-", dir=into) as tmp:
            staged = Path(tmp) / s.name
            if kind == "tb1":
                _convert_tb1(s, staged)
            else:
                _copy_harbor(s, staged)
            load_task(staged)  # refusals and missing files surface here, before anything lands
            staged.rename(dest)
        done.append(load_task(dest))
    find_task_dirs([into])
    return done
