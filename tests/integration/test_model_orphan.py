"""A model server started by `rsi run` / `rsi doctor` must not outlive them, even after kill -9."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.model, pytest.mark.timeout(600)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_started_server_dies_with_a_killed_parent(tmp_path: Path) -> None:
    port = free_port()
    script = tmp_path / "holder.py"
    script.write_text(textwrap.dedent("""
        import time
        from rsi.models.embedded import ensure_server
        with ensure_server("embedded") as (url, started):
            print("READY", started, flush=True)
            time.sleep(600)
    """))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, RSI_MODEL_PORT=str(port)))
    try:
        line = parent.stdout.readline() if parent.stdout else ""
        assert line.split() == ["READY", "True"], line
        assert answers(port)
        parent.send_signal(signal.SIGKILL)  # no finally runs in the parent
        parent.wait(timeout=10)
        deadline = time.monotonic() + 30
        while answers(port) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not answers(port), "the embedded server outlived the process that started it"
    finally:
        if parent.poll() is None:
            parent.kill()


def test_started_server_outlives_the_thread_that_started_it(tmp_path: Path) -> None:
    # Linux's parent-death signal fires when the *thread* that forked exits; rsi ties the server's
    # life to the process instead, so a server started from a short-lived thread keeps serving.
    port = free_port()
    script = tmp_path / "thread_holder.py"
    script.write_text(textwrap.dedent("""
        import socket, threading, time
        from rsi.models.embedded import ensure_server
        held = {}
        def start():
            cm = ensure_server("embedded")
            held["url"] = cm.__enter__()
            held["cm"] = cm
        t = threading.Thread(target=start)
        t.start(); t.join()
        time.sleep(3)  # the starting thread is gone
        with socket.socket() as s:
            s.settimeout(1)
            print("ALIVE" if s.connect_ex(("127.0.0.1", int(held["url"][0].rsplit(":", 1)[1].split("/")[0]))) == 0
                  else "DEAD", flush=True)
        held["cm"].__exit__(None, None, None)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=400,
                         env=dict(os.environ, RSI_MODEL_PORT=str(port)))
    assert out.stdout.strip().splitlines()[-1:] == ["ALIVE"], out.stdout + out.stderr[-2000:]
    assert not answers(port), "the server must stop when the context exits"
