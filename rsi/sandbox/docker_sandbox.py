"""One running docker container as a `Sandbox`: exec with timeouts, files in and out, changed paths,
freeze, snapshot, and telling a container the agent wrecked from a daemon hiccup.

Each daemon call is retried on transient errors and then surfaces as `SandboxError` (infra); a
container that the agent's own commands brought down surfaces as `SandboxBroken` (its outcome).
"""
from __future__ import annotations

import os
import secrets
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from rsi.core.trial import ErrorType
from rsi.sandbox.base import (
    LABEL_KIND,
    ExecResult,
    SandboxBroken,
    SandboxError,
)
from rsi.sandbox.docker_events import EventWatch
from rsi.sandbox.docker_io import (
    EXEC_WRAPPER,
    RETRY_ATTEMPTS,
    ExecStream,
    call,
    extract_dir_from_tar,
    is_missing_container,
    new_marker,
    read_file_from_tar,
    spool_chunks,
    tar_dir,
    tar_one_file,
)
from rsi.sandbox.overlay_diff import upper_changes

SNAP_REPO = "rsi-snap"
KILL_AFTER_S = 2.0  # matches `timeout -k 2` in EXEC_WRAPPER
HOST_GRACE_S = 10.0  # extra wait on the host before giving up on an exec's stream
INIT_MOUNTPOINTS = ("/sbin/docker-init", "/usr/sbin/docker-init")


class DockerSandbox:
    """One running container. Not thread-safe per instance; use one sandbox per trial thread."""

    def __init__(self, api: docker.APIClient, container_id: str, workdir: str, output_cap: int,
                 watch: EventWatch | None = None) -> None:
        self._api = api
        self.id = container_id
        self.workdir = workdir
        self._output_cap = output_cap
        self._stopped = False
        self._frozen = False
        self._paused = False
        self._watch = watch  # who ended the container, when it is found ended (docker_events.py)
        self._started_at = time.time()
        self._killed_at: float | None = None  # when rsi itself last sent the container a kill

    def __repr__(self) -> str:
        return f"DockerSandbox({self.id[:12]})"

    # -- commands

    def exec(
        self,
        cmd: str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run `cmd` with `bash -c` (not a login shell: Debian's /etc/profile would reset the image's
        PATH). On timeout TERM then KILL reach the command's process group; timed_out is True."""
        marker = new_marker()
        secs = "" if timeout is None else f"{max(timeout, 0.001):.3f}"
        argv = ["bash", "-c", EXEC_WRAPPER, "rsi-exec", cmd, secs, marker.decode()]
        start = time.monotonic()
        if self._frozen or self._paused:
            raise SandboxError(f"exec: sandbox {self.id[:12]} is {'frozen' if self._frozen else 'paused'}")
        try:
            created = self._call(
                "exec",
                self._api.exec_create,
                self.id,
                argv,
                stdout=True,
                stderr=True,
                workdir=workdir or self.workdir,
                environment=[f"{k}={v}" for k, v in (env or {}).items()] or None,
            )
            assert created is not None
            exec_id = created["Id"]
            # Not retried: a second start could run the command twice.
            sock = self._call("exec", self._api.exec_start, exec_id, socket=True, retry=False)
        except SandboxError as e:
            self._raise_if_broken(e)
            raise
        stream = ExecStream(sock, marker, self._output_cap)
        deadline = None if timeout is None else start + timeout + KILL_AFTER_S + HOST_GRACE_S
        try:
            stream.pump(deadline)
        finally:
            stream.close()
        duration = time.monotonic() - start
        code = stream.out.code
        if code is None:  # no marker: the wrapper died (OOM, killed) or the exec never started
            info = self._call("exec inspect", self._api.exec_inspect, exec_id)
            assert info is not None
            code = info.get("ExitCode")
            if code is None or info.get("Running"):
                code = 137 if stream.deadline_hit else -1
            if not self._stopped and not self._frozen:
                self._raise_if_broken(None)
        timed_out = stream.deadline_hit or (
            timeout is not None and code in (124, 137) and duration >= timeout * 0.95
        )
        return ExecResult(
            exit_code=int(code),
            stdout=stream.out.text(),
            stderr=stream.err.text(),
            timed_out=timed_out,
            duration=duration,
        )

    # -- files

    def put_file(self, dest: str, data: bytes, mode: int = 0o644) -> None:
        dest = self._abs(dest)
        self._put("put_file", dest, tar_one_file(dest, data, mode))

    def put_dir(self, src: Path, dest: str) -> None:
        dest = self._abs(dest)
        with tar_dir(Path(src), dest) as archive:
            self._put("put_dir", dest, archive.read())

    def _put(self, what: str, dest: str, archive: bytes) -> None:
        try:
            self._call(what, self._api.put_archive, self.id, "/", archive)
        except SandboxError as e:
            self._raise_if_broken(e)
            cause = e.__cause__
            if isinstance(cause, docker.errors.APIError) and cause.status_code and 400 <= cause.status_code < 500:
                # The container is fine but the daemon refuses the write (a parent the agent turned
                # into a file, a read-only mount it made): the agent's doing, not infra.
                raise SandboxBroken(
                    ErrorType.AGENT_BROKE_SANDBOX, f"the daemon refused to write {dest}: {cause.explanation or cause}"
                ) from e
            raise

    def get_archive(self, path: str) -> bytes | None:
        got = self._get_archive("get_archive", self._abs(path).rstrip("/") or "/")
        if got is None:
            return None
        with got:
            return bytes(got.read())

    def get_file(self, path: str) -> bytes | None:
        path = self._abs(path)
        for _ in range(8):  # follow a few symlinks; the archive holds the link itself
            got = self._get_archive("get_file", path)
            if got is None:
                return None
            with got:
                data, link = read_file_from_tar(got)
            if link is None:
                return data
            path = (
                link if link.startswith("/") else os.path.normpath(os.path.join(os.path.dirname(path), link))
            )
        return None

    def get_dir(self, src: str, dest: Path) -> bool:
        src = self._abs(src).rstrip("/") or "/"
        got = self._get_archive("get_dir", src)
        if got is None:
            return False
        with got:
            extract_dir_from_tar(got, Path(dest))
        return True

    def _get_archive(self, what: str, path: str) -> Any:
        def fetch() -> Any:
            try:
                stream, _stat = self._api.get_archive(self.id, path)
                return spool_chunks(stream)
            except docker.errors.NotFound as e:
                if is_missing_container(e):
                    raise
                return None

        return self._call(what, fetch)

    # -- state

    def changed_paths(self) -> list[str]:
        return sorted(self.changes())

    def changes(self) -> dict[str, int]:
        changes = self._changes_from_upper_dir()
        if changes is None:
            diff = self._call("diff", self._api.diff, self.id) or []
            changes = {str(c["Path"]): int(c.get("Kind", 0)) for c in diff}
        return _without_init_mountpoint(changes)

    def _changes_from_upper_dir(self) -> dict[str, int] | None:
        """The fast path of `changed_paths` (see overlay_diff.py); None when it does not apply."""
        info = self._call("inspect", self._api.inspect_container, self.id) or {}
        driver = info.get("GraphDriver") or {}
        data = driver.get("Data") or {}
        upper, lower = data.get("UpperDir"), data.get("LowerDir") or ""
        if driver.get("Name") != "overlay2" or not upper or not os.access(upper, os.R_OK | os.X_OK):
            return None
        try:
            return upper_changes(upper, [p for p in lower.split(":") if p])
        except OSError:
            return None

    def freeze(self) -> None:
        """Kill every process (the init and all it reaped) and wait; the filesystem stays."""
        if self._frozen or self._stopped:
            return
        if self._paused:  # a kill reaches a paused container's processes too
            self._paused = False
            call(f"freeze {self.id[:12]}", self._kill_and_wait)
            self._frozen = True
            return
        self._raise_if_broken(None)  # exited before we froze it: the agent's commands did that
        res = call(f"freeze {self.id[:12]}", self._kill_and_wait) or {}
        # Our SIGKILL ends the init with 137. Any other end means the container was already going
        # down on its own (the agent's `kill 1` is asynchronous): the agent's doing, not a clean stop.
        code = res.get("StatusCode")
        if code is not None and code != 137:
            self._frozen = False
            self._raise_if_broken(None, exited_anyway=True)
        self._frozen = True

    def pause(self) -> None:
        """`docker pause`: every process halted in place (cgroup freezer), the filesystem readable."""
        if self._paused or self._frozen or self._stopped:
            return
        self._raise_if_broken(None)  # exited before we paused it: the agent's commands did that
        try:
            self._call("pause", self._api.pause, self.id)
        except SandboxError:
            self._raise_if_broken(None, exited_anyway=self._exited())
            raise
        self._paused = True

    def resume(self) -> None:
        """`docker unpause`: what the agent left running goes on (its services answer again)."""
        if not self._paused or self._stopped:
            return
        self._call("unpause", self._api.unpause, self.id)
        self._paused = False

    def _exited(self) -> bool:
        info = self._call("inspect", self._api.inspect_container, self.id) or {}
        return not (info.get("State") or {}).get("Running", False)

    def _kill_and_wait(self) -> dict[str, Any]:
        try:
            self._killed_at = time.time()
            self._api.kill(self.id)
        except docker.errors.APIError as e:
            if e.status_code != 409:  # 409: not running (exited on its own) - already frozen
                raise
        return dict(self._api.wait(self.id, timeout=30) or {})

    def wait(self, timeout: float) -> ExecResult:
        """Wait for the main command (spec.command) to exit; kill it after `timeout`."""
        start = time.monotonic()
        timed_out = False
        try:
            res = self._api.wait(self.id, timeout=max(1, int(timeout + 0.999)))
            code = int(res.get("StatusCode", -1))
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            timed_out = True
            call(f"kill {self.id[:12]}", self._kill_and_wait)
            code = 137
        except docker.errors.DockerException as e:
            raise SandboxError(f"wait for {self.id[:12]}: {e}") from e
        self._frozen = True
        duration = time.monotonic() - start
        stdout = self._logs(stdout=True)
        stderr = self._logs(stdout=False)
        return ExecResult(exit_code=code, stdout=stdout, stderr=stderr, timed_out=timed_out, duration=duration)

    def _logs(self, *, stdout: bool) -> str:
        def read() -> str:
            kept = bytearray()
            total = 0
            for chunk in self._api.logs(self.id, stdout=stdout, stderr=not stdout, stream=True, follow=False):
                total += len(chunk)
                if len(kept) < self._output_cap:
                    kept += chunk[: self._output_cap - len(kept)]
            text = kept.decode("utf-8", errors="replace")
            if total > self._output_cap:
                text += f"\n[rsi: {total - self._output_cap} more bytes of output not kept]\n"
            return text

        return str(self._call("logs", read))

    def _raise_if_broken(self, cause: SandboxError | None, *, exited_anyway: bool = False) -> None:
        """If the container is no longer running and we did not stop it, the agent did: say how."""
        if self._stopped or self._frozen:
            return
        try:
            info = self._call("inspect", self._api.inspect_container, self.id)
        except SandboxError:
            if cause is not None:
                return  # gone or unreachable: infra, as the caller says
            raise  # nothing failed yet, but the daemon cannot say what the container did: infra
        state = info.get("State") or {}
        if exited_anyway:
            state = {**state, "Running": False}
        if state.get("Running"):
            text = str(cause or "").lower()
            if "resource temporarily unavailable" in text or "cannot allocate memory" in text:
                raise SandboxBroken(
                    ErrorType.AGENT_BROKE_SANDBOX,
                    "the agent's processes exhausted the sandbox's pids or memory; the daemon cannot start a command",
                ) from cause
            return
        self._frozen = True
        outside = (self._watch.ended_from_outside(self.id, self._started_at, self._killed_at)
                   if self._watch is not None else None)
        if outside is not None:
            raise SandboxBroken(
                ErrorType.SANDBOX_ERROR,
                f"the sandbox was stopped from outside during the agent's commands: {outside}",
            ) from cause
        if state.get("OOMKilled"):
            raise SandboxBroken(
                ErrorType.AGENT_OUT_OF_MEMORY, "the sandbox ran out of memory and its init was killed"
            ) from cause
        if state.get("ExitCode") == 137:  # SIGKILL: a namespace's init cannot get it from inside its namespace
            raise SandboxBroken(
                ErrorType.SANDBOX_ERROR,
                "the sandbox was killed from outside (SIGKILL, not out of memory) during the agent's commands",
            ) from cause
        raise SandboxBroken(
            ErrorType.AGENT_BROKE_SANDBOX,
            f"the sandbox's init exited (code {state.get('ExitCode')}) during the agent's commands",
        ) from cause

    def snapshot(self, labels: dict[str, str]) -> str:
        tag = secrets.token_hex(6)
        conf = {"Labels": {**labels, LABEL_KIND: "snapshot"}, "Cmd": ["sleep", "infinity"]}
        self._call("snapshot", self._api.commit, self.id, repository=SNAP_REPO, tag=tag, conf=conf)
        return f"{SNAP_REPO}:{tag}"

    def stop(self) -> None:
        if self._stopped:
            return
        call("stop", self._api.remove_container, self.id, force=True, missing_ok=True)
        self._stopped = True

    # -- helpers

    def _abs(self, path: str) -> str:
        return path if path.startswith("/") else f"{self.workdir.rstrip('/')}/{path}"

    def _call(self, what: str, fn: Any, *args: Any, retry: bool = True, **kwargs: Any) -> Any:
        if self._stopped:
            raise SandboxError(f"{what}: sandbox {self.id[:12]} was stopped")
        return call(f"{what} in {self.id[:12]}", fn, *args, attempts=RETRY_ATTEMPTS if retry else 1, **kwargs)


def _without_init_mountpoint(changes: dict[str, int]) -> dict[str, int]:
    """Drop the empty file docker creates to mount its init, and the directories it "changed".

    Left in, every trial would show a change under /usr/sbin and trip the tamper check. A real
    change inside those directories still shows as its own path.
    """
    hits = [p for p in INIT_MOUNTPOINTS if p in changes]
    for p in hits:
        del changes[p]
        parent = os.path.dirname(p)
        while parent not in ("", "/"):
            if changes.get(parent) == 0:  # Kind 0 = modified
                del changes[parent]
            parent = os.path.dirname(parent)
    return changes


