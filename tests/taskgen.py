"""Small throwaway Harbor tasks written into a test's tmp dir.

Every task built here has the same Dockerfile by default, so the docker tests share one env image
(built once per base image, reused afterwards). Scripts refer to sandbox paths through
`${SANDBOX_ROOT:-}` (`R` below): empty in a container, the sandbox's root directory under
`FakeSandboxProvider`, so one task works with both providers.

Default behaviour: the solution writes `ok` to /app/out.txt, the test gives reward 1 when it
finds it there and 0 otherwise; `nop` therefore fails and `oracle` passes.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from rsi.sandbox.base import SandboxError

R = "${SANDBOX_ROOT:-}"

DOCKERFILE = "ARG BASE_IMAGE=python:3.12-slim\nFROM ${BASE_IMAGE}\nWORKDIR /app\n"
SOLVE_OK = f'echo ok > "{R}/app/out.txt"\n'
TEST_OK = (
    f'mkdir -p "{R}/logs/verifier"\n'
    f'if [ "$(cat "{R}/app/out.txt" 2>/dev/null)" = ok ]; then echo 1 > "{R}/logs/verifier/reward.txt"; '
    f'else echo 0 > "{R}/logs/verifier/reward.txt"; fi\n'
)


def make_task(
    root: Path,
    name: str,
    *,
    solve: str | None = SOLVE_OK,
    test: str = TEST_OK,
    dockerfile: str = DOCKERFILE,
    instruction: str | None = None,
    agent_timeout: float = 60,
    verifier_timeout: float = 60,
    cpus: float = 1,
    memory_mb: int = 512,
    pids: int = 128,
    network_mode: str = "none",
    family: str = "test",
    toml: str | None = None,
) -> Path:
    """Write task `name` under `root` and return its directory.

    `toml` replaces the whole task.toml (for malformed-input tests); otherwise one is generated
    from the keyword arguments. `solve=None` leaves out solution/solve.sh.
    """
    d = root / name
    (d / "environment").mkdir(parents=True, exist_ok=True)
    (d / "tests").mkdir(exist_ok=True)
    (d / "instruction.md").write_text(instruction or f"Task {name}: write ok to /app/out.txt.\n")
    (d / "environment" / "Dockerfile").write_text(dockerfile)
    (d / "tests" / "test.sh").write_text("#!/bin/bash\n" + test)
    if solve is not None:
        (d / "solution").mkdir(exist_ok=True)
        (d / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
    if toml is None:
        toml = (
            'version = "1.0"\n\n'
            f'[task]\nname = "{name}"\n\n'
            f'[metadata.rsi]\nfamily = "{family}"\ndifficulty = 1\n\n'
            f"[agent]\ntimeout_sec = {agent_timeout}\n\n"
            f"[verifier]\ntimeout_sec = {verifier_timeout}\n\n"
            f"[environment]\nbuild_timeout_sec = 300\ncpus = {cpus}\nmemory_mb = {memory_mb}\n"
            f'pids = {pids}\nnetwork_mode = "{network_mode}"\n'
        )
    (d / "task.toml").write_text(toml)
    return d


def make_tasks(root: Path, count: int, prefix: str = "t", **kwargs: object) -> list[Path]:
    """`count` tasks named <prefix>00, <prefix>01, ... with the same options."""
    return [make_task(root, f"{prefix}{i:02d}", **kwargs) for i in range(count)]  # type: ignore[arg-type]


# --- provider wrappers that inject substrate faults (used by unit and docker tests) --------------

class CountingProvider:
    """Wraps a provider; counts start() calls and records every ensure_image() result."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.starts = 0
        self.images: list[Any] = []
        self._lock = threading.Lock()

    def __getattr__(self, attr: str) -> Any:  # ping, gc, remove_image, image_id, ...
        return getattr(self.inner, attr)

    def ensure_image(self, *args: Any, **kwargs: Any) -> Any:
        ref = self.inner.ensure_image(*args, **kwargs)
        with self._lock:
            self.images.append(ref)
        return ref

    def start(self, spec: Any) -> Any:
        with self._lock:
            self.starts += 1
        return self.inner.start(spec)


class FlakyProvider(CountingProvider):
    """start() raises SandboxError for the first `failures` calls (all calls when failures < 0)."""

    def __init__(self, inner: Any, failures: int = 1) -> None:
        super().__init__(inner)
        self.failures = failures

    def start(self, spec: Any) -> Any:
        with self._lock:
            self.starts += 1
            fail = self.failures < 0 or self.starts <= self.failures
        if fail:
            raise SandboxError(f"injected failure #{self.starts}: the daemon hiccuped")
        return self.inner.start(spec)
