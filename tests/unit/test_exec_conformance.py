"""The executor conformance suite (tests/exec_conformance.py) on the `local` executor; the same
suite runs on `ray` against a real cluster in tests/integration/test_ray_cluster.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rsi.core.errors import NotFoundError
from rsi.exec.local import EXECUTORS, LocalExecutor
from rsi.exec.trial import TrialEnv
from rsi.sandbox.fake import FakeSandboxProvider
from tests import exec_conformance as conf


def _make(tmp_path: Path) -> conf.Make:
    def make(fn: Any, gate: Any) -> LocalExecutor:
        env = TrialEnv(provider=FakeSandboxProvider(tmp_path / "fake"), contract=conf.contract(), base_image="b")
        return LocalExecutor(env, concurrency=2, gate=gate, trial_fn=fn)

    return make


def test_runs_each_trial_once_and_brings_its_files_back(tmp_path: Path) -> None:
    conf.check_runs_each_trial_once_and_brings_its_files_back(_make(tmp_path), tmp_path)


def test_budget_gate_blocks_and_release_resumes(tmp_path: Path) -> None:
    conf.check_budget_gate_blocks_and_release_resumes(_make(tmp_path), tmp_path)


def test_cancel_stops_running_and_queued_trials(tmp_path: Path) -> None:
    conf.check_cancel_stops_running_and_queued_trials(_make(tmp_path), tmp_path)


def test_executors_by_name() -> None:
    assert EXECUTORS.names() == ["local", "ray"]
    with pytest.raises(NotFoundError, match="known: local, ray"):
        EXECUTORS.get("slurm")


def test_artifacts_travel_as_a_size_capped_tar(tmp_path: Path) -> None:
    from rsi.exec.ray_node import pack_dir, unpack_dir

    src = tmp_path / "trial"
    (src / "verifier").mkdir(parents=True)
    (src / "verifier" / "test-stdout.txt").write_text("ok\n")
    (src / "trajectory.json").write_text("{}")
    (src / "big.bin").write_bytes(b"x" * 5000)
    data, dropped = pack_dir(src, cap=1000)
    assert dropped == ["big.bin"]
    unpack_dir(data, tmp_path / "back")
    assert (tmp_path / "back" / "verifier" / "test-stdout.txt").read_text() == "ok\n"
    assert not (tmp_path / "back" / "big.bin").exists()


def test_executor_chosen_in_rsi_yaml_or_on_the_command_line(workspace: Any) -> None:
    from typer.testing import CliRunner

    from rsi.cli.app import app
    from rsi.core.settings import WorkspaceSettings

    s = WorkspaceSettings.model_validate({"executor": {"name": "ray", "address": "head:6379"}})
    assert (s.executor.name, s.executor.address) == ("ray", "head:6379")
    assert WorkspaceSettings().executor.name == "local"
    r = CliRunner().invoke(app, ["-w", str(workspace.ws.root), "run", "x", "--agent", "oracle", "--executor", "slurm"])
    assert r.exit_code == 2 and "unknown executor 'slurm'; known: local, ray" in r.output
