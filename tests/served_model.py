"""The embedded model server as the integration tests start it: `rsi model serve` on a free loopback port in its
own process group, waited on until healthy (failing with its log's tail if it exits or is not ready in time), and
stopped after."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rsi.models.client import ChatClient
from tests.raycluster import free_port


@contextmanager
def served_model(log_dir: Path, *, cwd: Path | None = None, ready_sec: float = 600,
                 args: tuple[str, ...] = ()) -> Iterator[int]:
    """Yield the port of a fresh embedded server whose output goes to `log_dir/serve.log` (`args`: more options
    for `rsi model serve`)."""
    port = free_port()
    log = log_dir / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "rsi.cli.model", "serve", "--port", str(port), *args],
                                cwd=cwd,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with ChatClient(f"http://127.0.0.1:{port}/v1") as probe:
            deadline = time.monotonic() + ready_sec
            while not probe.healthy():
                assert proc.poll() is None, f"server exited {proc.returncode}:\n{log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"server not ready:\n{log.read_text()[-3000:]}"
                time.sleep(0.5)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)
