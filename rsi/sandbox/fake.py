"""A sandbox provider without Docker, for unit tests of trial logic.

A sandbox is a temp directory standing for the container root: sandbox path /x/y is
<root>/x/y, commands run with real `bash` in <root><workdir> with SANDBOX_ROOT=<root> set.
There is no isolation at all: commands can touch the host. Images are only names; a snapshot is
a copy of the tree. It passes the same conformance suite as the docker provider.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import shutil
import signal
import subprocess
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from rsi.sandbox.base import (
    LABEL_DRIVER,
    LABEL_JOB,
    ExecResult,
    GcReport,
    HostTree,
    ImageRef,
    SandboxError,
    SandboxSpec,
)


def _listing(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under root (relative) -> (mtime_ns, size, mode), for change detection."""
    out: dict[str, tuple[int, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            out[os.path.relpath(p, root)] = (st.st_mtime_ns, st.st_size, st.st_mode)
    return out


class FakeSandbox:
    def __init__(self, provider: FakeSandboxProvider, root: Path, spec: SandboxSpec) -> None:
        self._provider = provider
        self.root = root
        self.id = f"fake-{secrets.token_hex(6)}"
        self.workdir = spec.workdir
        self.labels = dict(spec.labels)
        self.network_of = spec.network_of  # the fake's commands share the host's network anyway
        self._env = dict(spec.env)
        self._stopped = False
        self._frozen = False
        self._paused = False
        self._main: subprocess.Popen[bytes] | None = None
        self._main_out: tuple[Any, Any] | None = None
        self.host_path(spec.workdir).mkdir(parents=True, exist_ok=True)
        self._baseline = _listing(root)
        if spec.staged is not None:
            with tarfile.open(fileobj=io.BytesIO(spec.staged), mode="r:") as tar:
                tar.extractall(root, filter="tar")
        if spec.command is not None:
            out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()  # noqa: SIM115 - closed in wait()
            self._main_out = (out, err)
            self._main = subprocess.Popen(
                ["bash", "-c", spec.command],
                cwd=root,
                env={**os.environ, **self._env, "SANDBOX_ROOT": str(root)},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )

    def host_path(self, path: str) -> Path:
        """Where sandbox path `path` (absolute, or relative to the workdir) lies on the host."""
        if not path.startswith("/"):
            path = f"{self.workdir.rstrip('/')}/{path}"
        return self.root / os.path.normpath(path).lstrip("/")

    def exec(
        self,
        cmd: str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        self._check()
        if self._frozen or self._paused:
            raise SandboxError(f"exec: sandbox {self.id} is {'frozen' if self._frozen else 'paused'}")
        cwd = self.host_path(workdir or self.workdir)
        full_env = {**os.environ, **self._env, **(env or {}), "SANDBOX_ROOT": str(self.root)}
        start = time.monotonic()
        if not cwd.is_dir():
            return ExecResult(126, "", f"cannot chdir to {workdir}: no such directory\n", duration=0.0)
        # Files, not pipes: a background child holding a pipe would keep us waiting.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                proc = subprocess.Popen(
                    ["bash", "-c", cmd],
                    cwd=cwd,
                    env=full_env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
            except FileNotFoundError as e:  # stopped under us (a cancel): what Docker reports as gone
                raise SandboxError(f"exec: sandbox {self.id} is gone ({e})") from None
            timed_out = False
            try:
                code = proc.wait(timeout=timeout)
                if code < 0:  # killed by a signal: report it the way bash does
                    code = 128 - code
            except subprocess.TimeoutExpired:
                timed_out = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                code = 137
            out.seek(0)
            err.seek(0)
            stdout = out.read().decode("utf-8", errors="replace")
            stderr = err.read().decode("utf-8", errors="replace")
        return ExecResult(code, stdout, stderr, timed_out=timed_out, duration=time.monotonic() - start)

    def put_file(self, dest: str, data: bytes, mode: int = 0o644) -> None:
        self._check()
        p = self.host_path(dest)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        p.chmod(mode)

    def put_dir(self, src: Path, dest: str) -> None:
        self._check()
        shutil.copytree(src, self.host_path(dest), symlinks=True, dirs_exist_ok=True)

    def get_file(self, path: str) -> bytes | None:
        self._check()
        p = self.host_path(path)
        return p.read_bytes() if p.is_file() else None

    def get_dir(self, src: str, dest: Path) -> bool:
        self._check()
        p = self.host_path(src)
        if not p.is_dir():
            return False
        shutil.copytree(p, dest, symlinks=True, dirs_exist_ok=True)
        return True

    def get_archive(self, path: str) -> bytes | None:
        self._check()
        p = self.host_path(path)
        if not (p.exists() or p.is_symlink()):
            return None
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(str(p), arcname=p.name)
        return buf.getvalue()

    def freeze(self) -> None:
        if self._main is not None and self._main.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._main.pid, signal.SIGKILL)
            self._main.wait()
        self._frozen = True

    def pause(self) -> None:
        """Commands refused until `resume`; processes already started are not halted (no cgroup here)."""
        self._check()
        self._paused = not self._frozen

    def resume(self) -> None:
        self._check()
        self._paused = False

    def wait(self, timeout: float) -> ExecResult:
        self._check()
        if self._main is None or self._main_out is None:
            raise SandboxError(f"sandbox {self.id} was not started with a command")
        start = time.monotonic()
        timed_out = False
        try:
            code = self._main.wait(timeout=timeout)
            if code < 0:
                code = 128 - code
        except subprocess.TimeoutExpired:
            timed_out = True
            code = 137
        # Like a container's end: whatever the command left running dies with it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._main.pid, signal.SIGKILL)
        self._main.wait()
        self._frozen = True
        out, err = self._main_out
        out.seek(0)
        err.seek(0)
        res = ExecResult(
            code,
            out.read().decode("utf-8", errors="replace"),
            err.read().decode("utf-8", errors="replace"),
            timed_out=timed_out,
            duration=time.monotonic() - start,
        )
        out.close()
        err.close()
        return res

    def changed_paths(self) -> list[str]:
        return sorted(self.changes())

    def changes(self) -> dict[str, int]:
        self._check()
        now = _listing(self.root)
        keys = set(now) | set(self._baseline)
        return {"/" + k: (1 if k not in self._baseline else 2 if k not in now else 0)
                for k in keys if now.get(k) != self._baseline.get(k)}

    def snapshot(self, labels: dict[str, str]) -> str:
        self._check()
        return self._provider._add_snapshot(self.root, {**self.labels, **labels})

    def stop(self) -> None:
        if self._stopped:
            return
        self.freeze()
        self._stopped = True
        shutil.rmtree(self.root, ignore_errors=True)
        self._provider._forget(self)

    def _check(self) -> None:
        if self._stopped:
            raise SandboxError(f"sandbox {self.id} was stopped")


class FakeSandboxProvider:
    """Local-directory sandboxes. `images` and `snapshots` are inspectable by tests."""

    name = "fake"

    def __init__(self, base_dir: Path | None = None, *, images: set[str] | None = None) -> None:
        """`images`: names that exist from the start (as if already built or pulled)."""
        self._base = Path(base_dir) if base_dir else Path(tempfile.mkdtemp(prefix="rsi-fake-"))
        self._base.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.images: set[str] = set(images or ())
        self.snapshots: dict[str, tuple[Path, dict[str, str]]] = {}
        self.live: dict[str, FakeSandbox] = {}
        self.builds = 0

    def ping(self) -> None:
        return None

    def image_id(self, tag: str) -> str | None:
        """Any image a fake task names "exists": the fake never builds FROM a base."""
        return f"fake:{tag}"

    def image_env(self, tag: str) -> dict[str, str]:
        return {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")}

    def image_labels(self, tag: str) -> dict[str, str]:
        return {}

    def image_release(self, tag: str) -> str:
        return ""

    def image_packages(self, tag: str) -> dict[str, str]:
        return {}

    def verifier_python(self, tag: str, version: str | None) -> HostTree | str:
        return "from the host (the fake sandbox runs commands on the host)"

    def ensure_image(
        self, env_dir: Path, env_digest: str, *, build_args: dict[str, str], timeout: float
    ) -> ImageRef:
        tag = f"rsi-env:{env_digest[:16]}"
        with self._lock:
            if tag in self.images:
                return ImageRef(tag=tag, built=False)
            self.images.add(tag)
            self.builds += 1
        return ImageRef(tag=tag, built=True)

    def start(self, spec: SandboxSpec) -> FakeSandbox:
        root = Path(tempfile.mkdtemp(prefix="sb-", dir=self._base))
        snap = self.snapshots.get(spec.image)
        if snap is not None:
            shutil.copytree(snap[0], root, symlinks=True, dirs_exist_ok=True)
        elif spec.image not in self.images:
            # Like docker with a missing local image: an infra error, not a task problem.
            shutil.rmtree(root, ignore_errors=True)
            raise SandboxError(f"create container from {spec.image}: not found (no such image)")
        sb = FakeSandbox(self, root, spec)
        with self._lock:
            self.live[sb.id] = sb
        return sb

    def remove_image(self, tag: str) -> None:
        with self._lock:
            self.images.discard(tag)
            snap = self.snapshots.pop(tag, None)
        if snap is not None:
            shutil.rmtree(snap[0], ignore_errors=True)

    def gc(self, live_jobs: set[str], *, scope: set[str] | None = None, driver: str | None = None) -> GcReport:
        report = GcReport()

        def doomed(labels: dict[str, str]) -> bool:
            job = labels.get(LABEL_JOB)
            mine = driver is None or labels.get(LABEL_DRIVER) == driver
            return (scope is None or job in scope) and job not in live_jobs and mine

        for sb in [s for s in list(self.live.values()) if doomed(s.labels)]:
            sb.stop()
            report.containers.append(sb.id)
        for tag, (_path, labels) in list(self.snapshots.items()):
            if doomed(labels):
                self.remove_image(tag)
                report.images.append(tag)
        return report

    def _add_snapshot(self, root: Path, labels: dict[str, str]) -> str:
        tag = f"rsi-snap:{secrets.token_hex(6)}"
        dest = Path(tempfile.mkdtemp(prefix="snap-", dir=self._base))
        shutil.copytree(root, dest, symlinks=True, dirs_exist_ok=True)
        with self._lock:
            self.snapshots[tag] = (dest, labels)
        return tag

    def _forget(self, sb: FakeSandbox) -> None:
        with self._lock:
            self.live.pop(sb.id, None)
