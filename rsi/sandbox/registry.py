"""Sandbox providers by name: `docker` (the real one).

The `fake` provider (rsi/sandbox/fake.py) runs commands on the host with no isolation at all, so it
is never selectable from `rsi.yaml`: only the tests register it (`register_fake_provider()`).
"""

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


def register_fake_provider() -> None:
    """Make `fake` selectable by name. For tests only: it executes commands on the host."""

    def _fake(**kwargs: Any) -> SandboxProvider:
        from rsi.sandbox.fake import FakeSandboxProvider

        return FakeSandboxProvider(**kwargs)

    SANDBOX_PROVIDERS.add("fake", _fake)


def get_provider(name: str = "docker", **kwargs: Any) -> SandboxProvider:
    """A new provider by name; NotFoundError lists the known names for an unknown one."""
    return SANDBOX_PROVIDERS.create(name, **kwargs)
