"""`rsi doctor --executor ray`: each slot node says whether it reaches the model endpoint.

The cluster is faked (the node reports `check_node` would send back); `check_node` itself, the
part that runs on a worker, is run here against a real HTTP server and a closed port.
"""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import rsi.exec.ray_exec as ray_exec
from rsi.exec.ray_node import NodeReport, check_node, node_name
from rsi.loop.doctor import ENDPOINT_FIX, Check, cluster_checks

URL = "http://10.0.0.5:8000/v1"


def _fake_cluster(monkeypatch: pytest.MonkeyPatch, reports: list[NodeReport]) -> list[tuple[Any, ...]]:
    asked: list[tuple[Any, ...]] = []

    def on_each_node(fn: Any, *args: Any, timeout: float = 120) -> list[NodeReport]:
        asked.append(args)
        return reports

    monkeypatch.setattr(ray_exec, "connect", lambda address=None: None)
    monkeypatch.setattr(ray_exec, "slot_nodes", lambda: [{"NodeID": r.node, "Resources": {"rsi_slot": 1}}
                                                          for r in reports])
    monkeypatch.setattr(ray_exec, "on_each_node", on_each_node)
    return asked


def _by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def test_each_node_reports_whether_it_reaches_the_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    reports = [
        NodeReport(node="a" * 56, host="w1", docker_host="unix:///a.sock", base_image_id="sha256:1"),
        NodeReport(node="b" * 56, host="w2", docker_host="unix:///b.sock", base_image_id="sha256:1",
                   endpoint=f"{URL} unreachable from this node: [Errno 113] No route to host"),
        NodeReport(node="c" * 56, host="w3", docker_host="unix:///c.sock", daemon="connection refused",
                   endpoint=f"{URL} unreachable from this node: timed out"),
    ]
    asked = _fake_cluster(monkeypatch, reports)
    checks = _by_name(cluster_checks("head:6379", "rsi-base:bookworm", URL))
    assert asked == [("rsi-base:bookworm", URL)]  # the nodes are asked for the URL itself
    assert checks["ray cluster"].ok and "3 slot node(s)" in checks["ray cluster"].detail
    a, b, c = (checks[f"node {x * 12} model endpoint"] for x in "abc")
    assert a.ok and a.detail == f"w1: {URL} reachable" and a.fix is None
    assert not b.ok and "w2" in b.detail and "No route to host" in b.detail and b.fix == ENDPOINT_FIX
    # a node whose daemon is down still says whether it reaches the endpoint
    assert not checks[f"node {'c' * 12} docker"].ok
    assert not c.ok and "timed out" in c.detail


def test_the_embedded_server_is_reachable_only_from_nodes_on_the_drivers_machine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    here = socket.gethostname()
    reports = [NodeReport(node="a" * 56, host=here, docker_host="unix:///a.sock", base_image_id="sha256:1"),
               NodeReport(node="b" * 56, host="elsewhere", docker_host="unix:///b.sock", base_image_id="sha256:1")]
    asked = _fake_cluster(monkeypatch, reports)
    checks = _by_name(cluster_checks(None, "rsi-base:bookworm", "embedded"))
    assert asked == [("rsi-base:bookworm", None)]  # nothing to ask the nodes: there is no URL yet
    same, other = checks[f"node {'a' * 12} model endpoint"], checks[f"node {'b' * 12} model endpoint"]
    assert same.ok and "embedded server" in same.detail
    assert not other.ok and f"{here}'s localhost" in other.detail and other.fix == ENDPOINT_FIX


def test_no_endpoint_no_endpoint_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_cluster(monkeypatch, [NodeReport(node="a" * 56, host="w1", docker_host="d", base_image_id="x")])
    assert not [c for c in cluster_checks(None, "b", None) if c.name.endswith("model endpoint")]


@pytest.fixture
def http_url() -> Iterator[str]:
    class Quiet(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'{"data": []}')

        def log_message(self, *_a: object) -> None: ...

    server = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_check_node_asks_the_endpoint_from_where_it_runs(http_url: str) -> None:
    assert check_node("", http_url).endpoint is None
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    rep = check_node("", closed)
    assert rep.endpoint is not None and rep.endpoint.startswith(f"{closed} unreachable from this node")


def test_node_name_outside_ray_is_the_host_and_starts_no_ray() -> None:
    """Outside a Ray worker the node is the host name; asking must not start a local Ray instance (13 s, and it
    stays running behind the caller)."""
    import ray

    assert not ray.is_initialized()
    assert node_name() == socket.gethostname()
    assert not ray.is_initialized()
