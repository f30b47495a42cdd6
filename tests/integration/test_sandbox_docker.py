"""The docker sandbox provider against the real daemon: the conformance suite plus docker-only checks.

Needs a running daemon and the base image (`rsi sandbox build-base`). Every container is labelled
with this run's job id and the module asserts at the end that none is left.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi.sandbox.base import LABEL_JOB, LABEL_KIND, BuildError, SandboxError, SandboxSpec
from rsi.sandbox.base_image import base_image_present, import_rootfs
from rsi.sandbox.docker import DockerSandbox, DockerSandboxProvider
from tests.prereq import unavailable
from tests.sandbox_conformance import SandboxConformance

pytestmark = pytest.mark.docker

BASE_IMAGE = "rsi-base:bookworm"
JOB = f"rsi-test-{secrets.token_hex(4)}"
DOCKERFILE = "ARG BASE_IMAGE=python:3.12-slim\nFROM ${BASE_IMAGE}\nENV PATH=/opt/rsi-test/bin:$PATH\n"


def _unavailable(reason: str) -> None:
    unavailable(reason)


@pytest.fixture(scope="module")
def provider() -> Iterator[DockerSandboxProvider]:
    p = DockerSandboxProvider()
    try:
        p.ping()
    except Exception as e:  # noqa: BLE001
        _unavailable(f"Docker daemon unreachable: {e}")
    if p.image_id(BASE_IMAGE) is None:
        _unavailable(f"base image {BASE_IMAGE} missing; run `rsi sandbox build-base`")
    yield p
    left = [
        c["Id"][:12]
        for c in p.api.containers(all=True, filters={"label": LABEL_JOB})
        if c["Labels"].get(LABEL_JOB, "").startswith(JOB)
    ]
    left_images = [
        i["Id"]
        for i in p.api.images(filters={"label": f"{LABEL_JOB}"})
        if (i.get("Labels") or {}).get(LABEL_JOB, "").startswith(JOB)
    ]
    assert not left, f"containers left behind by the tests: {left}"
    assert not left_images, f"snapshot images left behind by the tests: {left_images}"


def _env_dir(tmp: Path, dockerfile: str = DOCKERFILE) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "Dockerfile").write_text(dockerfile)
    return tmp


@pytest.fixture(scope="module")
def image(provider: DockerSandboxProvider, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = _env_dir(tmp_path_factory.mktemp("env"))
    ref = provider.ensure_image(
        env, secrets.token_hex(32), build_args={"BASE_IMAGE": BASE_IMAGE}, timeout=300
    )
    yield ref.tag
    provider.remove_image(ref.tag)


class TestDockerConformance(SandboxConformance):
    def labels(self) -> dict[str, str]:
        return {LABEL_JOB: JOB}


@pytest.fixture
def sandbox(provider: DockerSandboxProvider, image: str) -> Iterator[DockerSandbox]:
    sb = provider.start(
        SandboxSpec(
            image=image,
            cpus=0.5,
            memory_mb=256,
            pids=64,
            labels={LABEL_JOB: JOB, "rsi.trial": "t-1", LABEL_KIND: "trial"},
        )
    )
    try:
        yield sb
    finally:
        sb.stop()


def test_limits_labels_and_no_network_are_applied(
    provider: DockerSandboxProvider, sandbox: DockerSandbox
) -> None:
    info = provider.api.inspect_container(sandbox.id)
    hc = info["HostConfig"]
    assert hc["NanoCpus"] == 500_000_000
    assert hc["Memory"] == 256 * 1024 * 1024
    assert hc["PidsLimit"] == 64
    assert hc["NetworkMode"] == "none"
    assert info["Config"]["Labels"][LABEL_JOB] == JOB
    assert info["Config"]["Labels"]["rsi.trial"] == "t-1"
    assert info["Config"]["WorkingDir"] == "/app"
    r = sandbox.exec(
        "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)\"", timeout=30
    )
    assert r.exit_code != 0 and "unreachable" in r.stderr.lower()


def test_network_when_asked(provider: DockerSandboxProvider, image: str) -> None:
    sb = provider.start(SandboxSpec(image=image, network=True, labels={LABEL_JOB: JOB}))
    try:
        assert provider.api.inspect_container(sb.id)["HostConfig"]["NetworkMode"] != "none"
    finally:
        sb.stop()


def test_image_path_survives_exec_and_init_is_not_a_change(sandbox: DockerSandbox) -> None:
    # Not a login shell: Debian's /etc/profile would drop the image's ENV PATH.
    assert sandbox.exec("echo $PATH", timeout=30).stdout.startswith("/opt/rsi-test/bin:")
    # docker's init mountpoint must not look like the agent touched /usr/sbin (tamper check).
    assert not [p for p in sandbox.changed_paths() if p.startswith(("/usr", "/sbin"))]
    sandbox.exec("touch /usr/sbin/planted", timeout=30)
    assert "/usr/sbin/planted" in sandbox.changed_paths()


def test_ensure_image_reuses_an_existing_image_fast(provider: DockerSandboxProvider, image: str) -> None:
    digest_prefix = image.split(":")[1]
    t0 = time.monotonic()
    ref = provider.ensure_image(Path("/nonexistent"), digest_prefix + "0" * 48, build_args={}, timeout=60)
    assert ref.tag == image and ref.built is False
    assert time.monotonic() - t0 < 2


def test_concurrent_ensure_image_builds_once(provider: DockerSandboxProvider, tmp_path: Path) -> None:
    env, digest = _env_dir(tmp_path / "env"), secrets.token_hex(32)
    built: list[bool] = []
    errors: list[BaseException] = []

    def go() -> None:
        try:
            built.append(
                provider.ensure_image(env, digest, build_args={"BASE_IMAGE": BASE_IMAGE}, timeout=300).built
            )
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=go) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors
        assert sorted(built) == [False, False, False, True]
        assert provider.api.inspect_image(f"rsi-env:{digest[:16]}")["Config"]["Labels"][LABEL_KIND] == "env"
    finally:
        provider.remove_image(f"rsi-env:{digest[:16]}")


def test_failing_dockerfile_is_a_build_error_with_log(
    provider: DockerSandboxProvider, tmp_path: Path
) -> None:
    env = _env_dir(tmp_path, DOCKERFILE + "RUN echo boom-marker-42 && exit 3\n")
    with pytest.raises(BuildError) as info:
        provider.ensure_image(env, secrets.token_hex(32), build_args={"BASE_IMAGE": BASE_IMAGE}, timeout=300)
    assert "boom-marker-42" in info.value.log
    assert "3" in str(info.value)


def test_missing_base_image_is_infra_not_the_tasks_fault(
    provider: DockerSandboxProvider, tmp_path: Path
) -> None:
    env = _env_dir(tmp_path)
    with pytest.raises(SandboxError, match="rsi sandbox build-base"):
        provider.ensure_image(
            env, secrets.token_hex(32), build_args={"BASE_IMAGE": "rsi-absent:nope"}, timeout=120
        )


def test_missing_dockerfile_is_a_build_error(provider: DockerSandboxProvider, tmp_path: Path) -> None:
    with pytest.raises(BuildError, match="Dockerfile"):
        provider.ensure_image(tmp_path, secrets.token_hex(32), build_args={}, timeout=60)


def test_gc_removes_leftover_container_and_snapshot(provider: DockerSandboxProvider, image: str) -> None:
    dead = f"{JOB}-crashed"
    leftover = provider.start(SandboxSpec(image=image, labels={LABEL_JOB: dead}))
    snap = leftover.snapshot({LABEL_JOB: dead})
    provider.api.stop(leftover.id, timeout=0)  # gc must also take stopped containers
    report = provider.gc({JOB}, scope={dead, JOB})
    assert leftover.id[:12] in report.containers
    assert snap in report.images
    assert provider.image_id(snap) is None
    assert not provider.api.containers(all=True, filters={"label": f"{LABEL_JOB}={dead}"})


def test_snapshot_is_labelled(provider: DockerSandboxProvider, sandbox: DockerSandbox) -> None:
    tag = sandbox.snapshot({LABEL_JOB: JOB, "rsi.trial": "t-1"})
    try:
        labels = provider.api.inspect_image(tag)["Config"]["Labels"]
        assert labels[LABEL_KIND] == "snapshot" and labels[LABEL_JOB] == JOB
    finally:
        provider.remove_image(tag)


def test_base_image_helpers(provider: DockerSandboxProvider, tmp_path: Path) -> None:
    assert base_image_present(BASE_IMAGE)
    assert not base_image_present(f"rsi-absent:{secrets.token_hex(4)}")
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    (rootfs / "etc" / "hello").write_text("hi\n")
    name = f"rsi-test-rootfs:{secrets.token_hex(4)}"
    try:
        image_id = import_rootfs(rootfs, name)
        info = provider.api.inspect_image(name)
        assert info["Id"] == image_id
        assert info["Config"]["Labels"]["rsi.kind"] == "base"
        assert any(e.startswith("PATH=") for e in info["Config"]["Env"])
    finally:
        provider.remove_image(name)


def test_flooding_output_is_capped_and_the_exit_code_kept(image: str) -> None:
    small = DockerSandboxProvider(output_cap=1000)
    sb = small.start(SandboxSpec(image=image, labels={LABEL_JOB: JOB}))
    try:
        r = sb.exec("head -c 5000000 /dev/zero | tr '\\0' a; echo done >&2; exit 4", timeout=60)
        assert r.stdout.startswith("a" * 1000) and "4999000 more bytes" in r.stdout
        assert (r.stderr, r.exit_code) == ("done\n", 4)
    finally:
        sb.stop()
