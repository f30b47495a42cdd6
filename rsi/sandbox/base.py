"""The `Sandbox` boundary: where an agent acts and a verifier grades.

A provider builds (or reuses) the image of a task's `environment/` and starts sandboxes from it.
The docker provider is the real one; `FakeSandboxProvider` (fake.py) runs commands in a local
temp directory for unit tests. Both pass the conformance suite in tests/.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from rsi.core.errors import InfraError, RsiError
from rsi.core.trial import ErrorType

LABEL_JOB = "rsi.job"
LABEL_TRIAL = "rsi.trial"
LABEL_DRIVER = "rsi.driver"  # the run that started it: a driver that lost its job sweeps only its own
LABEL_KIND = "rsi.kind"  # "trial" | "verifier" | "snapshot" | "env"


class SandboxError(InfraError):
    """The sandbox substrate failed (daemon hiccup, container vanished). Retried; blamed on infra."""


class SandboxBroken(RsiError):
    """The agent's own commands wrecked its sandbox (killed its PID 1, exhausted memory or pids, made
    the daemon refuse a write). An outcome of the agent with its own error type: not infra, not retried."""

    def __init__(self, error_type: ErrorType, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


class BuildError(RsiError):
    """The task's environment did not build: a task problem (`environment_build_failed`)."""

    exit_code = 1

    def __init__(self, message: str, log: str = "") -> None:
        super().__init__(message)
        self.log = log


@dataclass
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    duration: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass
class ImageRef:
    tag: str
    built: bool  # False when an existing image was reused
    how: str = "build"  # "build" (the daemon built the Dockerfile) or "files" (base + files put in, committed)


@dataclass
class SandboxSpec:
    """How to start one sandbox. Limits come from the task, capped by the contract."""

    image: str
    cpus: float = 1.0
    memory_mb: int = 1024
    pids: int = 256
    network: bool = False
    workdir: str = "/app"
    labels: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    # A bash script run as the sandbox's main process instead of idling: the sandbox lives exactly as
    # long as it does, and whatever it leaves running dies with it (the verifier runs this way).
    command: str | None = None
    # A tar archive extracted at / before anything starts (files staged for `command`).
    staged: bytes | None = None
    # The id of a running sandbox whose network namespace this one joins (docker's `--network
    # container:<id>`): what listens there answers on localhost here, while the filesystem, PID
    # namespace and tools stay this sandbox's own. `network` is then ignored (the other's applies).
    network_of: str | None = None


@dataclass
class GcReport:
    containers: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)


@runtime_checkable
class Sandbox(Protocol):
    """One running, isolated environment.

    A provider without a private root filesystem (the fake) sets `SANDBOX_ROOT` in `exec`'s
    environment; commands rsi itself issues write absolute paths as `${SANDBOX_ROOT:-}/path`
    so they never touch the host. In a container the variable is unset and the prefix empty.
    """

    id: str
    workdir: str

    def exec(
        self,
        cmd: str,
        *,
        timeout: float | None = None,
        workdir: str | None = None,
        env: dict[str, str] | None = None,
    ) -> ExecResult:
        """Run `cmd` with bash. On timeout the command is killed and `timed_out` is True."""
        ...

    def put_file(self, dest: str, data: bytes, mode: int = 0o644) -> None:
        """Write one file at absolute path `dest`, creating parent directories."""
        ...

    def put_dir(self, src: Path, dest: str) -> None:
        """Copy the host directory `src` to absolute path `dest` (contents, recursively)."""
        ...

    def get_file(self, path: str) -> bytes | None:
        """Read one file; None if it does not exist."""
        ...

    def get_dir(self, src: str, dest: Path) -> bool:
        """Copy directory `src` out to host `dest`; False if it does not exist."""
        ...

    def get_archive(self, path: str) -> bytes | None:
        """A tar of `path` (file or directory; the top entry is its basename), None if absent."""
        ...

    def changed_paths(self) -> list[str]:
        """Absolute paths added, changed or deleted since the sandbox started (like `docker diff`)."""
        ...

    def changes(self) -> dict[str, int]:
        """The same paths with their kind, as `docker diff` gives it: 0 modified, 1 added, 2 deleted."""
        ...

    def freeze(self) -> None:
        """Stop every process in the sandbox; its filesystem stays readable (changed_paths,
        get_file, get_archive, snapshot). Commands can no longer run. Idempotent."""
        ...

    def pause(self) -> None:
        """Halt every process without ending it (a cgroup freeze): the filesystem holds still for
        changes, reads and snapshot; commands cannot run until `resume`. A sandbox the agent's
        commands brought down raises SandboxBroken here, as `freeze` does."""
        ...

    def resume(self) -> None:
        """Let a paused sandbox's processes run again (what the agent left running: its services)."""
        ...

    def wait(self, timeout: float) -> ExecResult:
        """For a sandbox started with `spec.command`: wait for it to exit (killed after `timeout`),
        then return its exit code and output. Every process it left behind is gone by then."""
        ...

    def snapshot(self, labels: dict[str, str]) -> str:
        """Freeze the current filesystem into an image another sandbox can start from."""
        ...

    def stop(self) -> None:
        """Kill and remove. Idempotent; never raises for an already-gone sandbox."""
        ...


@dataclass(frozen=True)
class HostTree:
    """A host directory a verifier's sandbox gets at `dest`, with `path_dir` appended to its PATH."""

    src: Path
    dest: str
    path_dir: str
    note: str  # what it is and why it was given, for the trial's record


class SandboxProvider(Protocol):
    name: str

    def ping(self) -> None:
        """Raise SandboxError if the substrate is not reachable."""
        ...

    def image_id(self, tag: str) -> str | None:
        """The id of a local image (part of environment digests), or None if it is absent."""
        ...

    def image_env(self, tag: str) -> dict[str, str]:
        """The environment an image declares (its own PATH): what the verifier runs with."""
        ...

    def image_labels(self, tag: str) -> dict[str, str]:
        """An image's labels ({} if it is absent): `rsi.substitute` marks a stand-in base image."""
        ...

    def image_release(self, tag: str) -> str:
        """The OS release an image holds (`/etc/os-release`'s PRETTY_NAME, e.g. "Debian GNU/Linux 12
        (bookworm)"); "" when it says none."""
        ...

    def image_packages(self, tag: str) -> dict[str, str]:
        """The Debian packages installed in an image (name -> version, as dpkg records them); {} without dpkg."""
        ...

    def verifier_python(self, tag: str, version: str | None) -> HostTree | str:
        """A Python for a verifier on image `tag` that has none of its own (`version` as test.sh asks uv
        for it, None: any python3): the tree to add, or a str saying why none is added."""
        ...

    def ensure_image(
        self, env_dir: Path, env_digest: str, *, build_args: dict[str, str], timeout: float
    ) -> ImageRef:
        """Build the image of `env_dir` tagged by its digest, or reuse it. BuildError on failure."""
        ...

    def start(self, spec: SandboxSpec) -> Sandbox:
        ...

    def remove_image(self, tag: str) -> None:
        ...

    def gc(self, live_jobs: set[str], *, scope: set[str] | None = None, driver: str | None = None) -> GcReport:
        """Remove containers and snapshot images labelled by rsi whose job is not in `live_jobs`.

        `scope`, when given, limits the sweep to those jobs (tests share a daemon with other work);
        `driver` to what that run started (LABEL_DRIVER): a driver whose job another took over sweeps its
        own containers and never the new owner's, which carry the same job label.
        """
        ...
