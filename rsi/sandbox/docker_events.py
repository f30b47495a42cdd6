"""Who ended a container: the daemon's event stream, watched for the life of the process.

A trial's container that is found stopped while the agent was acting was ended either by the agent's
own commands (`kill 1` reaches the init from inside: no daemon event but `die`) or from outside it
(`docker stop`, `docker kill`, a daemon shutting down and taking its containers with it: a `kill`
event first, or no event at all because the stream itself went down with the daemon). Inspect cannot
tell them apart (both exit 143), so rsi watches `/events` for containers from the first sandbox it
starts: a `kill` event rsi did not send (rsi never asks about a container it stopped or froze
itself), or a `die` the stream never delivered because the daemon was away, makes the end infra.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import docker

WAIT_FOR_DIE_S = 3.0  # how long a verdict waits for the stream to deliver the container's `die`
RECONNECT_S = 0.5


class EventWatch:
    """A background reader of the daemon's container events (kill and die times per container id)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self.kills: dict[str, list[float]] = {}  # container id -> times of its `kill` events
        self.dies: dict[str, float] = {}  # container id -> time of its `die` event
        self.outages: list[tuple[float, float | None]] = []  # (stream lost, stream back) in wall-clock time
        self.connected = False
        self._since = time.time() - 1.0
        self._thread = threading.Thread(target=self._run, name="rsi-docker-events", daemon=True)
        self._thread.start()
        with self._cv:  # a sandbox started after this returns is covered (events since `_since` replay)
            self._cv.wait_for(lambda: self.connected or bool(self.outages), timeout=5.0)

    def _run(self) -> None:
        while True:
            try:
                api = docker.from_env().api  # its own connection: the stream blocks for the process's life
                stream = api.events(since=int(self._since), decode=True, filters={"type": "container"})
                with self._cv:
                    self.connected = True
                    if self.outages and self.outages[-1][1] is None:
                        self.outages[-1] = (self.outages[-1][0], time.time())
                    self._cv.notify_all()
                for event in stream:
                    self._take(event)
            except Exception:  # noqa: BLE001 - a daemon going away surfaces as any of several errors
                pass
            with self._cv:
                if self.connected or not self.outages:
                    self.outages.append((time.time(), None))
                self.connected = False
                self._cv.notify_all()
            time.sleep(RECONNECT_S)

    def _take(self, event: dict[str, Any]) -> None:
        action = str(event.get("Action") or event.get("status") or "")
        cid = str(event.get("id") or (event.get("Actor") or {}).get("ID") or "")
        at = float(event.get("timeNano") or 0) / 1e9 or float(event.get("time") or time.time())
        with self._cv:
            self._since = max(self._since, int(at))
            if action == "kill":
                self.kills.setdefault(cid, []).append(at)
            elif action == "die":
                self.dies[cid] = at
                self._cv.notify_all()

    def ended_from_outside(self, container_id: str, started_at: float, own_kill_at: float | None = None) -> str | None:
        """Why `container_id` (started at wall-clock `started_at`) was ended from outside, or None when
        its end came from inside (the agent's commands). rsi's own kill (sent at `own_kill_at`, when
        the container was already going down) is not from outside. Waits briefly for the stream."""
        with self._cv:
            self._cv.wait_for(lambda: container_id in self.dies or not self.connected, timeout=WAIT_FOR_DIE_S)
            kills = [t for t in self.kills.get(container_id, []) if own_kill_at is None or t < own_kill_at - 0.05]
            if kills:
                return "the daemon was told to kill it (docker stop / kill, or a daemon shutdown)"
            if container_id in self.dies:
                return None
            lost = [a for a, b in self.outages if b is None or b >= started_at]
            if lost or not self.connected:
                return "the Docker daemon was unreachable when it ended (a daemon restart?)"
            return "the daemon never reported its end"


_watch: EventWatch | None = None
_lock = threading.Lock()


def event_watch() -> EventWatch:
    """The process's one watch of the daemon the environment names (DOCKER_HOST), started on first use."""
    global _watch
    with _lock:
        if _watch is None:
            _watch = EventWatch()
        return _watch


__all__ = ["EventWatch", "event_watch"]
