"""A small real Ray cluster on this machine for the `ray` executor's tests: a head and worker nodes
started with `ray start`, each worker with its own `dockerd` (own socket, data root, exec root and
bridge), so the nodes really talk to separate Docker daemons.

Worker i joins with resources `{"rsi_slot": 1, "rsi_test_w<i>": 1}` (the second names the node in
`ray.nodes()`), its raylet started with `DOCKER_HOST=unix:///run/rsi-docker<i>.sock`; its
node-manager port is fixed so that the test can find its raylet and `kill -9` it. Every process is
started here and stopped here by pid (the raylets, GCS and agents by their --temp-dir), never with
`ray stop`, which would stop every Ray on the machine. A daemon's data root is kept between runs
(/var/lib/rsi-docker<i>), so the base image is loaded into it only once per machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

RAY = [sys.executable, "-m", "ray.scripts.scripts"]
# the GCS notices a dead raylet within seconds (defaults: about half a minute)
FAST_HEALTH = {"RAY_health_check_initial_delay_ms": "1000", "RAY_health_check_period_ms": "1000",
               "RAY_health_check_timeout_ms": "1000", "RAY_health_check_failure_threshold": "3"}
AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_TOKEN")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pids_with(text: str) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmd:
            out.append(int(d.name))
    return out


def _kill(pids: list[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


@dataclass
class Dockerd:
    """A second Docker daemon beside the machine's own."""

    index: int

    @property
    def host(self) -> str:
        return f"unix:///run/rsi-docker{self.index}.sock"

    @property
    def bridge(self) -> str:
        return f"rsi-br{self.index}"

    @property
    def pidfile(self) -> Path:
        return Path(f"/run/rsi-docker{self.index}.pid")

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.host}

    def start(self, log_dir: Path) -> None:
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        for cmd in (["ip", "link", "add", self.bridge, "type", "bridge"],
                    ["ip", "addr", "add", f"10.{230 + self.index}.0.1/24", "dev", self.bridge],
                    ["ip", "link", "set", self.bridge, "up"]):
            subprocess.run(cmd, check=True, capture_output=True)
        self.stop_stale()
        log = (log_dir / f"dockerd{self.index}.log").open("w")
        self.proc = subprocess.Popen(
            ["dockerd", "-H", self.host, "--data-root", f"/var/lib/rsi-docker{self.index}",
             "--exec-root", f"/run/rsi-docker{self.index}", "--pidfile", str(self.pidfile),
             "--bridge", self.bridge, "--iptables=false", "--ip6tables=false", "--ip-masq=false",
             "--containerd-namespace", f"rsi-d{self.index}", "--containerd-plugins-namespace",
             f"rsi-d{self.index}-plugins"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while subprocess.run(["docker", "info"], env=self.env(), capture_output=True).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dockerd {self.index} did not start; see {log_dir}/dockerd{self.index}.log")
            time.sleep(0.5)

    def stop_stale(self) -> None:
        """A daemon a killed test session left on this socket."""
        with contextlib.suppress(OSError, ValueError):
            _kill([int(self.pidfile.read_text().strip())], signal.SIGTERM)
            time.sleep(2)

    def load(self, image: str) -> None:
        """Give this daemon the image from the machine's own daemon (no registry)."""
        if subprocess.run(["docker", "image", "inspect", image], env=self.env(), capture_output=True).returncode == 0:
            return
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE,
                                env={k: v for k, v in os.environ.items() if k != "DOCKER_HOST"})
        subprocess.run(["docker", "load", "-q"], stdin=save.stdout, env=self.env(), check=True, capture_output=True)
        assert save.wait() == 0

    def containers(self, label: str = "rsi.job") -> list[str]:
        out = subprocess.run(["docker", "ps", "-aq", "--filter", f"label={label}"], env=self.env(),
                             capture_output=True, text=True, check=True).stdout
        return out.split()

    def stop(self) -> None:
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


@dataclass
class Worker:
    index: int
    daemon: Dockerd
    node_manager_port: int
    resource: str

    def raylet_pids(self) -> list[int]:
        return [p for p in _pids_with(f"--node_manager_port={self.node_manager_port}") if _is_raylet(p)]


def _is_raylet(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() == "raylet"
    except OSError:
        return False


class RayCluster:
    def __init__(self, workers: int = 2) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="rsi-ray-"))  # short: Ray's socket paths have a length limit
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.daemons = [Dockerd(i + 1) for i in range(workers)]
        self.workers: list[Worker] = []
        # Ray >= 2.5x turns token auth on by itself once ~/.ray/auth_token exists (any `ray.init()` that
        # starts a local cluster writes one), so a cluster started here and a driver that reads a different
        # token (or none) fail with InvalidAuthToken. The cluster has its own token, named through the
        # environment to every process started here and to this process's drivers.
        token = self.tmp / "auth_token"
        token.write_text(os.urandom(32).hex())
        self._saved_env = {k: os.environ.get(k) for k in AUTH_ENV}
        os.environ.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)})
        os.environ.pop("RAY_AUTH_TOKEN", None)
        if "ray._raylet" in sys.modules:  # Ray reads its config once at import: make it read the mode again
            sys.modules["ray._raylet"].Config.initialize("")

    def _ray_start(self, args: list[str], env: dict[str, str]) -> None:
        res = subprocess.run([*RAY, "start", *args, "--disable-usage-stats", f"--temp-dir={self.tmp}"],
                             env={**env, **FAST_HEALTH, "RAY_USAGE_STATS_ENABLED": "0"}, capture_output=True,
                             text=True, timeout=180)
        if res.returncode != 0:
            raise RuntimeError(f"ray start {' '.join(args)} failed: {res.stdout[-2000:]} {res.stderr[-2000:]}")

    def start(self, base_image: str, workers: int | None = None) -> RayCluster:
        """Daemons for every worker; the head and the first `workers` worker nodes (default: all)."""
        for d in self.daemons:
            d.start(self.tmp)
            d.load(base_image)
        self._ray_start(["--head", f"--port={self.port}", "--num-cpus=0", "--include-dashboard=false",
                         f"--node-manager-port={free_port()}", f"--dashboard-agent-listen-port={free_port()}",
                         f"--metrics-export-port={free_port()}", f"--runtime-env-agent-port={free_port()}",
                         f"--dashboard-agent-grpc-port={free_port()}"], dict(os.environ))
        for i, d in enumerate(self.daemons):
            self.workers.append(Worker(i + 1, d, free_port(), f"rsi_test_w{i + 1}"))
            if workers is None or i < workers:
                self.start_worker(self.workers[-1])
        return self

    def start_worker(self, w: Worker) -> None:
        base = 20000 + 200 * w.index
        self._ray_start([f"--address={self.address}", "--num-cpus=1",
                         f"--resources={json.dumps({'rsi_slot': 1, w.resource: 1})}",
                         f"--node-manager-port={w.node_manager_port}", f"--object-manager-port={free_port()}",
                         f"--min-worker-port={base}", f"--max-worker-port={base + 150}",
                         f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}",
                         f"--runtime-env-agent-port={free_port()}", f"--dashboard-agent-grpc-port={free_port()}"],
                        w.daemon.env())

    def kill_worker(self, w: Worker) -> None:
        """`kill -9` the node's raylet (its workers go down with it)."""
        pids = w.raylet_pids()
        assert pids, f"no raylet found for worker {w.index}"
        _kill(pids)

    def node_of(self) -> dict[str, int]:
        """Ray node id -> worker index, for every node ever seen (dead ones too)."""
        import ray

        out = {}
        for n in ray.nodes():
            for w in self.workers:
                if n.get("Resources", {}).get(w.resource) or w.resource in str(n.get("Resources")):
                    out[n["NodeID"]] = w.index
        return out

    def stop(self) -> None:
        pids = _pids_with(str(self.tmp))
        _kill(pids, signal.SIGTERM)
        time.sleep(2)
        _kill(_pids_with(str(self.tmp)))
        for d in self.daemons:
            d.stop()
        subprocess.run(["rm", "-rf", str(self.tmp)], capture_output=True)
        for k, v in self._saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
