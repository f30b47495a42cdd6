"""Sandbox providers by name: `docker` (the real one) and `fake` (local directories, for tests)."""

from __future__ import annotations

from typing import Any

from rsi.core.registry import Registry
from rsi.sandbox.base import SandboxProvider

SANDBOX_PROVIDERS: Registry[SandboxProvider] = Registry("sandbox provider")


@SANDBOX_PROVIDERS.register("docker")
def _docker(**kwargs: Any) -> SandboxProvider:
    # Imported here so that using the fake never needs the docker SDK.
    from rsi.sandbox.docker import DockerSandboxProvider

    return DockerSandboxProvider(**kwargs)


@SANDBOX_PROVIDERS.register("fake")
def _fake(**kwargs: Any) -> SandboxProvider:
    from rsi.sandbox.fake import FakeSandboxProvider

    return FakeSandboxProvider(**kwargs)


def get_provider(name: str = "docker", **kwargs: Any) -> SandboxProvider:
    """A new provider by name; NotFoundError lists the known names for an unknown one."""
    return SANDBOX_PROVIDERS.create(name, **kwargs)
