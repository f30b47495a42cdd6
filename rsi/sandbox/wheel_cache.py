"""Wheels of a verifier's pinned test tools, fetched once on the host and served to the verifier offline.

A Terminal-Bench verifier asks uv for `pytest==8.4.1`, `pytest-json-ctrf==0.3.5`... The host reaches a
package index (a PyPI mirror, through pip's own configuration: pip.conf, PIP_* variables, uv's UV_INDEX*
when pip has none), the verifier does not. `provide_wheels` runs `pip download --only-binary=:all:` for
the verifier's platform (manylinux, the host's architecture) and each Python version the script asks uv
for (else 3.10-3.13), dependencies included, into `<cache_root>/<key>/`, keyed by the requirement set.
For a uv project (`uv add`, whose lock resolves for every platform), the packages only other platforms
need (colorama on Windows) are added from `uv pip compile --universal`. A set fetched once is reused by
every later trial and job; the caller passes `cache_root` (the workspace's cache seam).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

from rsi.core.digest import digest_obj
from rsi.core.errors import RsiError

DEFAULT_PYTHONS = ("3.10", "3.11", "3.12", "3.13")
MANIFEST = "rsi-wheels.json"
FETCH_TIMEOUT = 600
_lock = threading.Lock()


class WheelFetchError(RsiError):
    """The host could not fetch a verifier's pinned requirements (pip's own message, shortened)."""


@dataclass(frozen=True)
class WheelSet:
    """A ready directory of wheels for one requirement set."""

    dir: Path
    key: str
    requirements: list[str]
    pythons: list[str]
    files: list[str]
    fetched: bool  # fetched by this call (False: from the cache)
    notes: list[str] = field(default_factory=list)

    def record(self) -> dict[str, object]:
        return {
            "requirements": self.requirements,
            "wheels": self.files,
            "pythons": self.pythons,
            "source": (f"fetched now on the host into {self.dir}" if self.fetched
                       else f"from the host's cache {self.dir}"),
            **({"notes": self.notes} if self.notes else {}),
        }


def platforms(machine: str | None = None) -> list[str]:
    """The manylinux tags a verifier container of the host's architecture runs (glibc 2.17-2.28)."""
    arch = _arch(machine)
    return [f"manylinux_2_{v}_{arch}" for v in range(28, 16, -1)] + [f"manylinux2014_{arch}"]


def wheel_key(requirements: list[str], pythons: list[str], project: bool, machine: str | None = None) -> str:
    return digest_obj({"requirements": sorted(requirements), "pythons": sorted(pythons), "project": project,
                       "platforms": platforms(machine), "v": 1})[:16]


def _load(d: Path) -> dict[str, object] | None:
    try:
        data = json.loads((d / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    files = data.get("files")
    if not isinstance(files, list) or not all((d / str(f)).is_file() for f in files):
        return None
    return dict(data)


def _pip_config(env: dict[str, str]) -> dict[str, str]:
    """pip's effective settings (`pip config list`: files and PIP_* variables), as key -> value."""
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                             timeout=60, env=env).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    conf: dict[str, str] = {}
    for line in out.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            conf[k.split(".", 1)[-1]] = v.strip().strip("'\"")
    return conf


_UV_INDEX_ENV = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_INDEX", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS")


def _pip_index_args(env: dict[str, str], pip_conf: dict[str, str]) -> list[str]:
    """uv's index settings for pip, when the host gives uv an index and pip none (pip's own config wins)."""
    if any(k in pip_conf for k in ("index-url", "extra-index-url")):
        return []
    args: list[str] = []
    index = env.get("UV_DEFAULT_INDEX") or env.get("UV_INDEX_URL")
    if index:
        args += ["--index-url", index]
    for extra in (env.get("UV_INDEX", "") + " " + env.get("UV_EXTRA_INDEX_URL", "")).split():
        args += ["--extra-index-url", extra.split("=", 1)[-1]]
    return args


def _uv_index_args(env: dict[str, str], pip_conf: dict[str, str]) -> list[str]:
    """pip's index settings for uv's resolution, when the host gives uv none (uv's own settings win), so
    both resolve against the same mirror; pip picks the best version across indexes, and so does uv here."""
    if any(env.get(k) for k in _UV_INDEX_ENV):
        return []
    args: list[str] = []
    if pip_conf.get("index-url"):
        args += ["--index-url", pip_conf["index-url"]]
    for extra in pip_conf.get("extra-index-url", "").split():
        args += ["--extra-index-url", extra]
    for links in pip_conf.get("find-links", "").split():
        args += ["--find-links", links]
    return args + (["--index-strategy", "unsafe-best-match"] if args else [])


def _run(cmd: list[str], env: dict[str, str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT, env=env, input=stdin)
    except (OSError, subprocess.TimeoutExpired) as e:
        return subprocess.CompletedProcess(cmd, 1, "", str(e))


def _said(res: subprocess.CompletedProcess[str]) -> str:
    lines = [ln.strip() for ln in (res.stderr or res.stdout).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith(("ERROR", "error", "cause", "Because"))]
    return " ".join((errors or lines)[-3:])[:400]


@dataclass
class _Host:
    """How this host resolves (uv) and downloads (pip), with the index settings it has."""

    env: dict[str, str]
    uv: str
    pip_index: list[str]
    uv_index: list[str]

    @classmethod
    def of(cls, uv: Path, host_env: dict[str, str] | None) -> _Host:
        env = dict(os.environ if host_env is None else host_env)
        conf = _pip_config(env)
        return cls(env, str(uv), _pip_index_args(env, conf), _uv_index_args(env, conf))

    def compile(self, requirements: list[str], python: str, *, universal: bool) -> list[str]:
        """Exact pins of the full resolution, markers evaluated for the verifier (or kept, `universal`)."""
        where = ["--universal"] if universal else ["--python-platform", f"{_arch()}-manylinux_2_28"]
        res = _run([self.uv, "pip", "compile", *where, "--python-version", python, "--no-header", "--no-annotate",
                    "--quiet", *self.uv_index, "-"], self.env, stdin="\n".join(requirements) + "\n")
        if res.returncode != 0:
            raise WheelFetchError(f"resolving {' '.join(requirements)} for python {python} failed: {_said(res)}")
        pins = [ln.split(";", 1)[0].strip() for ln in res.stdout.splitlines()]
        return [p for p in pins if "==" in p and not p.startswith("#")]

    def download(self, pins: list[str], dest: Path, python: str | None) -> subprocess.CompletedProcess[str]:
        target = [] if python is None else [
            "--python-version", python, "--implementation", "cp", *[a for p in platforms() for a in ("--platform", p)]]
        return _run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", *target, "-q",
                     "-d", str(dest), *self.pip_index, *pins], self.env)


def _norm(pin: str) -> str:
    name, _, version = pin.partition("==")
    return f"{canonicalize_name(name)}=={version.strip()}"


def _pure(d: Path) -> set[str]:
    """`name==version` of the wheels in `d` that run on every Python 3 (no need to fetch them again)."""
    out = set()
    for p in d.glob("*.whl"):
        name, version, _, tags = parse_wheel_filename(p.name)
        if all(t.abi == "none" and t.platform == "any" for t in tags):
            out.add(f"{name}=={version}")
    return out


def _arch(machine: str | None = None) -> str:
    m = (machine or platform.machine()).lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(m, m)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with _lock, open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def provide_wheels(requirements: list[str], *, pythons: list[str], project: bool, cache_root: Path, uv: Path | None,
                   fetch: bool = True, host_env: dict[str, str] | None = None) -> WheelSet | None:
    """The wheels for `requirements` (exact pins) and their dependencies: from the cache, else fetched now
    (when `fetch`; None when not cached and not fetching) with the host's `uv` (resolution) and pip
    (download). Raises WheelFetchError when they cannot get them."""
    asked = sorted(set(pythons))
    targets = asked or list(DEFAULT_PYTHONS)
    key = wheel_key(requirements, targets, project)
    d = cache_root / key
    ready = _load(d)
    if ready is None and not fetch:
        return None
    fetched = False
    if ready is None:
        with _locked(cache_root / f"{key}.lock"):
            ready = _load(d)
            if ready is None:
                if uv is None:
                    raise WheelFetchError("the host has no uv wheel to resolve the verifier's requirements with "
                                          "(pip install uv)")
                ready = _fetch(requirements, targets, bool(asked), project, d, _Host.of(uv, host_env))
                fetched = True
    return WheelSet(d, key, sorted(requirements), _strs(ready.get("pythons")), _strs(ready.get("files")), fetched,
                    _strs(ready.get("notes")))


def _strs(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _fetch(requirements: list[str], targets: list[str], strict: bool, project: bool, d: Path,
           host: _Host) -> dict[str, object]:
    """Resolve with uv for each target Python (markers evaluated for it), download every pin with pip."""
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".fetching-", dir=d.parent))
    try:
        got: list[str] = []
        notes: list[str] = []
        for v in targets:
            try:
                pins = [p for p in host.compile(requirements, v, universal=False) if _norm(p) not in _pure(tmp)]
                res = host.download(pins, tmp, v) if pins else None
                if res is not None and res.returncode != 0:
                    raise WheelFetchError(f"pip download {' '.join(pins)} for python {v} failed: {_said(res)}")
                got.append(v)
            except WheelFetchError as e:
                if strict:
                    raise
                notes.append(f"python {v} skipped: {e}")
        if not got:
            raise WheelFetchError(notes[-1] if notes else f"nothing fetched for {' '.join(requirements)}")
        if project:  # uv's lock resolves for every platform: add what only the others need (colorama)
            have = {str(canonicalize_name(parse_wheel_filename(p.name)[0])) for p in tmp.glob("*.whl")}
            try:
                extra = [p for p in host.compile(requirements, min(got, key=lambda v: int(v.split(".")[1])),
                                                 universal=True)
                         if str(canonicalize_name(p.split("==", 1)[0])) not in have]
            except WheelFetchError as e:
                extra, notes = [], [*notes, f"no universal extras: {e}"]
            for pin in extra:
                if host.download([pin], tmp, None).returncode != 0:
                    notes.append(f"{pin} (for other platforms in uv's lock) not fetched")
        files = sorted(p.name for p in tmp.glob("*.whl"))
        manifest: dict[str, object] = {
            "requirements": sorted(requirements), "pythons": got, "files": files, "notes": notes,
            "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2))
        tmp.chmod(0o755)
        if d.exists():
            shutil.rmtree(d)
        os.replace(tmp, d)
        return manifest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
