"""The docker sandbox provider: task images built once per environment digest, one container per sandbox.

Every container runs `sleep infinity` under docker's init (images made by `docker import` have no
CMD, and the init reaps what agents leave behind so zombies do not eat the pids limit), with the
task's cpu/memory/pids limits, no network unless asked, and rsi labels so `gc` finds leftovers.
Each daemon call is retried on transient errors and then surfaces as `SandboxError` (infra).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import docker
import docker.errors

from rsi.sandbox.base import (
    LABEL_DRIVER,
    LABEL_JOB,
    LABEL_KIND,
    BuildError,
    GcReport,
    HostTree,
    ImageRef,
    SandboxError,
    SandboxSpec,
)
from rsi.sandbox.docker_build import apt_missing, build_image
from rsi.sandbox.docker_events import event_watch
from rsi.sandbox.docker_io import (
    call,
)
from rsi.sandbox.docker_sandbox import DockerSandbox
from rsi.sandbox.files_env import FilesPlan, files_archive, plan_files_only

ENV_REPO = "rsi-env"
# a files-only image's label naming the base image id it was made from (set only when its files leave the OS
# release and the package database alone, so the environment record can read the base's without a probe)
LABEL_FILES_ON = "rsi.files_on"
SYSTEM_RECORDS = ("/etc/os-release", "/usr/lib/os-release", "/var/lib/dpkg", "/etc/debian_version")
DEFAULT_OUTPUT_CAP = 8 << 20  # bytes kept per stream per exec

# Shared by every provider instance in the process so two instances never build one digest twice.
_build_locks: dict[str, threading.Lock] = {}
_build_locks_guard = threading.Lock()
# (image id, command) -> whether the image has it on its PATH; images never change under one id.
_has_command: dict[tuple[str, str], bool] = {}
_release: dict[str, str] = {}  # image id -> its os-release PRETTY_NAME
_packages: dict[str, dict[str, str]] = {}  # image id -> its dpkg packages and versions


def env_image_tag(env_digest: str) -> str:
    return f"{ENV_REPO}:{env_digest[:16]}"


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
        build_free: bool | None = None,
    ) -> None:
        self._client = client
        # Files-only environments skip the build (files_env.py); RSI_ENV_BUILD=always builds every one.
        self._build_free = build_free if build_free is not None else os.environ.get("RSI_ENV_BUILD") != "always"
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

    def image_labels(self, tag: str) -> dict[str, str]:
        info = call(f"inspect image {tag}", self.api.inspect_image, tag, missing_ok=True) or {}
        return dict((info.get("Config") or {}).get("Labels") or {})

    def verifier_python(self, tag: str, version: str | None) -> HostTree | str:
        """rsi's portable CPython 3.13 (portable_python.py) when `tag` has no python`version` of its own."""
        from rsi.sandbox.portable_python import DEST, VERSION, portable_python

        if version not in (None, VERSION):
            return f"from the image: rsi can add python {VERSION} only, test.sh asks for {version}"
        command = f"python{version}" if version else "python3"
        if self._image_has(tag, command):
            return f"from the image (it has {command})"
        got = portable_python(self.client)
        if isinstance(got, str):
            return f"none: the image has no {command} and rsi's python {VERSION} is unavailable: {got}"
        return HostTree(got.root, DEST, got.bin_dir,
                        f"rsi's portable CPython {got.version} (Debian trixie's, with its own glibc loader; "
                        f"from {got.source}) in {DEST}, last on PATH: the image has no {command}")

    def _image_has(self, tag: str, command: str) -> bool:
        """Whether `command` is on the image's own PATH (a throwaway container, once per image id)."""
        image = self.image_id(tag) or tag
        key = (image, command)
        if key not in _has_command:
            _has_command[key] = self._probe(image, f"command -v {command}")[0] == 0
        return _has_command[key]

    def _files_base(self, tag: str) -> str | None:
        """The base image id a files-only image was made from, when its files touch neither the release nor the
        package database (then both are the base's, and no probe container is needed)."""
        base = self.image_labels(tag).get(LABEL_FILES_ON)
        return base if base and self.image_id(base) is not None else None

    def image_release(self, tag: str) -> str:
        base = self._files_base(tag)
        if base is not None:
            return self.image_release(base)
        image = self.image_id(tag)
        if image is None:
            return ""
        if image not in _release:
            code, out = self._probe(image, ". /etc/os-release 2>/dev/null && echo \"$PRETTY_NAME\"")
            _release[image] = out.strip() if code == 0 else ""
        return _release[image]

    def image_packages(self, tag: str) -> dict[str, str]:
        base = self._files_base(tag)
        if base is not None:
            return self.image_packages(base)
        image = self.image_id(tag)
        if image is None:
            return {}
        if image not in _packages:
            code, out = self._probe(image, "dpkg-query -W -f '${db:Status-Abbrev}\\t${Package}\\t${Version}\\n' "
                                           "2>/dev/null")
            rows = [line.split("\t") for line in out.splitlines()] if code == 0 else []
            _packages[image] = {r[1]: r[2] for r in rows if len(r) == 3 and r[0].startswith("ii")}
        return dict(_packages[image])

    def _probe(self, image: str, script: str) -> tuple[int, str]:
        """Run `script` with sh in a throwaway container of `image` (no network); its exit code and stdout."""
        made = call("create probe", self.api.create_container, image, command=["sh", "-c", script],
                    labels={LABEL_KIND: "probe"}, host_config=self.api.create_host_config(network_mode="none"))
        assert made is not None
        try:
            call("start probe", self.api.start, made["Id"])
            status = dict(call("wait probe", self.api.wait, made["Id"], timeout=120) or {})
            out = call("probe output", self.api.logs, made["Id"], stdout=True, stderr=False, stream=False)
        finally:
            call("remove probe", self.api.remove_container, made["Id"], force=True, missing_ok=True)
        code = status.get("StatusCode")
        text = out.decode(errors="replace") if isinstance(out, bytes) else ""
        return (code if isinstance(code, int) else -1), text

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
            plan = plan_files_only(Path(env_dir), build_args) if self._build_free else None
            base_id = self.image_id(plan.base) if plan is not None else None
            if plan is not None and base_id is not None:
                if not any(p.startswith(SYSTEM_RECORDS) for p in [*plan.files, *plan.dirs]):
                    labels[LABEL_FILES_ON] = base_id
                self._put_files(plan, tag, labels)
                if self.image_id(tag) is None:
                    raise SandboxError(f"commit {tag}: the daemon reported success but the image is missing")
                return ImageRef(tag=tag, built=True, how="files")
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
                missing = apt_missing(e.log)
                if missing is not None:  # one line naming the package and the release that lacks it
                    raise BuildError(f"environment build failed: apt-get cannot install {missing[0]} from "
                                     f"{self._release_of_from(Path(env_dir), base)}: {missing[1]}", e.log) from e
                raise
            if self.image_id(tag) is None:
                raise SandboxError(f"build {tag}: the daemon reported success but the image is missing")
            return ImageRef(tag=tag, built=True)

    def _put_files(self, plan: FilesPlan, tag: str, labels: dict[str, str]) -> None:
        """The image of a files-only environment: a container of the base, the files put in, one commit."""
        api = self.api
        made = call(f"create container from {plan.base}", api.create_container, plan.base, command=["true"],
                    labels={LABEL_KIND: "probe"}, host_config=api.create_host_config(network_mode="none"))
        assert made is not None
        cid = str(made["Id"])
        try:
            existing = self._existing(cid, plan)
            call(f"put files in {cid[:12]}", api.put_archive, cid, "/", files_archive(plan, existing))
            repo, _, name = tag.partition(":")
            changes = [f"LABEL {k}={json.dumps(v)}" for k, v in sorted(labels.items())]
            if plan.workdir:
                changes.append(f"WORKDIR {plan.workdir}")
            call(f"commit {tag}", api.commit, cid, repository=repo, tag=name, changes=changes)
        finally:
            call("remove container", api.remove_container, cid, force=True, missing_ok=True)

    def _existing(self, cid: str, plan: FilesPlan) -> set[str]:
        """The plan's directories the base image already has (a HEAD per path whose parent exists)."""
        api = self.api
        present: set[str] = {"/"}
        for path in sorted(plan.dirs, key=lambda p: (p.count("/"), p)):
            if str(Path(path).parent) not in present:
                continue  # under a directory the base lacks: absent too
            url = api._url("/containers/{0}/archive", cid)  # type: ignore[attr-defined]
            res = call(f"stat {path} in {cid[:12]}", api.head, url, params={"path": path})
            if res is not None and res.status_code == 200:
                present.add(path)
            elif res is not None and res.status_code != 404:
                raise SandboxError(f"stat {path} in {cid[:12]}: the daemon answered {res.status_code}")
        return present

    def _release_of_from(self, env_dir: Path, base: str | None) -> str:
        """The release of the image the Dockerfile's last FROM names, e.g. "Debian GNU/Linux 12 (bookworm)
        (python:3.13-slim-bookworm)"; the substitute's label says it where one stands in."""
        from rsi.sandbox.base_image import LABEL_RELEASE, base_tags

        tags = sorted(base_tags([env_dir / "Dockerfile"])) or ([base] if base else [])
        for tag in tags:
            said = self.image_release(tag) or self.image_labels(tag).get(LABEL_RELEASE, "")
            if said:
                return f"{said}, the release of {tag}"
        return "the base image's release"

    def remove_image(self, tag: str) -> None:
        call(f"remove image {tag}", self.api.remove_image, tag, force=True, missing_ok=True)

    # -- sandboxes

    def start(self, spec: SandboxSpec) -> DockerSandbox:
        api = self.api
        watch = event_watch()  # running before the container exists, so its kill / die events are seen
        host_config = api.create_host_config(
            nano_cpus=int(spec.cpus * 1e9),
            mem_limit=f"{int(spec.memory_mb)}m",
            pids_limit=int(spec.pids),
            network_mode=f"container:{spec.network_of}" if spec.network_of else "bridge" if spec.network else "none",
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
        return DockerSandbox(api, container_id, spec.workdir, self._output_cap, watch)

    def gc(self, live_jobs: set[str], *, scope: set[str] | None = None, driver: str | None = None) -> GcReport:
        """Remove rsi containers (any state) and snapshot images whose job is not live.

        `scope`, when given, limits the sweep to those jobs (tests use it on a shared daemon); `driver` to
        what that run started.
        """
        report = GcReport()
        api = self.api

        def doomed(labels: dict[str, str] | None) -> bool:
            job = (labels or {}).get(LABEL_JOB)
            if scope is not None and job not in scope:
                return False
            if driver is not None and (labels or {}).get(LABEL_DRIVER) != driver:
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
