"""Reading and writing the workspace's files: contracts, harness configs, tasks, manifests.

Every loader turns bad input into an `InputError` naming the file and the field. Writers go
through a temp file and `os.replace`, so a failure never leaves a half-written file.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from rsi.core.contract import Contract
from rsi.core.digest import digest_files
from rsi.core.errors import InputError, first_validation_error
from rsi.core.generation import GenerationManifest
from rsi.core.harness_config import HarnessConfig
from rsi.core.task import REQUIRED_FILES, Task, parse_task_toml

M = TypeVar("M", bound=BaseModel)

_SKIP_PARTS = {"__pycache__", ".git", ".DS_Store"}


def load_yaml_model(path: Path, model: type[M], prepare: Any = None) -> M:
    """`prepare(raw) -> raw` runs on the parsed mapping before validation (the external config's file)."""
    if not path.is_file():
        raise InputError(str(path), None, "file not found")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise InputError(str(path), None, f"invalid YAML{where}") from None
    if not isinstance(raw, dict):
        raise InputError(str(path), None, "expected a mapping at the top level")
    if prepare is not None:
        raw = prepare(raw)
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise first_validation_error(str(path), e) from None


def load_contract(path: Path) -> Contract:
    return load_yaml_model(path, Contract)


def load_harness_config(path: Path) -> HarnessConfig:
    cfg = load_yaml_model(path, HarnessConfig, prepare=lambda raw: _inline_external_config(raw, path))
    return _inline_template_files(cfg, path)


def _inline_external_config(raw: dict[str, Any], path: Path) -> dict[str, Any]:
    """An external harness's own config written as `external.config: file:NAME.yaml` is read from beside the
    config and inlined (its content is then in the digest, as a prompt template's is)."""
    ext = raw.get("external")
    if not isinstance(ext, dict):
        return raw
    value = ext.get("config")
    if not (isinstance(value, str) and value.startswith(FILE_PREFIX)):
        return raw
    f = path.parent / value.removeprefix(FILE_PREFIX).strip()
    if not f.is_file():
        raise InputError(str(path), "external.config", f"config file {f} not found")
    try:
        data = yaml.safe_load(f.read_text())
    except yaml.YAMLError:
        raise InputError(str(f), None, "invalid YAML (the external harness's config)") from None
    if not isinstance(data, dict):
        raise InputError(str(f), None, "expected a mapping at the top level (the external harness's config)")
    return {**raw, "external": {**ext, "config": data}}


def _inline_template_files(cfg: HarnessConfig, path: Path) -> HarnessConfig:
    """Prompt texts written as `file:NAME.j2` are read from beside the config, so the digest covers them.

    That is `prompt.system`, `prompt.instruction`, each `prompt.few_shot[i].content`, and the
    prompt values `search_space` lists for those fields (a variant's digest then covers its text
    too). A missing file is an InputError naming the field it was written in.
    """

    def inline(value: Any, field: str) -> Any:
        if not (isinstance(value, str) and value.startswith(FILE_PREFIX)):
            return value
        tpl = path.parent / value.removeprefix(FILE_PREFIX).strip()
        if not tpl.is_file():
            raise InputError(str(path), field, f"template file {tpl} not found")
        return tpl.read_text()

    prompt = cfg.prompt.model_copy(
        update={
            "system": inline(cfg.prompt.system, "prompt.system"),
            "instruction": inline(cfg.prompt.instruction, "prompt.instruction"),
            "few_shot": [
                shot.model_copy(update={"content": inline(shot.content, f"prompt.few_shot[{i}].content")})
                for i, shot in enumerate(cfg.prompt.few_shot)
            ],
        }
    )
    space = {
        key: [inline(v, f"search_space.{key}[{i}]") if _PROMPT_TEXT.match(key) else v for i, v in enumerate(values)]
        for key, values in cfg.search_space.items()
    }
    return cfg.model_copy(update={"prompt": prompt, "search_space": space})


# search_space keys whose values are prompt text, and so may be written as `file:NAME.j2`
_PROMPT_TEXT = re.compile(r"^prompt\.(system|instruction|few_shot(\.\d+|\[\d+\])\.content)$")
FILE_PREFIX = "file:"


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_yaml_model(path: Path, obj: BaseModel) -> None:
    write_atomic(path, yaml.safe_dump(obj.model_dump(mode="json"), sort_keys=False))


def load_manifest(path: Path) -> GenerationManifest:
    return load_yaml_model(path, GenerationManifest)


def _tree_files(root: Path) -> list[tuple[str, bytes]]:
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and not (_SKIP_PARTS & set(p.relative_to(root).parts)):
            out.append((p.relative_to(root).as_posix(), p.read_bytes()))
    return out


def load_task(task_dir: Path) -> Task:
    """Load and validate one Harbor-format task directory."""
    task_dir = task_dir.resolve()
    for rel in REQUIRED_FILES:
        if not (task_dir / rel).is_file():
            raise InputError(str(task_dir / rel), None, "required task file is missing")
    toml_path = task_dir / "task.toml"
    spec = parse_task_toml(toml_path.read_text(), str(toml_path))
    instruction = (task_dir / "instruction.md").read_text()
    if not instruction.strip():
        raise InputError(str(task_dir / "instruction.md"), None, "instruction is empty")
    for compose in ("docker-compose.yaml", "docker-compose.yml", "compose.yaml", "compose.yml"):
        if (task_dir / "environment" / compose).is_file():  # Harbor's multi-container environments
            raise InputError(str(task_dir / "environment" / compose), None,
                             "cannot be honoured: rsi runs one container per task (no compose environments)")
    dockerfile = (task_dir / "environment" / "Dockerfile").read_text()
    if "FROM" not in dockerfile.upper():
        raise InputError(str(task_dir / "environment" / "Dockerfile"), "FROM", "no FROM line")
    files = _tree_files(task_dir)
    env_files = _tree_files(task_dir / "environment")
    name = spec.task.name or task_dir.name
    return Task(
        name=name,
        path=str(task_dir),
        spec=spec,
        instruction=instruction,
        digest=digest_files(files),
        env_digest=digest_files(env_files),
        has_solution=(task_dir / "solution" / "solve.sh").is_file(),
    )


def is_task_dir(p: Path) -> bool:
    return (p / "task.toml").is_file()


def find_task_dirs(paths: Iterable[Path]) -> list[Path]:
    """Expand each path: a task directory, or a directory whose children are task directories."""
    out: list[Path] = []
    for p in paths:
        if not p.exists():
            raise InputError(str(p), None, "no such task or directory")
        if is_task_dir(p):
            out.append(p.resolve())
            continue
        children = sorted(c for c in p.iterdir() if c.is_dir() and is_task_dir(c)) if p.is_dir() else []
        if not children:
            raise InputError(str(p), None, "not a task directory (no task.toml) and holds no tasks")
        out.extend(c.resolve() for c in children)
    seen: set[Path] = set()
    return [p for p in out if not (p in seen or seen.add(p))]  # type: ignore[func-returns-value]


def load_pool(tasks_dir: Path) -> list[Task]:
    """Every task in a workspace's tasks/ directory; none (not an error) when it holds no task yet."""
    if not tasks_dir.is_dir() or not any(c.is_dir() and is_task_dir(c) for c in tasks_dir.iterdir()):
        return []
    return load_tasks([tasks_dir])


def load_tasks(paths: Iterable[Path]) -> list[Task]:
    tasks = [load_task(d) for d in find_task_dirs(paths)]
    names: dict[str, str] = {}
    for t in tasks:
        if t.name in names and names[t.name] != t.path:
            raise InputError(t.path, "task.name", f"duplicate task name '{t.name}' (also {names[t.name]})")
        names[t.name] = t.path
    return tasks
