"""Low-level helpers of the docker provider: daemon calls with retries, tar archives, exec streams.

Kept apart from docker.py so the provider reads as policy (what to start, label, remove) while
this module holds the wire details (how bytes and errors move between us and the daemon).
"""

from __future__ import annotations

import io
import os
import socket
import struct
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import docker
import docker.errors
import requests
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from rsi.sandbox.base import SandboxError

T = TypeVar("T")

RETRY_ATTEMPTS = 4


def is_transient(exc: BaseException) -> bool:
    """Daemon hiccups worth retrying: lost connections and 5xx answers (never 404/409)."""
    if isinstance(exc, docker.errors.NotFound):
        return False
    if isinstance(exc, docker.errors.APIError):
        code = exc.status_code
        return code is not None and code >= 500
    return isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout)


def call(
    what: str,
    fn: Callable[..., T],
    *args: Any,
    missing_ok: bool = False,
    attempts: int = RETRY_ATTEMPTS,
    **kwargs: Any,
) -> T | None:
    """Call the daemon, retrying transient failures; any failure left becomes `SandboxError`.

    With `missing_ok`, a 404 returns None instead (the caller decides what absence means).
    """
    try:
        for attempt in Retrying(
            stop=stop_after_attempt(attempts),
            wait=wait_exponential(multiplier=0.2, max=2.0),
            retry=retry_if_exception(is_transient),
            reraise=True,
        ):
            with attempt:
                return fn(*args, **kwargs)
    except docker.errors.NotFound as e:
        if missing_ok:
            return None
        raise SandboxError(f"{what}: not found ({_explain(e)})") from e
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as e:
        raise SandboxError(f"{what}: {_explain(e)}") from e
    raise AssertionError("unreachable")  # pragma: no cover - Retrying either returns or raises


def _explain(e: BaseException) -> str:
    if isinstance(e, docker.errors.APIError):
        return str(e.explanation or e)
    return str(e) or type(e).__name__


def is_missing_container(e: docker.errors.NotFound) -> bool:
    """A 404 names either the container (gone: infra) or a path inside it (just absent)."""
    return "no such container" in _explain(e).lower()


# ---------------------------------------------------------------- tar archives


def tar_one_file(dest: str, data: bytes, mode: int) -> bytes:
    """A tar holding one file at absolute `dest` (no parent entries: the daemon creates missing
    parents, and entries for existing ones would reset their modes, e.g. /tmp's sticky bit)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(dest.lstrip("/"))
        info.size = len(data)
        info.mode = mode
        info.mtime = int(time.time())
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def tar_dir(src: Path, dest: str) -> tempfile.SpooledTemporaryFile[bytes]:
    """Tar host directory `src` as absolute `dest`, keeping modes (exec bits) and symlinks."""
    if not src.is_dir():
        raise SandboxError(f"put_dir: {src} is not a directory")
    spool: tempfile.SpooledTemporaryFile[bytes] = tempfile.SpooledTemporaryFile(max_size=16 << 20)  # noqa: SIM115
    with tarfile.open(fileobj=spool, mode="w") as tar:  # type: ignore[call-overload]
        tar.add(str(src), arcname=dest.strip("/") or ".", filter=_root_owned)
    spool.seek(0)
    return spool


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def spool_chunks(chunks: Iterable[bytes]) -> tempfile.SpooledTemporaryFile[bytes]:
    spool: tempfile.SpooledTemporaryFile[bytes] = tempfile.SpooledTemporaryFile(max_size=16 << 20)  # noqa: SIM115
    for chunk in chunks:
        spool.write(chunk)
    spool.seek(0)
    return spool


def read_file_from_tar(fileobj: Any) -> tuple[bytes | None, str | None]:
    """(content, None) for a regular file; (None, link target) for a symlink; (None, None) else."""
    with tarfile.open(fileobj=fileobj, mode="r|") as tar:
        for member in tar:
            if member.isfile():
                f = tar.extractfile(member)
                return (f.read() if f else b""), None
            if member.issym():
                return None, member.linkname
            return None, None
    return None, None


def extract_dir_from_tar(fileobj: Any, dest: Path) -> None:
    """Extract a `docker cp`-style archive (top entry = the directory itself) into `dest`.

    Members that would escape `dest` (absolute or outward links, device nodes) are skipped, not
    fatal: a sandbox may legitimately hold a symlink to /usr/bin/python3.
    """
    dest.mkdir(parents=True, exist_ok=True)

    def strip(name: str) -> str:
        parts = PurePosixPath(name).parts[1:]
        return str(PurePosixPath(*parts)) if parts else "."

    def member_filter(member: tarfile.TarInfo, path: str) -> tarfile.TarInfo | None:
        name = strip(member.name)
        if name == ".":
            return None
        linkname = strip(member.linkname) if member.islnk() else member.linkname
        try:
            return tarfile.data_filter(member.replace(name=name, linkname=linkname, deep=False), path)
        except tarfile.FilterError:
            return None

    with tarfile.open(fileobj=fileobj, mode="r:") as tar:
        tar.extractall(str(dest), filter=member_filter)


# ---------------------------------------------------------------- exec

# Runs the command under coreutils `timeout` (its own process group, so TERM/KILL reach what the
# command spawned) and then prints an end marker on both streams. The reader stops at the markers,
# so a background child still holding stdout (`server &`) cannot keep the call open. The wrapper's
# own stderr goes to /dev/null so bash's job notices ("line 3: Killed timeout ...") never reach
# the command's stderr; the command writes to the real stderr through fd 3.
EXEC_WRAPPER = r"""
exec 3>&2 2>/dev/null
if [ -n "$2" ] && command -v timeout >/dev/null 2>&1; then
  timeout -k 2 "$2" bash -c "$1" </dev/null 2>&3 3>&-
else
  bash -c "$1" </dev/null 2>&3 3>&-
fi
rc=$?
printf '%s%d\n' "$3" "$rc"
printf '%s\n' "$3" >&3
exit "$rc"
"""


class _StreamBuf:
    """One output stream: keeps up to `cap` bytes, finds the end marker (and exit code after it)."""

    def __init__(self, marker: bytes, cap: int, with_code: bool) -> None:
        self.marker = marker
        self.cap = cap
        self.with_code = with_code
        self.kept = bytearray()
        self.total = 0
        self.pending = bytearray()
        self.found = False
        self.trailer = bytearray()
        self.done = False
        self.code: int | None = None

    def feed(self, chunk: bytes) -> None:
        if self.done:
            return  # output of background children after the command ended
        if self.found:
            self.trailer += chunk
            self._check_trailer()
            return
        self.pending += chunk
        i = self.pending.find(self.marker)
        if i >= 0:
            self._commit(self.pending[:i])
            self.trailer += self.pending[i + len(self.marker) :]
            self.pending.clear()
            self.found = True
            self._check_trailer()
            return
        keep = len(self.marker) - 1  # a marker may be split across frames
        if len(self.pending) > keep:
            self._commit(self.pending[: len(self.pending) - keep])
            del self.pending[: len(self.pending) - keep]

    def _check_trailer(self) -> None:
        nl = self.trailer.find(b"\n")
        if nl < 0:
            return
        self.done = True
        if self.with_code:
            try:
                self.code = int(self.trailer[:nl])
            except ValueError:
                self.code = None

    def _commit(self, data: bytes | bytearray) -> None:
        self.total += len(data)
        room = self.cap - len(self.kept)
        if room > 0:
            self.kept += data[:room]

    def finish(self) -> None:
        """End of stream without a marker: everything pending is output."""
        if not self.found:
            self._commit(self.pending)
            self.pending.clear()

    def text(self) -> str:
        out = self.kept.decode("utf-8", errors="replace")
        if self.total > self.cap:
            out += f"\n[rsi: {self.total - self.cap} more bytes of output not kept]\n"
        return out


class ExecStream:
    """Reads one hijacked exec stream (docker's 8-byte framed stdout/stderr) up to the markers."""

    def __init__(self, sock: Any, marker: bytes, cap: int) -> None:
        self._sock = sock
        response = getattr(sock, "_response", None)
        # Read through the HTTP response's buffered reader: it may already hold the first frames.
        fp = getattr(getattr(getattr(response, "raw", None), "_fp", None), "fp", None)
        self._read: Callable[[int], bytes] = fp.read1 if fp is not None else sock.read
        self._raw: socket.socket | None = getattr(
            sock, "_sock", sock if isinstance(sock, socket.socket) else None
        )
        self.out = _StreamBuf(marker, cap, with_code=True)
        self.err = _StreamBuf(marker, cap, with_code=False)
        self.eof = False
        self.deadline_hit = False

    def pump(self, deadline: float | None) -> None:
        """Read until both markers arrived, the stream ended, or `deadline` (monotonic) passed."""
        buf = bytearray()
        while not (self.out.done and self.err.done):
            if self._raw is not None:
                if deadline is None:
                    self._raw.settimeout(None)
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        self.deadline_hit = True
                        break
                    self._raw.settimeout(remaining)
            try:
                chunk = self._read(65536)
            except TimeoutError:
                self.deadline_hit = True
                break
            except OSError:
                chunk = b""
            if not chunk:
                self.eof = True
                break
            buf += chunk
            while len(buf) >= 8:
                kind, size = struct.unpack(">BxxxL", buf[:8])
                if len(buf) < 8 + size:
                    break
                payload = bytes(buf[8 : 8 + size])
                del buf[: 8 + size]
                (self.err if kind == 2 else self.out).feed(payload)
        self.out.finish()
        self.err.finish()

    def close(self) -> None:
        """Drop the connection (the daemon then TERMs the exec process if it still runs)."""
        raw = self._raw
        try:
            if raw is not None:
                raw.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for obj in (raw, self._sock, getattr(self._sock, "_response", None)):
            try:
                if obj is not None:
                    obj.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass


def new_marker() -> bytes:
    return f"\x1e@rsi-end-{os.urandom(8).hex()}@".encode()
