"""The fast `changed_paths` (a walk of the container's overlay upper dir) agrees with `docker diff`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rsi.sandbox.base import LABEL_JOB, SandboxSpec
from rsi.sandbox.docker import DockerSandbox, DockerSandboxProvider
from rsi.sandbox.overlay_diff import upper_changes
from tests.integration.conftest import BASE_IMAGE, TEST_JOB_PREFIX

pytestmark = pytest.mark.docker

CHANGES = r"""
set -e
echo new > /app/added.txt
mkdir -p /app/a/b/c && echo deep > /app/a/b/c/f
rm /etc/debian_version
chmod 600 /etc/hostname || true
ln -s /etc/passwd /app/link
rm -rf /etc/apt/apt.conf.d && mkdir /etc/apt/apt.conf.d && echo x > /etc/apt/apt.conf.d/only
echo more >> /etc/issue
python3 -c 'import json' >/dev/null
"""


@pytest.fixture
def box() -> Iterator[DockerSandbox]:
    provider = DockerSandboxProvider()
    sb = provider.start(SandboxSpec(image=BASE_IMAGE, labels={LABEL_JOB: f"{TEST_JOB_PREFIX}overlay"}))
    assert isinstance(sb, DockerSandbox)
    try:
        yield sb
    finally:
        sb.stop()


def test_upper_dir_walk_matches_docker_diff(box: DockerSandbox) -> None:
    assert box.exec(CHANGES, timeout=60).ok
    api = box._api  # noqa: SLF001 - the test compares against the daemon's own answer
    daemon = {c["Path"]: c["Kind"] for c in api.diff(box.id)}
    data = api.inspect_container(box.id)["GraphDriver"]["Data"]
    fast = upper_changes(data["UpperDir"], [p for p in data["LowerDir"].split(":") if p])
    assert fast == daemon
    # and the sandbox reports the same paths through either route
    assert {"/app/added.txt", "/app/a/b/c/f", "/etc/debian_version", "/etc/apt/apt.conf.d/only"} <= set(
        box.changed_paths()
    )
