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
from rsi.sandbox.portable_python import DEST as PY_DEST
from rsi.sandbox.portable_python import SOURCE_IMAGE as PY_SOURCE
from rsi.sandbox.portable_python import VERSION as PY_VERSION
from rsi.sandbox.portable_python import PortablePython, portable_python
from rsi.sandbox.releases import DEBIAN, UBUNTU, Release, python_for, release_for, release_of
from rsi.sandbox.stand_in_python import RECIPE, layout_lines, write_kit

DEFAULT_BASE_IMAGE = "rsi-base:bookworm"
ENV_BASE_IMAGE = "RSI_BASE_IMAGE"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
UBUNTU_KEYRING = "/usr/share/keyrings/ubuntu-archive-keyring.gpg"
DEBIAN_FALLBACK = "bookworm"  # the Debian release a stand-in for an Ubuntu tag is, when asked for by name
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


def base_image_labels(name: str, client: docker.DockerClient | None = None) -> dict[str, str] | None:
    """The labels of a local image ({} for one without), None when the daemon does not have it."""
    api = (client or _client()).api
    info = call(f"inspect image {name}", api.inspect_image, name, missing_ok=True)
    return None if info is None else dict((info.get("Config") or {}).get("Labels") or {})


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
    mirror: str | None = None,
    client: docker.DockerClient | None = None,
) -> str:
    """Debootstrap `suite` (minbase + python3) and import it as `name`; return the image id.

    Takes a minute or more and needs network access to the release's mirror (Debian's, or Ubuntu's archive
    for an Ubuntu codename, which also needs Ubuntu's archive keyring on the host).
    """
    say = progress or (lambda _line: None)
    debootstrap = check_debootstrap()
    release = release_of(suite) if suite in (*DEBIAN, *UBUNTU) else None
    extra: list[str] = []
    if release is not None and release.distro == "ubuntu":
        if not Path(UBUNTU_KEYRING).is_file():
            raise BaseImageError(_no_keyring(f"{release} ({suite})",
                                             f"rsi sandbox build-base --suite {DEBIAN_FALLBACK}"))
        extra = [f"--keyring={UBUNTU_KEYRING}"]
    client = client or _client()
    with tempfile.TemporaryDirectory(prefix="rsi-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = [debootstrap, "--variant=minbase", "--include=python3", *extra, suite, str(rootfs),
               mirror or (release.mirror if release else DEFAULT_MIRROR)]
        if release is not None and release.distro == "ubuntu":
            cmd.append("/usr/share/debootstrap/scripts/gutsy")  # every Ubuntu release since uses gutsy's script
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


LABEL_SUBSTITUTE = "rsi.substitute"  # on a tag made by `build-base --as`: what it really is
LABEL_RELEASE = "rsi.release"  # on such a tag: the codename of the release it is (bookworm, trixie, noble)
LABEL_CHOSEN = "rsi.release_chosen"  # "yes" when `--suite` named the release (a Debian stand-in for ubuntu:24.04)


def suite_for(tag: str) -> str:
    """The release codename a public image tag is built on (releases.py: bookworm for
    python:3.13-slim-bookworm, trixie for python:3.13-slim, noble for ubuntu:24.04)."""
    return release_for(tag).codename


def substitute_base(tag: str, *, suite: str | None = None, force: bool = False,
                    progress: Progress | None = None, client: docker.DockerClient | None = None) -> str:
    """Make `tag` (a public base image a Dockerfile names, e.g. python:3.13-slim-bookworm) resolve with no
    registry: an rsi base image of the tag's own release (bookworm there, never the host's), built once
    per release, with that release's apt sources (main, updates, security: an `apt-get install` in the
    task's Dockerfile gets the release's versions) and, for a `python:X.Y` tag whose release ships
    another python3, rsi's portable CPython 3.13 in /usr/local (3.13 is the only one rsi has: any other
    version is a one-line BaseImageError, never a silent substitute). Labels say what it really is (the
    trial records it). A tag already made from the same recipe and base is left as it is."""
    release = release_of(suite) if suite else release_for(tag)
    if release.distro == "ubuntu" and not Path(UBUNTU_KEYRING).is_file():
        raise BaseImageError(_no_keyring(f"{tag} ({release})", stand_in_command(tag)))
    client = client or _client()
    api = client.api
    local = f"rsi-base:{release.codename}"
    if force or call(f"inspect image {local}", api.inspect_image, local, missing_ok=True) is None:
        build_base_image(local, release.codename, progress, client=client)
    local_info = call(f"inspect image {local}", api.inspect_image, local)
    assert local_info is not None
    wanted, python = python_for(tag), None
    if wanted is not None and wanted != release.python:
        python = _python_tree(tag, wanted, release, progress, client)
    kit = f"; its python{wanted} venv-ready with pip ({RECIPE})" if wanted else ""
    what = f"{release} minbase + python3 {release.python}" + (
        f" + CPython {python.version} (rsi's portable, from Debian trixie) in /usr/local" if python else "") + kit
    label = f"{what}, standing in for {tag}"
    have = call(f"inspect image {tag}", api.inspect_image, tag, missing_ok=True)
    if have is not None and not force:
        labels = (have.get("Config") or {}).get("Labels") or {}
        if labels.get(LABEL_SUBSTITUTE) == label and labels.get("rsi.base_id") == local_info["Id"] and \
                bool(labels.get(LABEL_CHOSEN)) == bool(suite):
            return str(have["Id"])
    repo, _, version = tag.rpartition(":") if ":" in tag.split("/")[-1] else (tag, "", "latest")
    # A small image FROM the release's base, so the labels are on the tag itself (docker tag cannot add one).
    with tempfile.TemporaryDirectory(prefix="rsi-subst-") as tmp:
        ctx = Path(tmp)
        (ctx / "sources").write_text(release.sources())
        lines = [f"FROM {local}",
                 f"COPY sources /etc/apt/sources.list.d/{release.distro}.sources",
                 "RUN rm -f /etc/apt/sources.list"]
        if python is not None:
            shutil.copytree(python.root, ctx / "python", symlinks=True)
            lines.append(f"COPY python {PY_DEST}")
        if wanted is not None:  # a python:X.Y tag: its interpreter as the official image's behaves (venv, pip)
            write_kit(ctx, wanted)
            lines += layout_lines(wanted, portable_dest=PY_DEST if python is not None else None)
        lines.append(f'LABEL {LABEL_SUBSTITUTE}="{label}" {LABEL_RELEASE}="{release.codename}" '
                     f'{LABEL_CHOSEN}="{"yes" if suite else ""}" rsi.base_id="{local_info["Id"]}"')
        (ctx / "Dockerfile").write_text("\n".join(lines) + "\n")
        for _chunk in api.build(path=tmp, tag=f"{repo}:{version}", rm=True, pull=False, decode=True):
            if "error" in _chunk:
                raise BaseImageError(f"making {tag} from {local} failed: {_chunk['error']}")
    info = call(f"inspect image {tag}", api.inspect_image, tag)
    assert info is not None
    return str(info["Id"])


def stand_in_command(tag: str) -> str:
    """The command that makes `tag` resolve offline: `--as TAG`, with `--suite bookworm` for an Ubuntu tag where
    Ubuntu's archive keyring is not on the host (a Debian stand-in, named as such on every trial)."""
    try:
        ubuntu = release_for(tag).distro == "ubuntu"
    except ValueError:
        ubuntu = False
    chosen = f" --suite {DEBIAN_FALLBACK}" if ubuntu and not Path(UBUNTU_KEYRING).is_file() else ""
    return f"rsi sandbox build-base --as {tag}{chosen}"


def stood_in_by(labels: dict[str, str]) -> str | None:
    """What a stand-in's labels say it is ("debian bookworm minbase + python3 3.11 + ..."), None for a real image."""
    said = labels.get(LABEL_SUBSTITUTE)
    return said.split(", standing in for ")[0] if said else None


def _no_keyring(what: str, command: str) -> str:
    return (f"cannot stand in for {what}: Ubuntu's archive keyring {UBUNTU_KEYRING} is not on this host and rsi "
            f"never installs an unverified release; for a Debian stand-in (recorded on every trial) run `{command}`")


def stale_stand_in(tag: str, client: docker.DockerClient | None = None) -> str | None:
    """What a present stand-in for `tag` says it is when it is not labelled as the tag's own release (made by
    an older rsi: python:3.13-slim-bookworm from trixie), else None (absent, a real image, or the right one)."""
    api = (client or _client()).api
    info = call(f"inspect image {tag}", api.inspect_image, tag, missing_ok=True)
    labels = ((info or {}).get("Config") or {}).get("Labels") or {}
    said = labels.get(LABEL_SUBSTITUTE)
    if not said or labels.get(LABEL_CHOSEN) or labels.get(LABEL_RELEASE) == release_for(tag).codename:
        return None  # absent, real, the tag's own release, or a release named with --suite
    return str(said)


def _python_tree(tag: str, wanted: str, release: Release, progress: Progress | None,
                 client: docker.DockerClient) -> PortablePython:
    """rsi's portable CPython for a python:`wanted` tag on a release without it, or one BaseImageError."""
    if wanted != PY_VERSION:
        raise BaseImageError(
            f"{tag} carries python {wanted}, which {release} does not ship (its python3 is {release.python}) and "
            f"rsi can add only python {PY_VERSION}; name a base whose release has python {wanted}")
    if call(f"inspect image {PY_SOURCE}", client.api.inspect_image, PY_SOURCE, missing_ok=True) is None:
        build_base_image(PY_SOURCE, "trixie", progress, client=client)
    got = portable_python(client)
    if isinstance(got, str):
        raise BaseImageError(f"{tag} carries python {wanted}, which {release} does not ship: {got}")
    return got


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
