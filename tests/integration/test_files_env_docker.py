"""Build-free environments against the real daemon: a files-only Dockerfile's image made by putting the files
in and committing holds the same filesystem, workdir and environment as the one `docker build` makes, on the
generators' tasks, the starter tasks and Harbor-shaped tasks with directory copies (tests/fixtures/tb21)."""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi.loop.discover.generators import GENERATORS, GenRequest, load_generators
from rsi.loop.discover.generators.procedural import ProceduralFamily
from rsi.sandbox.docker import DockerSandboxProvider
from rsi.sandbox.files_env import plan_files_only

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
BASE = "rsi-base:bookworm"
ARGS = {"BASE_IMAGE": BASE}
TEMPLATES = ("files/chmod", "files/nested", "data/csv-column", "shell/tar-list",
             "pipeline/find-path")
# what each image holds: every path outside the kernel's mounts with its type, mode, owner and size, and the
# checksum of every regular file outside the base's package trees
LISTING = (
    "cd / && find / -xdev \\( -path /proc -o -path /sys -o -path /dev -o -path /etc/hostname -o -path /etc/hosts "
    "-o -path /etc/resolv.conf \\) -prune -o -printf '%p %y %m %U %G %s %l\\n' | sort && "
    "find / -xdev \\( -path /proc -o -path /sys -o -path /dev -o -path /usr -o -path /var/lib -o -path /etc/hostname "
    "-o -path /etc/hosts -o -path /etc/resolv.conf \\) -prune "
    "-o -type f -newer /etc/os-release -print0 2>/dev/null | sort -z | xargs -0 -r md5sum"
)


@pytest.fixture(scope="module")
def providers() -> Iterator[tuple[DockerSandboxProvider, DockerSandboxProvider]]:
    yield DockerSandboxProvider(build_free=False), DockerSandboxProvider(build_free=True)


def _generated(tmp: Path) -> list[Path]:
    load_generators()
    out = []
    for i, tid in enumerate(TEMPLATES):
        family = GENERATORS.create(tid.split("/")[0])
        assert isinstance(family, ProceduralFamily)
        d = family.generate(GenRequest(seed=i, difficulty=family.template(tid).level, template=tid))
        env = tmp / tid.replace("/", "-")
        env.mkdir(parents=True)
        (env / "Dockerfile").write_text(d.dockerfile)
        for rel, text in d.env_files.items():
            (env / rel).parent.mkdir(parents=True, exist_ok=True)
            (env / rel).write_text(text)
        out.append(env)
    return out


def _harbor(tmp: Path) -> list[Path]:
    """The tb21 fixtures' environments with their FROM pointed at the local base (a stand-in would do too)."""
    out = []
    for env in sorted((ROOT / "tests" / "fixtures" / "tb21").glob("*/environment")):
        dest = tmp / f"tb21-{env.parent.name}"
        shutil.copytree(env, dest)
        text = (dest / "Dockerfile").read_text().splitlines()
        (dest / "Dockerfile").write_text("\n".join(f"FROM {BASE}" if ln.startswith("FROM ") else ln
                                                   for ln in text) + "\n")
        out.append(dest)
    return out


def _image_view(p: DockerSandboxProvider, tag: str) -> tuple[str, str, dict[str, str]]:
    info = p.api.inspect_image(tag)
    code, out = p._probe(tag, LISTING)
    assert code == 0, out[-2000:]
    return out, str(info["Config"].get("WorkingDir") or ""), dict(p.image_env(tag))


def test_files_only_images_hold_what_a_build_holds(
    providers: tuple[DockerSandboxProvider, DockerSandboxProvider], tmp_path: Path
) -> None:
    built, put = providers
    envs = _generated(tmp_path / "gen") + _harbor(tmp_path / "harbor")
    envs.append(ROOT / "tasks" / "count-lines" / "environment")
    compared = 0
    tags: list[str] = []
    try:
        for env in envs:
            plan = plan_files_only(env, ARGS)
            if plan is None:
                continue  # a RUN that does more than mkdir: built either way
            nonce = secrets.token_hex(6)
            a = built.ensure_image(env, f"cmpbuild{nonce}", build_args=ARGS, timeout=300)
            b = put.ensure_image(env, f"cmpfiles{nonce}", build_args=ARGS, timeout=300)
            tags += [a.tag, b.tag]
            assert (a.how, b.how) == ("build", "files"), env
            view_a, view_b = _image_view(built, a.tag), _image_view(put, b.tag)
            assert view_a[1:] == view_b[1:], f"{env.name}: workdir/env differ"
            lines_a, lines_b = set(view_a[0].splitlines()), set(view_b[0].splitlines())
            assert lines_a == lines_b, (f"{env.name}: only built: {sorted(lines_a - lines_b)[:8]}; "
                                        f"only put: {sorted(lines_b - lines_a)[:8]}")
            labels = put.image_labels(b.tag)
            assert labels.get("rsi.kind") == "env" and labels.get("rsi.env_digest") == f"cmpfiles{nonce}"
            if compared == 0:  # the environment record reads the base's release and packages, no probe
                assert put.image_labels(b.tag).get("rsi.files_on") == put.image_id(BASE)
                assert put.image_release(b.tag) == built.image_release(a.tag) != ""
                assert put.image_packages(b.tag) == built.image_packages(a.tag) != {}
            compared += 1
    finally:
        for t in tags:
            built.remove_image(t)
    # the generators' tasks, the starter task and the two directory-copy Harbor tasks at least
    assert compared >= len(TEMPLATES) + 3, compared


def test_a_dockerfile_with_a_real_run_is_still_built(
    providers: tuple[DockerSandboxProvider, DockerSandboxProvider], tmp_path: Path
) -> None:
    _, put = providers
    env = tmp_path / "run"
    env.mkdir()
    (env / "Dockerfile").write_text(f"FROM {BASE}\nRUN echo built > /marker\n")
    ref = put.ensure_image(env, f"cmprun{secrets.token_hex(6)}", build_args=ARGS, timeout=300)
    try:
        assert ref.how == "build"
        assert put._probe(ref.tag, "cat /marker") == (0, "built\n")
    finally:
        put.remove_image(ref.tag)
