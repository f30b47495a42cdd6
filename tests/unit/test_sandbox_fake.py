"""The fake sandbox provider passes the shared conformance suite, plus its own small contract."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rsi.core.errors import NotFoundError
from rsi.loop.context import WorkspaceContext
from rsi.sandbox.base import LABEL_JOB, Sandbox, SandboxError, SandboxProvider, SandboxSpec
from rsi.sandbox.fake import FakeSandbox, FakeSandboxProvider
from rsi.sandbox.registry import get_provider, register_fake_provider
from tests.sandbox_conformance import SandboxConformance
from tests.taskgen import make_tasks


@pytest.fixture
def provider(tmp_path: Path) -> FakeSandboxProvider:
    return FakeSandboxProvider(tmp_path / "fake")


@pytest.fixture
def image(provider: FakeSandboxProvider, tmp_path: Path) -> str:
    return provider.ensure_image(tmp_path, "f" * 64, build_args={}, timeout=60).tag


class TestFakeConformance(SandboxConformance):
    pass


def test_the_fake_is_not_selectable_unless_a_test_registers_it() -> None:
    # A fresh interpreter, as `rsi` is: `fake` (host execution) is unknown, the error lists `docker`.
    code = (
        "from rsi.sandbox.registry import get_provider\n"
        "try:\n    get_provider('fake')\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "NotFoundError unknown sandbox provider 'fake'; known: docker"
    register_fake_provider()
    assert isinstance(get_provider("fake"), FakeSandboxProvider)
    assert get_provider("docker").name == "docker"  # built lazily: no daemon needed here
    with pytest.raises(NotFoundError, match="docker, fake"):
        get_provider("podman")


def test_rsi_yaml_cannot_select_the_fake(workspace: WorkspaceContext, tmp_path: Path) -> None:
    settings = workspace.ws.settings_path
    settings.write_text(settings.read_text().replace("provider: docker", "provider: fake"))
    make_tasks(tmp_path / "tasks", 1)
    code = "import sys; from rsi.cli.app import main; sys.argv[0] = 'rsi'; main()"
    r = subprocess.run([sys.executable, "-c", code, "-w", str(workspace.ws.root), "run", str(tmp_path / "tasks"),
                        "--agent", "oracle"],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "unknown sandbox provider 'fake'; known: docker" in r.stderr
    assert workspace.store.list_jobs() == []


def test_ensure_image_reports_reuse(provider: FakeSandboxProvider, tmp_path: Path) -> None:
    first = provider.ensure_image(tmp_path, "a" * 64, build_args={}, timeout=5)
    second = provider.ensure_image(tmp_path, "a" * 64, build_args={}, timeout=5)
    assert (first.built, second.built) == (True, False)
    assert first.tag == second.tag == "rsi-env:" + "a" * 16


def test_concurrent_ensure_image_builds_once(provider: FakeSandboxProvider, tmp_path: Path) -> None:
    results: list[bool] = []
    threads = [
        threading.Thread(
            target=lambda: results.append(
                provider.ensure_image(tmp_path, "b" * 64, build_args={}, timeout=5).built
            )
        )
        for _ in range(6)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 5 + [True]


def test_start_from_unknown_image_is_infra_error(provider: FakeSandboxProvider) -> None:
    with pytest.raises(SandboxError, match="no-such:image"):
        provider.start(SandboxSpec(image="no-such:image"))


def test_paths_map_under_root_and_commands_see_sandbox_root(
    provider: FakeSandboxProvider, image: str
) -> None:
    sb = provider.start(SandboxSpec(image=image, workdir="/work"))
    try:
        assert isinstance(sb, FakeSandbox)
        sb.put_file("/etc/conf.txt", b"x=1\n")
        assert (sb.root / "etc" / "conf.txt").read_bytes() == b"x=1\n"
        r = sb.exec('cat "$SANDBOX_ROOT/etc/conf.txt"; pwd', timeout=10)
        assert r.stdout == f"x=1\n{sb.root}/work\n"
    finally:
        sb.stop()
    assert not sb.root.exists()


def test_gc_removes_dead_job_snapshots(provider: FakeSandboxProvider, image: str) -> None:
    sb = provider.start(SandboxSpec(image=image, labels={LABEL_JOB: "old"}))
    tag = sb.snapshot({LABEL_JOB: "old"})
    sb.stop()
    report = provider.gc({"current"})
    assert report.images == [tag]
    assert tag not in provider.snapshots


def test_fake_satisfies_the_protocol(provider: SandboxProvider, image: str) -> None:
    sb = provider.start(SandboxSpec(image=image))
    try:
        assert isinstance(sb, Sandbox)
    finally:
        sb.stop()


@pytest.fixture(autouse=True)
def _no_leftovers(provider: FakeSandboxProvider) -> Iterator[None]:
    yield
    assert provider.live == {}, f"sandboxes left running: {list(provider.live)}"


# -- docker provider and base-image helpers that need no daemon


def test_unreachable_daemon_is_an_infra_error_not_a_build_error(tmp_path: Path) -> None:
    import docker

    from rsi.sandbox.docker import DockerSandboxProvider

    client = docker.DockerClient(base_url=f"unix://{tmp_path}/no-daemon.sock", version="1.41")
    p = DockerSandboxProvider(client)
    (tmp_path / "Dockerfile").write_text("FROM scratch\n")
    with pytest.raises(SandboxError, match="ping"):
        p.ping()
    with pytest.raises(SandboxError) as info:
        p.ensure_image(tmp_path, "c" * 64, build_args={}, timeout=10)
    assert info.value.exit_code == 3  # InfraError: retried, never blamed on the task


def test_resolve_base_image_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    from rsi.sandbox.base_image import resolve_base_image

    monkeypatch.delenv("RSI_BASE_IMAGE", raising=False)
    assert resolve_base_image(None) == "rsi-base:bookworm"
    assert resolve_base_image("python:3.12-slim") == "python:3.12-slim"
    monkeypatch.setenv("RSI_BASE_IMAGE", "mirror.local/base:1")
    assert resolve_base_image("python:3.12-slim") == "mirror.local/base:1"


def test_missing_debootstrap_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from rsi.sandbox import base_image

    monkeypatch.setattr(base_image.shutil, "which", lambda *_a, **_k: None)
    with pytest.raises(base_image.BaseImageError, match="apt-get install -y debootstrap"):
        base_image.build_base_image("rsi-test:none", client=object())  # type: ignore[arg-type]
