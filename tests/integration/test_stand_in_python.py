"""The Python of every `python:*` stand-in `rsi sandbox build-base --as` makes behaves as the official image's
(issue 49): `python3 -m venv`, `uv venv`, `uv init && uv add pytest==8.4.1 && uv run pytest`, `pip install
--target`, and the standard library (`encodings`, `ssl`, `sqlite3`, `venv`) all work, offline: the same script
runs in each stand-in, and in the real image where one is present locally (pulled by hand), and they agree."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from rsi.exec.verifier_offline import wheel_root
from rsi.sandbox.base_image import LABEL_SUBSTITUTE, substitute_base
from rsi.sandbox.releases import python_for, release_for
from rsi.sandbox.tool_shim import host_uv
from rsi.sandbox.wheel_cache import provide_wheels

pytestmark = pytest.mark.docker

# python:3.13 on bookworm (rsi's portable CPython in /usr/local), on trixie (the release's own 3.13), and 3.11 on
# bookworm (the release's own): the three ways a stand-in gets its interpreter.
TAGS = ["python:3.13-slim-bookworm", "python:3.13-slim", "python:3.11-slim-bookworm"]
CHECKS = ["stdlib", "prefix", "venv", "venv-pip", "uv-venv", "uv-add", "pip-target", "pip"]

# Each check prints "OK name" or "FAIL name"; the uv commands are offline, against the mounted wheels.
SCRIPT = r"""
set -u
check() {
  name=$1; shift
  if ( "$@" ) >/tmp/out 2>&1; then echo "OK $name"; else echo "FAIL $name"; tail -5 /tmp/out; fi
}
check stdlib python3 -c 'import encodings, ssl, sqlite3, venv, ensurepip'
check prefix python3 -c 'import os, sys, sysconfig; p = sysconfig.get_paths(); \
  assert os.path.isfile(os.path.join(p["stdlib"], "os.py")) and p["purelib"] in sys.path, p'
check venv sh -c 'python3 -m venv /tmp/v1 && /tmp/v1/bin/python -c "import encodings, ssl, sqlite3, sys; \
  assert sys.prefix == \"/tmp/v1\""'
check venv-pip /tmp/v1/bin/python -m pip --version
check uv-venv sh -c 'uv venv -q /tmp/v2 -p python3 && /tmp/v2/bin/python -c "import encodings, ssl, sqlite3"'
check uv-add sh -c 'mkdir -p /tmp/proj && cd /tmp/proj && uv init -q && uv add -q pytest==8.4.1 && \
  uv run pytest --version'
check pip-target sh -c 'pip install -q --no-index --find-links /wheels --target /tmp/t iniconfig && \
  PYTHONPATH=/tmp/t python3 -c "import iniconfig"'
check pip sh -c 'pip --version && pip3 --version && python3 -m pip --version'
"""


def _results(client: docker.DockerClient, image: str, uv: Path, wheels: Path) -> dict[str, str]:
    out = client.containers.run(
        image, ["bash", "-c", SCRIPT], remove=True, network_mode="none",
        volumes={str(uv): {"bind": "/usr/bin/uv", "mode": "ro"}, str(wheels): {"bind": "/wheels", "mode": "ro"}},
        environment={"UV_OFFLINE": "1", "UV_NO_INDEX": "1", "UV_FIND_LINKS": "/wheels",
                     "UV_PYTHON_DOWNLOADS": "never", "UV_NO_CACHE": "1"},
    ).decode(errors="replace")
    got: dict[str, str] = {}
    for line in out.splitlines():
        word, _, name = line.partition(" ")
        if word in ("OK", "FAIL") and name in CHECKS:
            got[name] = word
        elif got:
            got[list(got)[-1]] += f"\n  {line}"
    return got


@pytest.mark.parametrize("tag", TAGS)
def test_a_python_stand_in_behaves_as_the_official_image(docker_ready: None, tag: str) -> None:
    client = docker.from_env(timeout=600)
    found = host_uv()
    assert found is not None, "the uv wheel is not installed beside rsi (scripts/setup.sh installs it)"
    wheels = provide_wheels(["pytest==8.4.1"], pythons=[str(python_for(tag))], project=True,
                            cache_root=wheel_root(), uv=found[0])
    assert wheels is not None
    real = client.api.images(name=tag)
    labels = (client.api.inspect_image(tag)["Config"].get("Labels") or {}) if real else {}
    real_there = bool(real) and not labels.get(LABEL_SUBSTITUTE)
    stand_in = f"rsi-conformance/{tag.replace(':', '-')}:stand-in" if real_there else tag
    if real_there:  # the real image stays as it is: the stand-in is made under another name to compare
        substitute_base(stand_in, suite=release_for(tag).codename)
    else:
        substitute_base(tag)
    got = _results(client, stand_in, found[0], wheels.dir)
    assert all(got.get(c) == "OK" for c in CHECKS), (tag, got)
    if real_there:
        want = _results(client, tag, found[0], wheels.dir)
        assert {c: want.get(c, "")[:4] for c in CHECKS} == {c: got[c][:4] for c in CHECKS}, (want, got)
