"""Trackers with the real tools (issue 38): a real `mlflow server` on loopback, TensorBoard's event reader and a
W&B offline run directory, after a short cycle on the fake sandbox (tests/trackkit.py) reported to all three.
What a user would open in the MLflow UI / `tensorboard --logdir` / `wandb sync` is read back here: the cycle's run,
its phases' nested runs, the per-step training curves, the decision, the artifacts."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from rsi.core.settings import MlflowSettings, TensorBoardSettings, TrackingSettings, WandbSettings
from rsi.loop.context import WorkspaceContext
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.track.session import open_session
from tests.trackkit import KL, LOSSES, VALIDATION, tracked_cycle
from tests.unit.test_cycle_loop import ctx  # noqa: F401 - the fixture

PHASES = ("discover", "expand", "update", "promote")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def mlflow_server(tmp_path: Path) -> Iterator[str]:
    """`mlflow server` on 127.0.0.1 with its own SQLite store and artifact root, up until /health answers."""
    port = _free_port()
    log = (tmp_path / "mlflow-server.log").open("w")
    bin_dir = Path(sys.executable).parent
    exe = str(bin_dir / "mlflow") if (bin_dir / "mlflow").exists() else "mlflow"
    proc = subprocess.Popen([exe, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                             "--backend-store-uri", f"sqlite:///{tmp_path / 'server.db'}",
                             "--artifacts-destination", str(tmp_path / "server-artifacts")],
                            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mlflow server did not start: {(tmp_path / 'mlflow-server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:  # its workers shut down gracefully for a while; nothing to keep
            os.killpg(proc.pid, 9)
            proc.wait(timeout=10)
        log.close()


def _wandb_records(path: Path) -> list[Any]:
    """The records of a W&B run file (`run-<id>.wandb`), decoded with wandb's own protobuf `Record`. The file is
    LevelDB-log framed (a 7-byte `:W&B` header, 32 KiB blocks, each record chunk: crc32, length, type); wandb 0.2x
    ships no Python reader for it any more, so the framing is undone here and the content is wandb's."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B run file"
    out, buf, pos, block = [], b"", 7, 32768
    while pos + 7 <= len(data):
        if block - pos % block < 7:  # the block's tail is padding
            pos += block - pos % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if length == 0 and kind == 0:
            break
        buf += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            rec = pb.Record()  # type: ignore[attr-defined]
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def test_a_cycle_in_mlflow_tensorboard_and_wandb(ctx: WorkspaceContext, provider: FakeSandboxProvider,  # noqa: F811
                                                 tmp_path: Path, mlflow_server: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # an offline run that tried the network would fail
    settings = TrackingSettings(mlflow=MlflowSettings(tracking_uri=mlflow_server, experiment="rsi-itest"),
                                tensorboard=TensorBoardSettings(log_dir=str(tmp_path / "tb")),
                                wandb=WandbSettings(dir=str(tmp_path / "wb")))
    warned: list[str] = []
    session = open_session(["mlflow", "tensorboard", "wandb"], settings, ctx.ws.root, warn=warned.append)
    assert session is not None
    out = tracked_cycle(ctx, provider, tmp_path, session)
    assert out.verdict == "promoted" and warned == []
    cyc = out.job_id

    # -- MLflow, read back from the server -------------------------------------------------------
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_server)
    exp = client.get_experiment_by_name("rsi-itest")
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    top = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert [r.info.run_name for r in top] == [f"cycle {cyc}"]
    parent = top[0]
    children = {r.info.run_name: r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert sorted(children) == sorted(PHASES)
    assert all(r.info.status == "FINISHED" for r in runs)
    assert parent.data.params["generation"] == "gen-0000" and parent.data.params["budget"] == "100"
    assert parent.data.params["config_digest"] == ctx.generation("gen-0000").harness_config.digest
    assert parent.data.tags["decision"] == "promoted" and children["promote"].data.tags["decision"] == "promoted"
    upd = children["update"].info.run_id
    assert [(m.step, m.value) for m in client.get_metric_history(upd, "train/loss")] == list(enumerate(LOSSES, 1))
    assert [(m.step, m.value) for m in client.get_metric_history(upd, "train/kl")] == list(enumerate(KL, 1))
    assert [(m.step, m.value) for m in client.get_metric_history(upd, "train/val_logprob")] == \
        [(s, v) for s, v in VALIDATION]
    prom = children["promote"].data.metrics
    assert prom["gate/significance"] == 1.0 and prom["candidate_rate"] > prom["parent_rate"]
    assert "coverage_rate" in children["expand"].data.metrics
    arts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert {"diff-report.html", "gen-0001.yaml"} <= arts
    got = Path(client.download_artifacts(parent.info.run_id, "gen-0001.yaml", str(tmp_path / "dl")))
    assert got.read_text() == (ctx.ws.root / "generations" / "gen-0001.yaml").read_text()

    # -- TensorBoard, read with its own event reader ---------------------------------------------
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb" / cyc / "update"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("train/loss")] == list(enumerate(LOSSES, 1))
    assert "params" in acc.Tags()["tensors"]
    cyc_acc = EventAccumulator(str(tmp_path / "tb" / cyc))
    cyc_acc.Reload()
    assert cyc_acc.Scalars("wall_sec") and {"params", "tags"} <= set(cyc_acc.Tags()["tensors"])
    assert (tmp_path / "tb" / cyc / "artifacts" / "diff-report.html").is_file()

    # -- W&B, the offline run directories --------------------------------------------------------
    run_dirs = sorted((tmp_path / "wb" / "wandb").glob("offline-run-*"))
    assert len(run_dirs) == 5
    by_job: dict[str, list[Any]] = {}
    for d in run_dirs:
        recs = _wandb_records(next(d.glob("run-*.wandb")))
        run = next(r.run for r in recs if r.WhichOneof("record_type") == "run")
        assert run.run_group == cyc
        by_job[run.job_type] = recs
        by_job[run.job_type + ":dir"] = [d]
    assert sorted(k for k in by_job if ":" not in k) == sorted(["cycle", *PHASES])
    history = [r.history for r in by_job["update"] if r.WhichOneof("record_type") == "history"]
    loss = []
    for h in history:
        items = {i.key or "/".join(i.nested_key): i.value_json for i in h.item}
        if "train/loss" in items:
            loss.append((int(items["_step"]), float(items["train/loss"])))
    assert loss == list(enumerate(LOSSES, 1))
    config = [r.config for r in by_job["cycle"] if r.WhichOneof("record_type") == "config"]
    keys = {i.key for c in config for i in c.update}
    assert {"generation", "config_digest", "budget"} <= keys
    assert (by_job["cycle:dir"][0] / "files" / "diff-report.html").is_file()
