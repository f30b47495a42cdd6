"""Who a failed image build blames: the substrate (unreachable mirror, full disk) or the Dockerfile."""

from __future__ import annotations

import pytest

from rsi.sandbox.docker_build import infra_cause


@pytest.mark.parametrize(
    "log",
    [
        "Err:1 http://deb.debian.org/debian bookworm InRelease\n  Temporary failure resolving 'deb.debian.org'\n",
        "urllib.error.URLError: <urlopen error [Errno -2] Name or service not known>\n",
        "failed to copy files: write /var/lib/docker/overlay2/x: no space left on device\n",
        "WARNING: Retrying (Retry(total=4)) after connection broken by 'NewConnectionError(... "
        "Failed to establish a new connection: [Errno 101] Network is unreachable')\n",
        "curl: (6) Could not resolve host: pypi.org\n",
    ],
)
def test_unreachable_mirrors_and_full_disks_are_infra(log: str) -> None:
    assert infra_cause("Step 2/3 : RUN something\n" + log + "The command returned a non-zero code: 1") is not None


@pytest.mark.parametrize(
    "log",
    [
        "The command '/bin/sh -c false' returned a non-zero code: 1",
        "E: Unable to locate package no-such-package\n",
        "COPY failed: file not found in build context: missing.txt\n",
        "  File \"setup.py\", line 3\n SyntaxError: invalid syntax\n",
    ],
)
def test_dockerfile_mistakes_are_the_tasks(log: str) -> None:
    assert infra_cause(log) is None
