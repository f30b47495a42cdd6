"""The verify-time tool shim: what a Terminal-Bench 2.x `test.sh` fetches from the internet, provided offline.

Most TB 2.x verifiers start with `curl -LsSf https://astral.sh/uv/<v>/install.sh | sh`, then
`source $HOME/.local/bin/env` and `uvx -p 3.13 -w pytest==... pytest /tests/test_outputs.py`. On a host
whose only way out is a PyPI (and Debian) mirror the installer cannot be fetched, so before such a
`test.sh` runs rsi puts in the verifier's sandbox, without editing the task:

- `uv` and `uvx` from the PyPI `uv` wheel installed beside rsi, in SHIM_BIN (first on `PATH`) and
  where the installer puts them (`$HOME/.local/bin`, with the installer's `env` file);
- `curl` and `wget` wrappers in SHIM_BIN that answer a fetch of uv's installer with a stand-in
  script (it says what it is on stderr) and hand every other call to the real tool;
- `apt-get` / `apt` wrappers (apt_shim.py) that answer `update` and installs of what rsi or the image
  already provides (curl for uv's installer), and hand anything else to the real tool;
- the wheels of the pinned requirements the scripts ask uv (or pip) for (`uvx -w pytest==8.4.1`, `uv add`,
  `uv pip install`: verifier_needs.py), fetched once on the host (wheel_cache.py) and copied to
  WHEELS, with uv's offline settings (UV_OFFLINE, UV_NO_INDEX, UV_FIND_LINKS; PIP_NO_INDEX and
  PIP_FIND_LINKS for pip) when every requirement is served that way. A requirement that is not an exact
  pin cannot be served: then uv keeps its index (the host's settings are passed on, with its CA bundle as
  `SSL_CERT_FILE`), which a verifier without network cannot reach.

Python comes from the image when it has the version test.sh asks uv for (`-p 3.13` finds `python3.13`
on a python:3.13 image or on the stand-in `rsi sandbox build-base --as` makes for it); on an
image without it, the provider adds rsi's portable CPython 3.13 (portable_python.py) last on `PATH`.
The trial records that a shim was used and what it held (`extra["verifier_shim"]`), the Python too.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rsi.sandbox import apt_shim
from rsi.sandbox.base import HostTree
from rsi.sandbox.verifier_needs import VerifierNeeds, verifier_needs
from rsi.sandbox.wheel_cache import WheelSet

SHIM_DIR = "/usr/local/lib/rsi-shim"
SHIM_BIN = f"{SHIM_DIR}/bin"
SHIM_CA = f"{SHIM_DIR}/ca-certificates.crt"
WHEELS = f"{SHIM_DIR}/wheels"
HOST_CA_BUNDLES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
# Host settings that point uv at the mirror the host uses; passed on when set.
PASSED_ENV = ("UV_DEFAULT_INDEX", "UV_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_INSECURE_HOST",
              "UV_HTTP_TIMEOUT")

_INSTALLER_URL = re.compile(r"astral\.sh/uv|github\.com/astral-sh/uv/releases/\S*install\w*\.sh")
_USES_UV = re.compile(r"(^|[\s;&|(`])(uvx?)\s", re.MULTILINE)
# The interpreter version a script asks uv for: `-p 3.13`, `--python=3.13`, `--python cpython3.13`, UV_PYTHON=3.13.
_ASKS_PYTHON = re.compile(r"(?:\s(?:-p|--python)[ =]+[\"']?|UV_PYTHON=[\"']?)(?:cpython-?|python)?(3\.\d+)")

# Stand-in for uv's installer: uv is already in place, so it only says so (and where).
STAND_IN = """#!/bin/sh
# rsi verify-time shim: a stand-in for uv's installer (the real one cannot be fetched offline).
echo "rsi shim: uv {version} from the PyPI uv wheel is already installed in ${{HOME}}/.local/bin and {bin}; \
the installer was not fetched" >&2
exit 0
"""

# curl / wget: a fetch of uv's installer gets the stand-in; anything else runs the real tool.
WRAPPER = r"""#!/bin/sh
# rsi verify-time shim for {name}: answers a fetch of uv's installer offline, passes everything else on.
out=-
case "{name}" in wget) out="";; esac
hit=""
prev=""
for a in "$@"; do
  case "$prev" in -o|--output) out="$a";; esac
  case "{name}:$prev" in wget:-O|wget:--output-document) out="$a";; esac
  case "{name}:$a" in
    curl:-O|curl:--remote-name) out="";;
    wget:-qO-|wget:-O-) out=-;;
    wget:--output-document=*) out="${{a#--output-document=}}";;
  esac
  case "$a" in
    *astral.sh/uv*|*github.com/astral-sh/uv/releases/*install*.sh) hit="$a";;
  esac
  prev="$a"
done
if [ -n "$hit" ]; then
  echo "rsi shim: {name} $hit answered with rsi's offline stand-in for uv's installer" >&2
  [ -z "$out" ] && out=$(basename "$hit")
  if [ "$out" = - ]; then cat {dir}/uv-installer.sh; else cp {dir}/uv-installer.sh "$out"; fi
  exit 0
fi
IFS=:
for d in $PATH; do
  [ "$d" = "{bin}" ] && continue
  [ -x "$d/{name}" ] && exec "$d/{name}" "$@"
done
echo "{name}: command not found" >&2
exit 127
"""

# The installer's `env` file: puts $HOME/.local/bin first on PATH (sourced by test.sh).
ENV_FILE = """#!/bin/sh
# written by rsi's verify-time shim in place of uv's installer
case ":${PATH}:" in
  *:"$HOME/.local/bin":*) ;;
  *) export PATH="$HOME/.local/bin:$PATH" ;;
esac
"""

EXEC = """#!/bin/sh
exec {target} "$@"
"""


@dataclass
class Shim:
    """The files to put in the verifier's sandbox, the environment to add, and what to record."""

    files: list[tuple[str, bytes, int]] = field(default_factory=list)  # (absolute path, data, mode)
    env: dict[str, str] = field(default_factory=dict)
    record: dict[str, object] = field(default_factory=dict)
    trees: list[HostTree] = field(default_factory=list)  # host directories to copy in (a Python)


def wants_shim(test_sh: str) -> bool:
    """Whether a `test.sh` fetches uv's installer or calls uv / uvx."""
    return bool(_INSTALLER_URL.search(test_sh) or _USES_UV.search(test_sh))


def offline_env(needs: VerifierNeeds, wheels: WheelSet | None) -> dict[str, str]:
    """uv's (and pip's) settings that serve the verifier's requirements from WHEELS and nothing else; empty
    when some requirement cannot be served so (not pinned, or its wheels could not be fetched)."""
    if needs.unpinned or (needs.pinned and wheels is None):
        return {}
    env = {"UV_OFFLINE": "1", "UV_NO_INDEX": "1", "UV_PYTHON_DOWNLOADS": "never"}
    if wheels is not None:
        env["UV_FIND_LINKS"] = WHEELS
        if needs.pip:
            env.update({"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": WHEELS})
    return env


@functools.cache
def host_uv() -> tuple[Path, Path, str] | None:
    """(uv, uvx, version) from the `uv` wheel installed beside rsi (else `uv` on PATH), or None."""
    uv: Path | None = None
    try:
        import uv as uv_pkg  # the PyPI wheel's own locator

        uv = Path(uv_pkg.find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        uv = Path(found) if found else None
    if uv is None or not (uv.parent / "uvx").is_file():
        return None
    try:
        out = subprocess.run([str(uv), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = out.split()[1] if len(out.split()) > 1 else "unknown"
    return uv, uv.parent / "uvx", version


def host_ca_bundle() -> Path | None:
    for name in (os.environ.get("SSL_CERT_FILE"), *HOST_CA_BUNDLES):
        if name and Path(name).is_file():
            return Path(name)
    return None


def asked_python(test_sh: str) -> str | None:
    """The Python version a script asks uv for (the first one named), or None."""
    m = _ASKS_PYTHON.search(test_sh)
    return m.group(1) if m else None


PythonFor = Callable[[str | None], "HostTree | str"]


def build_shim(test_sh: str, *, home: str, image_path: str, host_env: dict[str, str] | None = None,
               python: PythonFor | None = None, wheels: WheelSet | str | None = None,
               needs: VerifierNeeds | None = None) -> Shim | None:
    """The shim for one verifier run, or None when `test.sh` needs none (it neither uses uv nor installs
    anything with pip or apt).

    `wheels` are the fetched wheels of the scripts' pinned requirements (`needs`, read from `test_sh`
    when not given), or why there are none.

    `python(version)` gives the interpreter to add when the image lacks the version test.sh asks for
    (the provider's `verifier_python` for the task's image), or says why none is added.

    When it needs one and the host has no uv wheel, the record says so (and no file is added), so
    the trial shows why `uvx` was missing rather than failing unexplained.
    """
    needs = needs if needs is not None else verifier_needs(test_sh)
    if not (wants_shim(test_sh) or needs.requirements or needs.apt):
        return None
    uv = host_uv()
    if uv is None:
        return Shim(record={"used": False, "why": "test.sh uses uv, but the host has no uv wheel "
                                                  "(pip install uv); nothing was provided"})
    uv_bin, uvx_bin, version = uv
    local_bin = f"{home.rstrip('/')}/.local/bin"
    files: list[tuple[str, bytes, int]] = [
        (f"{SHIM_BIN}/uv", uv_bin.read_bytes(), 0o755),
        (f"{SHIM_BIN}/uvx", uvx_bin.read_bytes(), 0o755),
        (f"{SHIM_DIR}/uv-installer.sh", STAND_IN.format(version=version, bin=SHIM_BIN).encode(), 0o755),
        (f"{local_bin}/uv", EXEC.format(target=f"{SHIM_BIN}/uv").encode(), 0o755),
        (f"{local_bin}/uvx", EXEC.format(target=f"{SHIM_BIN}/uvx").encode(), 0o755),
        (f"{local_bin}/env", ENV_FILE.encode(), 0o644),
    ]
    for name in ("curl", "wget"):
        files.append((f"{SHIM_BIN}/{name}", WRAPPER.format(name=name, dir=SHIM_DIR, bin=SHIM_BIN).encode(), 0o755))
    provided = sorted({"curl", "wget"} - needs.other_use)
    for name in apt_shim.NAMES:
        text = apt_shim.wrapper(name, shim_dir=SHIM_DIR, shim_bin=SHIM_BIN, provided=provided)
        files.append((f"{SHIM_BIN}/{name}", text.encode(), 0o755))
    env = {"PATH": f"{SHIM_BIN}:{image_path}" if image_path else SHIM_BIN}
    trees: list[HostTree] = []
    served = wheels if isinstance(wheels, WheelSet) else None
    if served is not None:
        trees.append(HostTree(served.dir, WHEELS, "", f"{len(served.files)} wheels"))
    offline = offline_env(needs, served)
    got = python(asked_python(test_sh)) if python is not None else "from the image (rsi added none)"
    if isinstance(got, HostTree):
        trees.append(got)
        env["PATH"] += f":{got.path_dir}"  # last: an interpreter of the image's own always wins
    ca = host_ca_bundle()
    if ca is not None:
        files.append((SHIM_CA, ca.read_bytes(), 0o644))
        env["SSL_CERT_FILE"] = SHIM_CA
    host = os.environ if host_env is None else host_env
    env.update({k: host[k] for k in PASSED_ENV if host.get(k) and not offline})
    env.update(offline)
    record: dict[str, object] = {
        "used": True,
        "uv": f"uv {version} from the PyPI uv wheel ({uv_bin}), in {SHIM_BIN} (first on PATH) and {local_bin}",
        "installer": "fetches of uv's installer (curl/wget) answered by rsi's stand-in script; other calls "
                     "go to the real tool",
        "ca_bundle": str(ca) if ca is not None else None,
        "python": got if isinstance(got, str) else got.note,
        "env_passed": sorted(k for k in env if k in PASSED_ENV),
        "apt": f"apt-get/apt update answered offline; install answered for {', '.join(provided) or 'nothing rsi '}"
               "provides and for what the image already has; anything else goes to the real apt-get",
        "requirements": needs.pinned + [r.text for r in needs.unpinned],
        "wheels": served.record() if served is not None else wheels,
        "offline": (f"uv runs offline ({', '.join(sorted(offline))})"
                    + (f", served from {WHEELS}" if served is not None else "") if offline else
                    "uv keeps its index: " + "; ".join(needs.unprovided(lambda _p: True)
                                                       or [f"the wheels are missing: {wheels}"])),
    }
    return Shim(files=files, env=env, record=record, trees=trees)
