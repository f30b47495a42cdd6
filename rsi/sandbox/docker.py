"""The docker sandbox provider: task images built once per environment digest, one container per sandbox.

Every container runs `sleep infinity` under docker's init (images made by `docker import` have no
CMD, and the init reaps what agents leave behind so zombies do not eat the pids limit), with the
task's cpu/memory/pids limits, no network unless asked, and rsi labels so `gc` finds leftovers.
Each daemon call is retried on transient errors and then surfaces as `SandboxError` (infra).
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from rsi.core.trial import ErrorType
from rsi.sandbox.base import (
    LABEL_JOB,
    LABEL_KIND,
    BuildError,
    ExecResult,
    GcReport,
    ImageRef,
    SandboxBroken,
    SandboxError,
    SandboxSpec,
)
from rsi.sandbox.docker_build import build_image
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

ENV_REPO = "rsi-env"
SNAP_REPO = "rsi-snap"
KILL_AFTER_S = 2.0  # matches `timeout -k 2` in EXEC_WRAPPER
HOST_GRACE_S = 10.0  # extra wait on the host before giving up on an exec's stream
DEFAULT_OUTPUT_CAP = 8 << 20  # bytes kept per stream per exec
INIT_MOUNTPOINTS = ("/sbin/docker-init", "/usr/sbin/docker-init")

# Shared by every provider instance in the process so two instances never build one digest twice.
_build_locks: dict[str, threading.Lock] = {}
_build_locks_guard = threading.Lock()


def env_image_tag(env_digest: str) -> str:
    return f"{ENV_REPO}:{env_digest[:16]}"


class DockerSandbox:
    """One running container. Not thread-safe per instance; use one sandbox per trial thread."""

    def __init__(self, api: docker.APIClient, container_id: str, workdir: str, output_cap: int) -> None:
        self._api = api
        self.id = container_id
        self.workdir = workdir
        self._output_cap = output_cap
        self._stopped = False
        self._frozen = False

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
        if self._frozen:
            raise SandboxError(f"exec: sandbox {self.id[:12]} is frozen")
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
        self._raise_if_broken(None)  # exited before we froze it: the agent's commands did that
        res = call(f"freeze {self.id[:12]}", self._kill_and_wait) or {}
        # Our SIGKILL ends the init with 137. Any other end means the container was already going
        # down on its own (the agent's `kill 1` is asynchronous): the agent's doing, not a clean stop.
        code = res.get("StatusCode")
        if code is not None and code != 137:
            self._frozen = False
            self._raise_if_broken(None, exited_anyway=True)
        self._frozen = True

    def _kill_and_wait(self) -> dict[str, Any]:
        try:
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
            info = self._api.inspect_container(self.id)
        except docker.errors.DockerException:
            return  # gone or unreachable: infra, as the caller says
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
        if state.get("OOMKilled"):
            raise SandboxBroken(
                ErrorType.AGENT_OUT_OF_MEMORY, "the sandbox ran out of memory and its init was killed"
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


def _without_init_mountpoint(changes: dict[str, int]) -> list[str]:
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
    return sorted(changes)


class DockerSandboxProvider:
    """Sandboxes as local Docker containers, through the docker SDK's low-level API."""

    name = "docker"

    def __init__(
        self,
        client: docker.DockerClient | None = None,
        *,
        timeout: float = 300.0,
        use_init: bool = True,
        output_cap: int = DEFAULT_OUTPUT_CAP,
    ) -> None:
        self._client = client
        self._timeout = timeout
        self._use_init = use_init
        self._output_cap = output_cap
        self._lock = threading.Lock()

    @property
    def client(self) -> docker.DockerClient:
        """The SDK client, made on first use so building a provider never needs a daemon."""
        with self._lock:
            if self._client is None:
                self._client = call("connect to docker", docker.from_env, timeout=int(self._timeout))
            assert self._client is not None
            return self._client

    @property
    def api(self) -> docker.APIClient:
        return self.client.api

    def ping(self) -> None:
        """Raise one readable SandboxError, with the fix, if the daemon does not answer."""
        try:
            call("ping docker", self.api.ping)
        except SandboxError as e:
            reason = str(e).split("(Caused by")[0].strip().rstrip(":")[:160]
            raise SandboxError(
                f"the Docker daemon does not answer ({reason}); start it with `dockerd &` "
                "(or `scripts/setup.sh`), then check with `rsi doctor`"
            ) from e

    # -- images

    def image_id(self, tag: str) -> str | None:
        """The id (sha256:...) of a local image, or None if absent. Part of env digests."""
        info = call(f"inspect image {tag}", self.api.inspect_image, tag, missing_ok=True)
        return None if info is None else str(info["Id"])

    def image_env(self, tag: str) -> dict[str, str]:
        info = call(f"inspect image {tag}", self.api.inspect_image, tag) or {}
        env = (info.get("Config") or {}).get("Env") or []
        return dict(e.split("=", 1) for e in env if "=" in e)

    def ensure_image(
        self, env_dir: Path, env_digest: str, *, build_args: dict[str, str], timeout: float
    ) -> ImageRef:
        tag = env_image_tag(env_digest)
        with _build_locks_guard:
            lock = _build_locks.setdefault(tag, threading.Lock())
        with lock:
            if self.image_id(tag) is not None:
                return ImageRef(tag=tag, built=False)
            labels = {LABEL_KIND: "env", "rsi.env_digest": env_digest}
            try:
                build_image(
                    self.api, Path(env_dir), tag, build_args=build_args, labels=labels, timeout=timeout
                )
            except BuildError as e:
                base = build_args.get("BASE_IMAGE")
                if base and self.image_id(base) is None:
                    # Not the task's fault: every task would fail the same way.
                    raise SandboxError(
                        f"base image {base} is not present (and could not be pulled); "
                        "build it with `rsi sandbox build-base` or set RSI_BASE_IMAGE"
                    ) from e
                raise
            if self.image_id(tag) is None:
                raise SandboxError(f"build {tag}: the daemon reported success but the image is missing")
            return ImageRef(tag=tag, built=True)

    def remove_image(self, tag: str) -> None:
        call(f"remove image {tag}", self.api.remove_image, tag, force=True, missing_ok=True)

    # -- sandboxes

    def start(self, spec: SandboxSpec) -> DockerSandbox:
        api = self.api
        host_config = api.create_host_config(
            nano_cpus=int(spec.cpus * 1e9),
            mem_limit=f"{int(spec.memory_mb)}m",
            pids_limit=int(spec.pids),
            network_mode="bridge" if spec.network else "none",
            init=self._use_init,
            auto_remove=False,
        )
        created = call(
            f"create container from {spec.image}",
            api.create_container,
            spec.image,
            command=["sleep", "infinity"] if spec.command is None else ["bash", "-c", spec.command],
            working_dir=spec.workdir,  # the daemon creates it when missing
            labels=dict(spec.labels),
            environment=dict(spec.env) or None,
            host_config=host_config,
            detach=True,
        )
        assert created is not None
        container_id = str(created["Id"])
        try:
            if spec.staged is not None:
                call(f"stage files in {container_id[:12]}", api.put_archive, container_id, "/", spec.staged)
            call(f"start container {container_id[:12]}", api.start, container_id)
        except SandboxError:
            call("remove container", api.remove_container, container_id, force=True, missing_ok=True)
            raise
        return DockerSandbox(api, container_id, spec.workdir, self._output_cap)

    def gc(self, live_jobs: set[str], *, scope: set[str] | None = None) -> GcReport:
        """Remove rsi containers (any state) and snapshot images whose job is not live.

        `scope`, when given, limits the sweep to those jobs (tests use it on a shared daemon).
        """
        report = GcReport()
        api = self.api

        def doomed(labels: dict[str, str] | None) -> bool:
            job = (labels or {}).get(LABEL_JOB)
            if scope is not None and job not in scope:
                return False
            return job not in live_jobs

        containers = call("list containers", api.containers, all=True, filters={"label": LABEL_JOB}) or []
        for c in containers:
            if doomed(c.get("Labels")):
                call("gc container", api.remove_container, c["Id"], force=True, missing_ok=True)
                report.containers.append(str(c["Id"])[:12])
        images = call("list images", api.images, filters={"label": f"{LABEL_KIND}=snapshot"}) or []
        for img in images:
            if doomed(img.get("Labels")):
                call("gc image", api.remove_image, img["Id"], force=True, missing_ok=True)
                tags = [t for t in (img.get("RepoTags") or []) if t != "<none>:<none>"]
                report.images.extend(tags or [str(img["Id"])])
        return report
