"""Built-in agents oracle and nop, and the agent registry."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rsi.core.contract import Contract
from rsi.core.errors import NotFoundError
from rsi.core.trial import ErrorType
from rsi.harness.agent import AGENTS
from rsi.harness.atif import load_trajectory
from rsi.harness.builtin import SOLVE_COMMAND, NopAgent, OracleAgent, load_agents
from rsi.harness.fakes import ScriptedSandbox, make_context
from rsi.sandbox.base import ExecResult

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def contract() -> Contract:
    return Contract.model_validate(yaml.safe_load((ROOT / "contracts" / "hcp-1.0.yaml").read_text()))


def _task_dir(tmp_path: Path, solve: str | None = "echo solved > /app/out.txt\n") -> Path:
    d = tmp_path / "task"
    (d / "solution").mkdir(parents=True)
    if solve is not None:
        (d / "solution" / "solve.sh").write_text(solve)
    return d


def test_registry_knows_all_three_agents() -> None:
    assert {"oracle", "nop", "harness"} <= set(load_agents())
    assert isinstance(AGENTS.create("oracle"), OracleAgent)
    with pytest.raises(NotFoundError, match="oracle"):
        AGENTS.get("oracel")


def test_oracle_copies_solution_and_runs_it_in_workdir(tmp_path: Path, contract: Contract) -> None:
    sb = ScriptedSandbox(outputs={SOLVE_COMMAND: ExecResult(0, "did it\n", "warn\n")})
    ctx = make_context(
        tmp_path / "trial", contract=contract, task_dir=_task_dir(tmp_path), agent_timeout_sec=77
    )
    out = OracleAgent().run(sb, ctx)
    assert sb.files["/solution/solve.sh"] == b"echo solved > /app/out.txt\n"
    assert sb.commands == [(SOLVE_COMMAND, 77, "/app")]
    assert not out.timed_out and out.error_type is None
    log = (tmp_path / "trial" / "agent.log").read_text()
    assert "did it" in log and "warn" in log
    traj = load_trajectory(out.trajectory_path)
    assert traj.steps[-1].tool_calls[0].arguments == {"command": SOLVE_COMMAND}


def test_oracle_timeout_is_reported(tmp_path: Path, contract: Contract) -> None:
    sb = ScriptedSandbox(outputs={SOLVE_COMMAND: ExecResult(137, "", "", timed_out=True)})
    ctx = make_context(tmp_path / "trial", contract=contract, task_dir=_task_dir(tmp_path))
    assert OracleAgent().run(sb, ctx).timed_out


def test_oracle_without_solution_is_an_agent_error(tmp_path: Path, contract: Contract) -> None:
    ctx = make_context(tmp_path / "trial", contract=contract, task_dir=_task_dir(tmp_path, solve=None))
    sb = ScriptedSandbox()
    out = OracleAgent().run(sb, ctx)
    assert out.error_type == ErrorType.AGENT_ERROR and "solve.sh" in (out.error_message or "")
    assert sb.commands == []


def test_nop_does_nothing_but_writes_a_trajectory(tmp_path: Path, contract: Contract) -> None:
    sb = ScriptedSandbox()
    out = NopAgent().run(sb, make_context(tmp_path / "trial", contract=contract))
    assert sb.commands == [] and sb.files == {}
    assert load_trajectory(out.trajectory_path).steps[0].source == "user"
