"""The base image task Dockerfiles build FROM, made from Debian packages where no registry is reachable.

`rsi sandbox build-base` runs debootstrap (minbase + python3) into a temp directory and imports
the tree with `docker import`. Such an image has no CMD; the docker provider starts containers
with an explicit command anyway.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import docker

from rsi.core.errors import RsiError
from rsi.sandbox.docker_io import call

DEFAULT_BASE_IMAGE = "rsi-base:bookworm"
ENV_BASE_IMAGE = "RSI_BASE_IMAGE"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
IMPORT_CHANGES = [
    "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "ENV LANG=C.UTF-8",
    "LABEL rsi.kind=base",
]

Progress = Callable[[str], None]


class BaseImageError(RsiError):
    """The base image could not be made; the message says what to install or fix."""

    exit_code = 1


def resolve_base_image(workspace_setting: str | None) -> str:
    """The base image name: $RSI_BASE_IMAGE, else the workspace's setting, else rsi-base:bookworm."""
    return os.environ.get(ENV_BASE_IMAGE) or workspace_setting or DEFAULT_BASE_IMAGE


def base_image_present(name: str = DEFAULT_BASE_IMAGE, client: docker.DockerClient | None = None) -> bool:
    """Whether the daemon has the image locally (SandboxError if the daemon is unreachable)."""
    api = (client or _client()).api
    return call(f"inspect image {name}", api.inspect_image, name, missing_ok=True) is not None


def check_debootstrap() -> str:
    """Path of debootstrap, or BaseImageError saying how to get it (and that it needs root)."""
    path = shutil.which("debootstrap", path=os.environ.get("PATH", "") + ":/usr/sbin:/sbin")
    if path is None:
        raise BaseImageError(
            "debootstrap is not installed; install it with `apt-get install -y debootstrap` "
            "(or set RSI_BASE_IMAGE to an image you already have)"
        )
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        raise BaseImageError("debootstrap must run as root to build the base image (try sudo)")
    return path


def build_base_image(
    name: str = DEFAULT_BASE_IMAGE,
    suite: str = "bookworm",
    progress: Progress | None = None,
    *,
    mirror: str = DEFAULT_MIRROR,
    client: docker.DockerClient | None = None,
) -> str:
    """Debootstrap `suite` (minbase + python3) and import it as `name`; return the image id.

    Takes a minute or more and needs network access to a Debian mirror.
    """
    say = progress or (lambda _line: None)
    debootstrap = check_debootstrap()
    client = client or _client()
    with tempfile.TemporaryDirectory(prefix="rsi-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = [debootstrap, "--variant=minbase", "--include=python3", suite, str(rootfs), mirror]
        say(f"running {' '.join(cmd)}")
        _run_streaming(cmd, say, what="debootstrap")
        say(f"importing {rootfs} as {name}")
        image_id = import_rootfs(rootfs, name, client=client)
    say(f"built {name} ({image_id[:19]})")
    return image_id


def import_rootfs(rootfs: Path, name: str, *, client: docker.DockerClient | None = None) -> str:
    """`tar -C rootfs -c . | docker import - name`, through the SDK; returns the image id."""
    if not rootfs.is_dir():
        raise BaseImageError(f"{rootfs}: not a directory")
    api = (client or _client()).api
    repo, _, tag = name.rpartition(":") if ":" in name.split("/")[-1] else (name, "", "latest")
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
    assert tar.stdout is not None
    try:
        # A generator makes requests stream the tar with chunked encoding, never all in memory.
        answer = api.import_image_from_data(
            _chunks(tar.stdout), repository=repo, tag=tag, changes=IMPORT_CHANGES
        )
    except Exception as e:
        tar.kill()
        tar.wait()
        raise BaseImageError(f"docker import of {rootfs} as {name} failed: {e}") from e
    if tar.wait() != 0:
        raise BaseImageError(f"tar of {rootfs} failed with exit code {tar.returncode}")
    if '"error' in str(answer):
        raise BaseImageError(f"docker import of {rootfs} as {name} failed: {answer}")
    info = call(f"inspect image {name}", api.inspect_image, name)
    assert info is not None
    return str(info["Id"])


LABEL_SUBSTITUTE = "rsi.substitute"  # on a tag made by `build-base --as`: "debian <suite> minbase + python3"

# Debian suites whose python3 matches the public images task Dockerfiles name (python 3.13 -> trixie).
_TRIXIE_HINTS = ("3.13", "trixie", "debian:13", "24.04", "noble")


def suite_for(tag: str) -> str:
    """The Debian suite whose packages best stand in for `tag` (trixie's python3 is 3.13, bookworm's 3.11)."""
    return "trixie" if any(h in tag for h in _TRIXIE_HINTS) else "bookworm"


def substitute_base(tag: str, *, suite: str | None = None, force: bool = False,
                    progress: Progress | None = None, client: docker.DockerClient | None = None) -> str:
    """Make `tag` (a public base image a Dockerfile names, e.g. python:3.13-slim-bookworm) resolve with no
    registry: an rsi base image of the right Debian suite, built once per suite and tagged as `tag`,
    with a label that says what it really is (the trial records the substitution)."""
    suite = suite or suite_for(tag)
    client = client or _client()
    api = client.api
    local = f"rsi-base:{suite}"
    if force or call(f"inspect image {local}", api.inspect_image, local, missing_ok=True) is None:
        build_base_image(local, suite, progress, client=client)
    repo, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    # A tiny image FROM the suite's base, so the label is on the tag itself (docker tag cannot add one).
    with tempfile.TemporaryDirectory(prefix="rsi-subst-") as tmp:
        (Path(tmp) / "Dockerfile").write_text(
            f'FROM {local}\nLABEL {LABEL_SUBSTITUTE}="debian {suite} minbase + python3, standing in for {tag}"\n'
        )
        for _chunk in api.build(path=tmp, tag=f"{repo}:{version}", rm=True, pull=False, decode=True):
            if "error" in _chunk:
                raise BaseImageError(f"tagging {local} as {tag} failed: {_chunk['error']}")
    info = call(f"inspect image {tag}", api.inspect_image, tag)
    assert info is not None
    return str(info["Id"])


def base_tags(dockerfiles: list[Path]) -> set[str]:
    """The images the Dockerfiles' FROM lines name (stage names and ${BASE_IMAGE} build args left out)."""
    tags: set[str] = set()
    for df in dockerfiles:
        stages: set[str] = set()
        for line in df.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0].upper() == "FROM":
                args = [a for a in parts[1:] if not a.startswith("--")]
                if not args:
                    continue
                image = args[0]
                if len(args) >= 3 and args[1].upper() == "AS":
                    stages.add(args[2].lower())
                if "$" not in image and image.lower() not in stages and image != "scratch":
                    tags.add(image)
    return tags


def _chunks(fp: IO[bytes]) -> Iterator[bytes]:
    while chunk := fp.read(1 << 20):
        yield chunk


def _run_streaming(cmd: list[str], say: Progress, *, what: str) -> None:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        line = line.rstrip()
        say(line)
        tail = (tail + [line])[-20:]
    if proc.wait() != 0:
        raise BaseImageError(f"{what} failed (exit {proc.returncode}):\n" + "\n".join(tail))


def _client() -> docker.DockerClient:
    client = call("connect to docker", docker.from_env, timeout=600)
    assert client is not None
    return client
