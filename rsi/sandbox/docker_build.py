"""Building a task's `environment/` into an image with the Docker daemon.

A failing Dockerfile is the task's fault (`BuildError`, with the build log); a daemon that cannot
be reached or answers 5xx is infra (`SandboxError`, after retries).
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import docker
import docker.errors
import requests

from rsi.sandbox.base import BuildError, SandboxError
from rsi.sandbox.docker_io import call, is_transient

LOG_TAIL_CHARS = 20_000

# Build output that says the substrate failed, not the Dockerfile: a package mirror or registry that
# cannot be reached, or a full disk. Such a build is infra (retried, never the task's fault).
INFRA_PATTERNS = re.compile(
    r"no space left on device|temporary failure (resolving|in name resolution)|could not resolve|"
    r"name or service not known|network is unreachable|connection timed out|tls handshake timeout|"
    r"i/o timeout|failed to establish a new connection|max retries exceeded|failed to fetch http|"
    r"unable to connect to|could not connect to|no route to host|getaddrinfo",
    re.IGNORECASE,
)


def infra_cause(text: str) -> str | None:
    """The line of a failed build's output that blames the substrate, if any."""
    for line in reversed(text.splitlines()):
        if INFRA_PATTERNS.search(line):
            return line.strip()[:300]
    return None


# apt-get's own words for "this release has no such package (version)": the package is named in group `p`.
APT_MISSING = (
    re.compile(r"E: Version '(?P<v>[^']+)' for '(?P<p>[^']+)' was not found"),
    re.compile(r"E: Unable to locate package (?P<p>\S+)"),
    re.compile(r"E: Couldn't find any package by (?:glob|regex) '(?P<p>[^']+)'"),
    re.compile(r"E: Package '(?P<p>[^']+)' has no installation candidate"),
    re.compile(r"^\s*(?P<p>\S+) : Depends: .* but it is not (?:installable|going to be installed)", re.MULTILINE),
)


def apt_missing(log: str) -> tuple[str, str] | None:
    """(package, apt's line) when a failed build's apt-get could not find a package or version, else None."""
    text = _ANSI.sub("", log)
    for pattern in APT_MISSING:
        found = list(pattern.finditer(text))
        if found:
            m = found[-1]
            pkg = m.group("p") + (f"={m.group('v')}" if "v" in m.groupdict() and m.group("v") else "")
            return pkg, m.group(0).strip()
    return None


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def build_image(
    api: docker.APIClient,
    env_dir: Path,
    tag: str,
    *,
    build_args: dict[str, str],
    labels: dict[str, str],
    timeout: float,
) -> str:
    """Build `env_dir` as `tag`; return the build log. Raises BuildError or SandboxError."""
    dockerfile = env_dir / "Dockerfile"
    if not dockerfile.is_file():
        raise BuildError(f"{dockerfile}: no Dockerfile in the task environment")
    deadline = time.monotonic() + timeout
    log: list[str] = []

    def start() -> Any:
        return api.build(
            path=str(env_dir),
            tag=tag,
            buildargs=build_args,
            labels=labels,
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
            timeout=max(1, int(timeout)),
        )

    try:
        stream = call(f"build {tag}", _start_or_build_error, start)
        assert stream is not None
        for chunk in stream:
            if "stream" in chunk:
                log.append(str(chunk["stream"]))
            if "error" in chunk or "errorDetail" in chunk:
                detail = chunk.get("errorDetail") or {}
                msg = str(chunk.get("error") or detail.get("message") or "build failed")
                log.append(msg + "\n")
                cause = infra_cause("".join(log[-200:]))
                if cause is not None:
                    raise SandboxError(f"environment build failed on the substrate, not the Dockerfile: {cause}")
                raise BuildError(f"environment build failed: {msg.strip()}", _tail(log))
            if time.monotonic() > deadline:
                _close(stream)
                raise BuildError(f"environment build did not finish within {timeout:.0f}s", _tail(log))
    except (requests.exceptions.RequestException, docker.errors.DockerException) as e:
        if isinstance(e, requests.exceptions.ReadTimeout):
            raise BuildError(f"environment build did not finish within {timeout:.0f}s", _tail(log)) from e
        raise SandboxError(f"build {tag}: daemon failed during the build: {e}") from e
    return _tail(log)


def _start_or_build_error(start: Any) -> Any:
    """A 4xx answer to the build request means the context/Dockerfile is bad: the task's fault."""
    try:
        return start()
    except docker.errors.APIError as e:
        if not is_transient(e) and e.status_code is not None and 400 <= e.status_code < 500:
            raise BuildError(f"environment build rejected: {e.explanation or e}", str(e)) from e
        raise


def _close(stream: Any) -> None:
    # Closing the generator drops the connection, which makes the daemon cancel the build.
    close = getattr(stream, "close", None)
    if close is not None:
        close()


def _tail(log: list[str]) -> str:
    text = "".join(log)
    return text if len(text) <= LOG_TAIL_CHARS else "[...]\n" + text[-LOG_TAIL_CHARS:]
