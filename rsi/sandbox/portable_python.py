"""A CPython 3.13 for verifiers on images that have none, assembled offline from rsi's trixie base image.

Terminal-Bench 2.x `test.sh` files run `uvx -p 3.13 ... pytest`. On python:3.13 images (and rsi's trixie
stand-in for them) the image's own interpreter answers. On the rest (python:3.10/3.11, bookworm or
bullseye, a minimal ubuntu) uv would download a Python from GitHub, which an offline host cannot reach.

So rsi assembles, once per `rsi-base:trixie` image, a relocatable tree: Debian trixie's `python3.13`,
its standard library (tests, IDLE and Tk left out), every shared library the interpreter or one of its
extension modules links against, and glibc's own loader. A `python3.13` wrapper starts the interpreter
through that loader (`ld.so --library-path <tree>/lib --argv0 "$0" ...`), so it runs on any Linux image
of the host's architecture whatever its libc, never touches the image's libraries, and sets nothing
that the programs it starts inherit (their own libc loads as usual). `--argv0` keeps `sys.executable`
the wrapper, so venvs uv makes from it and subprocesses work. The tree is cached on the host
(`cache_dir()/portable-python/`, keyed by the image id) and copied into the verifier's sandbox, with the
wrapper's directory at the END of `PATH`: an image's own python3.13 always wins.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import docker

from rsi.sandbox.base import SandboxError
from rsi.sandbox.docker_io import call, extract_dir_from_tar, spool_chunks
from rsi.store.paths import cache_dir

VERSION = "3.13"
SOURCE_IMAGE = "rsi-base:trixie"  # `rsi sandbox build-base --suite trixie` (or any --as of a 3.13 tag)
DEST = "/usr/local/lib/rsi-python3.13"  # where the tree goes in a sandbox; DEST/bin goes last on PATH
MANIFEST = "rsi-portable-python.json"
BUILD_FIX = "rsi sandbox build-base --suite trixie"

# Run in a container of SOURCE_IMAGE: copy the interpreter, its stdlib, the libraries ldd names for it
# and every extension module, and the loader, into /rsi-py/python3.13; write the wrapper and a manifest.
ASSEMBLE = r"""set -eu
o=/rsi-py/python3.13
exe=$(command -v python3.13)
ld=$(ldd "$exe" | awk '/ld-linux/ {print $1}')
mkdir -p "$o/bin" "$o/lib" "$o/libexec"
cp -a /usr/lib/python3.13 "$o/lib/python3.13"
cd "$o/lib/python3.13"
rm -rf test idlelib turtledemo tkinter lib-dynload/_test*.so lib-dynload/_xxtestfuzz*.so lib-dynload/_tkinter*.so
# symlinks into the rest of the image (Debian links some config files from /etc) become copies or go
find "$o" -type l | while read -r l; do
  t=$(readlink -f "$l" || true); rm -f "$l"
  if [ -n "$t" ] && [ -e "$t" ]; then cp -a "$t" "$l"; fi
done
cp "$exe" "$o/libexec/python3.13"
for f in "$exe" "$o"/lib/python3.13/lib-dynload/*.so; do
  ldd "$f" | awk '$3 ~ /^\// {print $3}' || true
done | sort -u | while read -r lib; do cp -L "$lib" "$o/lib/"; done
cp -L "$ld" "$o/lib/"
ldname=$(basename "$ld")
cat > "$o/bin/python3.13" <<WRAP
#!/bin/sh
# rsi: Debian trixie's CPython 3.13 started through its own glibc loader (runs on any image; see rsi docs)
d=__DEST__
exec "\$d/lib/$ldname" --library-path "\$d/lib" --argv0 "\$0" "\$d/libexec/python3.13" "\$@"
WRAP
chmod 755 "$o/bin/python3.13"
v=$(python3.13 -c 'import platform; print(platform.python_version())')
printf '{"version": "%s", "loader": "%s"}\n' "$v" "$ldname" > "$o/__MANIFEST__"
""".replace("__DEST__", DEST).replace("__MANIFEST__", MANIFEST)

_lock = threading.Lock()


@dataclass(frozen=True)
class PortablePython:
    """A ready tree on the host: `root` holds bin/python3.13 (the wrapper), lib/ and libexec/."""

    root: Path
    version: str  # the interpreter's full version, e.g. 3.13.5
    source: str  # the image it was assembled from, with its id

    @property
    def bin_dir(self) -> str:
        return f"{DEST}/bin"


def _tree_dir(image_id: str) -> Path:
    return cache_dir() / "portable-python" / f"cpython{VERSION}-{image_id.split(':')[-1][:12]}"


def _load(tree: Path, image_id: str) -> PortablePython | None:
    manifest = tree / MANIFEST
    if not (manifest.is_file() and (tree / "bin" / "python3.13").is_file()):
        return None
    version = json.loads(manifest.read_text()).get("version", VERSION)
    return PortablePython(tree, str(version), f"{SOURCE_IMAGE} ({image_id[:19]})")


def portable_python(client: docker.DockerClient | None = None, *, assemble: bool = True) -> PortablePython | str:
    """The cached tree for the current `rsi-base:trixie`, assembled now if `assemble` and missing (a few
    seconds, once per image); a str says why there is none and what makes one."""
    api = (client or docker.from_env()).api
    info = call(f"inspect image {SOURCE_IMAGE}", api.inspect_image, SOURCE_IMAGE, missing_ok=True)
    if info is None:
        return f"{SOURCE_IMAGE} is missing (make it with `{BUILD_FIX}`)"
    image_id = str(info["Id"])
    tree = _tree_dir(image_id)
    ready = _load(tree, image_id)
    if ready is not None or not assemble:
        return ready or f"not assembled yet from {SOURCE_IMAGE} (it is at first use, or by `{BUILD_FIX}`)"
    with _lock:
        ready = _load(tree, image_id)
        if ready is None:
            _assemble(api, image_id, tree)
            ready = _load(tree, image_id)
    return ready or f"assembling python {VERSION} from {SOURCE_IMAGE} left no interpreter"


def _assemble(api: docker.APIClient, image_id: str, tree: Path) -> None:
    """Run ASSEMBLE in a throwaway container (no network) and unpack its result into `tree` atomically."""
    container = call("create python assembler", api.create_container, image_id, command=["sh", "-c", ASSEMBLE],
                     labels={"rsi.kind": "portable-python"},
                     host_config=api.create_host_config(network_mode="none"))
    assert container is not None
    cid = container["Id"]
    try:
        call("start python assembler", api.start, cid)
        status = dict(call("wait python assembler", api.wait, cid, timeout=300) or {})
        if status.get("StatusCode") != 0:
            logs = call("python assembler logs", api.logs, cid, stream=False)
            said = logs.decode(errors="replace") if isinstance(logs, bytes) else ""
            raise SandboxError(f"assembling python {VERSION} from {SOURCE_IMAGE} failed: {said.strip()[-300:]}")
        got = call("copy python out", api.get_archive, cid, "/rsi-py/python3.13")
        assert got is not None
        tree.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".assembling-", dir=tree.parent))
        tmp.chmod(0o755)  # the tree's top goes into sandboxes as DEST: readable by any user there
        try:
            with spool_chunks(got[0]) as spool:
                extract_dir_from_tar(spool, tmp)
            try:
                os.replace(tmp, tree)
            except OSError:
                if not tree.is_dir():  # another process put its tree there first: keep that one
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        call("remove python assembler", api.remove_container, cid, force=True, missing_ok=True)
