"""Advisory file locks (`fcntl.flock`): who owns a job, who drives a SQLite store.

A pid written in a row says nothing once the process is gone and the pid is reused; a lock held
on an open file goes away with the process that held it, however it died (kill -9 included).
So ownership is "holds the lock", and liveness is "someone holds the lock".

`flock` locks belong to an open file description, not to a process: two `FileLock` objects on
one path conflict even inside one process (so two `Store` objects behave like two drivers), and
the lock is not inherited by subprocesses (Python opens files non-inheritable and `subprocess`
closes them). A forked child without exec would share it; rsi does not fork that way.

The lock file holds a one-line note (pid, host, time) for messages only; it is never deleted
(unlinking a lock file races with a process that just opened it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
from datetime import UTC, datetime
from pathlib import Path


def holder_note() -> str:
    """What a lock file says about its holder: `pid N on HOST since TIME`."""
    since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return f"pid {os.getpid()} on {socket.gethostname()} since {since}"


class FileLock:
    """An exclusive, non-blocking lock on one file, held by this object until `release`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, note: str | None = None) -> bool:
        """Take the lock without waiting. True if this object holds it now (also if it already did)."""
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, ((note if note is not None else holder_note()) + "\n").encode())
        self._fd = fd
        return True

    def release(self) -> None:
        """Give the lock up (a no-op if not held). The file stays, emptied."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> FileLock:
        if not self.acquire():
            raise BlockingIOError(f"{self.path} is locked by {read_holder(self.path) or 'another process'}")
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.release()


def is_locked_by_other(path: Path) -> bool:
    """Whether some other open file (another process, or another FileLock here) holds `path` exclusively.

    Tries a shared non-blocking lock and gives it straight back; never creates the file, so
    read-only commands leave no trace. A missing file is not locked.
    """
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


def read_holder(path: Path) -> str:
    """The holder's note in a lock file ('' if none or unreadable): for messages, never for decisions."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""
