"""Which Dockerfiles skip the build, and what the archive that replaces the build holds."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from rsi.loop.discover.generators.procedural import dockerfile
from rsi.sandbox.files_env import files_archive, plan_files_only

ARGS = {"BASE_IMAGE": "rsi-base:bookworm"}


def _env(tmp: Path, text: str, files: dict[str, str] | None = None) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "Dockerfile").write_text(text)
    for rel, body in (files or {}).items():
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp / rel).write_text(body)
    return tmp


def _members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


def test_a_generator_dockerfile_is_files_only_and_names_the_build_arg_base(tmp_path: Path) -> None:
    files = {"notes.txt": "a\nb\n", "data/x.csv": "1,2\n"}
    env = _env(tmp_path, dockerfile(files), files)
    plan = plan_files_only(env, ARGS)
    assert plan is not None
    assert plan.base == "rsi-base:bookworm"
    assert plan.workdir == "/app"
    assert set(plan.files) == {"/app/notes.txt", "/app/data/x.csv"}
    # without the build arg the ARG default is the base, as `docker build` would take it
    assert plan_files_only(env, {}).base == "python:3.12-slim"  # type: ignore[union-attr]


def test_the_archive_keeps_modes_makes_new_dirs_and_leaves_existing_ones_alone(tmp_path: Path) -> None:
    env = _env(tmp_path, "FROM base\nWORKDIR /srv/app\nCOPY run.sh ./bin/\nRUN mkdir -p /tmp/cache out\n",
               {"run.sh": "echo hi\n"})
    (env / "run.sh").chmod(0o755)
    plan = plan_files_only(env, {})
    assert plan is not None
    members = _members(files_archive(plan, existing={"/", "/srv", "/tmp"}))
    assert members["srv/app/bin/run.sh"].mode == 0o755
    assert members["srv/app/bin/run.sh"].uid == 0
    assert members["srv/app"].isdir() and members["srv/app"].mode == 0o755
    assert members["srv/app/out"].isdir() and members["tmp/cache"].isdir()
    assert "tmp" not in members and "srv" not in members  # an existing /tmp keeps its sticky bit


def test_a_directory_copy_puts_its_contents_under_the_destination(tmp_path: Path) -> None:
    env = _env(tmp_path, "FROM base\nCOPY data /opt/data\nCOPY a.txt b.txt /opt/two/\n",
               {"data/x/y.txt": "y", "data/z.txt": "z", "a.txt": "a", "b.txt": "b"})
    plan = plan_files_only(env, {})
    assert plan is not None
    assert set(plan.files) == {"/opt/data/x/y.txt", "/opt/data/z.txt", "/opt/two/a.txt", "/opt/two/b.txt"}
    assert "/opt/data/x" in plan.dirs


@pytest.mark.parametrize("text", [
    "FROM base\nRUN apt-get install -y jq\n",        # a real RUN
    "FROM base\nENV A=1\n",                          # any other instruction
    "FROM base AS stage\nCOPY a.txt /a\n",           # named stage
    "FROM a\nFROM b\n",                              # two stages
    "FROM base\nCOPY --chown=1000 a.txt /a\n",       # a flag
    "FROM base\nCOPY *.txt /app/\n",                 # a wildcard
    "FROM base\nCOPY ../outside /app/\n",            # outside the context
    "FROM base\nCOPY missing.txt /app/\n",           # absent source
    "FROM base\nRUN mkdir -p /a && touch /a/b\n",    # mkdir plus something else
    "FROM ${NOPE}\n",                                # an unknown build arg
    "COPY a.txt /a\n",                               # no FROM first
])
def test_anything_else_is_built(tmp_path: Path, text: str) -> None:
    env = _env(tmp_path, text, {"a.txt": "a"})
    assert plan_files_only(env, {}) is None


def test_a_dockerignore_or_a_symlink_means_a_build(tmp_path: Path) -> None:
    env = _env(tmp_path / "one", "FROM base\nCOPY a.txt /a\n", {"a.txt": "a", ".dockerignore": "a.txt\n"})
    assert plan_files_only(env, {}) is None
    env = _env(tmp_path / "two", "FROM base\nCOPY d /d\n", {"d/a.txt": "a"})
    (env / "d" / "link").symlink_to("a.txt")
    assert plan_files_only(env, {}) is None


def test_continuation_lines_and_comments(tmp_path: Path) -> None:
    env = _env(tmp_path, "# a task\nARG BASE_IMAGE=x\nFROM ${BASE_IMAGE}\n"
                         "RUN mkdir -p \\\n  /data/in \\\n  /data/out\n")
    plan = plan_files_only(env, {})
    assert plan is not None and plan.base == "x"
    assert {"/data", "/data/in", "/data/out"} <= set(plan.dirs)
