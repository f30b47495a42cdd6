"""Services at the snapshot level (exec/trial.py): the agent's container is paused (not killed) for the change
check and the snapshot, resumed, and the verifier starts from the snapshot in its network namespace; the
contract can stop them instead; level 1 never joins. A reference solution whose tests found no service is
`service_unreachable` (the environment's fault), any other agent's is only noted (exec/services.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rsi.core.arm import Arm, TrialSpec, make_trial_id
from rsi.core.contract import Contract
from rsi.core.trial import BLAME, NEVER_PASS, ErrorType, TrialResult
from rsi.exec.services import service_failure
from rsi.exec.trial import TrialEnv, run_trial
from rsi.harness.builtin import load_agents
from rsi.sandbox.base import SandboxSpec
from rsi.sandbox.fake import FakeSandbox, FakeSandboxProvider
from rsi.store.files import load_task
from tests.taskgen import TEST_OK, R, make_task

REFUSED = (f'mkdir -p "{R}/logs/verifier"; echo "urllib.error.URLError: <urlopen error [Errno 111] Connection refused>'
           f' (http://localhost:8000/)"; echo 0 > "{R}/logs/verifier/reward.txt"\n')


class Recorder(FakeSandboxProvider):
    """The fake provider, keeping every spec it started and what each sandbox was asked to do."""

    def __init__(self, base: Path) -> None:
        super().__init__(base)
        self.specs: list[SandboxSpec] = []
        self.calls: list[tuple[str, str]] = []

    def start(self, spec: SandboxSpec) -> FakeSandbox:
        box = super().start(spec)
        self.specs.append(spec)
        for name in ("pause", "resume", "freeze"):
            self._spy(box, name)
        return box

    def _spy(self, box: FakeSandbox, name: str) -> None:
        real = getattr(box, name)

        def spy(*a: Any, **kw: Any) -> Any:
            self.calls.append((name, box.id))
            return real(*a, **kw)

        setattr(box, name, spy)


def _run(tmp_path: Path, task_dir: Path, agent: str = "oracle", **grading: object) -> tuple[TrialResult, Recorder]:
    load_agents()
    contract = Contract.model_validate({"hcp": "1.0.0", "substrate": {"tools": {}}, "grading": grading})
    provider = Recorder(tmp_path / "sb")
    task = load_task(task_dir)
    arm = Arm(agent=agent, generation="gen-0000")
    spec = TrialSpec(trial_id=make_trial_id("job-s", task.name, arm, 1), job_id="job-s", task_name=task.name,
                     task_digest=task.digest, task_path=str(task_dir), arm=arm, attempt=1,
                     trial_dir=str(tmp_path / "trial" / agent))
    return run_trial(spec, TrialEnv(provider=provider, contract=contract, base_image="b")), provider


def test_the_verifier_joins_the_paused_then_resumed_agent_container(tmp_path: Path) -> None:
    r, p = _run(tmp_path, make_task(tmp_path / "tasks", "svc"))
    assert r.passed and r.integrity == "snapshot", r.error_message
    agent_spec, verifier_spec = p.specs
    agent_id = next(box for name, box in p.calls if name == "pause")
    assert verifier_spec.network_of == agent_id and agent_spec.network_of is None
    assert [name for name, box in p.calls if box == agent_id][:2] == ["pause", "resume"]
    assert ("freeze", agent_id) not in p.calls[:2]
    assert "kept" in str(r.extra["agent_services"])
    assert r.extra["environment"] == {"from": "b", "release": "", "apt_installed": {}}


def test_a_contract_that_stops_services_freezes_and_never_joins(tmp_path: Path) -> None:
    r, p = _run(tmp_path, make_task(tmp_path / "tasks", "svc"), agent_services="stopped")
    assert r.passed
    assert all(s.network_of is None for s in p.specs)
    assert p.calls[0][0] == "freeze" and "agent_services" not in r.extra


def test_declared_outputs_never_join_the_agent(tmp_path: Path) -> None:
    d = make_task(tmp_path / "tasks", "l1")
    toml = (d / "task.toml").read_text()
    (d / "task.toml").write_text(toml.replace("[verifier]\n", '[verifier]\nreads = ["/app"]\n'))
    r, p = _run(tmp_path, d)
    assert r.passed and r.integrity == "declared_outputs"
    assert all(s.network_of is None for s in p.specs)


def test_an_oracle_whose_tests_found_no_service_is_the_environments_fault(tmp_path: Path) -> None:
    d = make_task(tmp_path / "tasks", "gone", test=REFUSED)
    r, _ = _run(tmp_path, d)
    assert not r.passed and r.error_type == ErrorType.SERVICE_UNREACHABLE
    assert "localhost:8000" in str(r.error_message) and "environment" in str(r.error_message)
    assert BLAME[ErrorType.SERVICE_UNREACHABLE] == "task" and ErrorType.SERVICE_UNREACHABLE in NEVER_PASS


def test_any_other_agent_without_a_service_is_a_plain_failure_with_a_note(tmp_path: Path) -> None:
    d = make_task(tmp_path / "tasks", "gone", test=REFUSED)
    r, _ = _run(tmp_path, d, agent="nop")
    assert not r.passed and r.error_type is None
    assert "localhost:8000" in str(r.extra["service_unreachable"])


def test_an_honest_failure_is_not_blamed_on_a_service(tmp_path: Path) -> None:
    d = make_task(tmp_path / "tasks", "wrong", solve="true\n", test=TEST_OK)
    r, _ = _run(tmp_path, d)
    assert not r.passed and r.error_type is None and "service_unreachable" not in r.extra


@pytest.mark.parametrize(("line", "where"), [
    ("E   urllib.error.URLError: <urlopen error [Errno 99] Cannot assign requested address>", ""),
    ("curl: (7) Failed to connect to localhost port 8000 after 0 ms: Couldn't connect to server", "localhost:8000"),
    ("requests.exceptions.ConnectionError: HTTPConnectionPool(host='localhost', port=8080): Max retries exceeded "
     "(Caused by NewConnectionError: [Errno 111] Connection refused)", "localhost:8080"),
    ("ssh: connect to host 127.0.0.1 port 2222: Connection refused", "127.0.0.1:2222"),
])
def test_service_failures_are_read_from_the_tests_output(line: str, where: str) -> None:
    why = service_failure("collected 3 items\n" + line + "\n", "")
    assert why is not None and line.strip() in why and (where in why)


def test_an_address_elsewhere_in_the_output_names_the_service() -> None:
    out = ('BASE = "http://localhost:8000"\n    with urllib.request.urlopen(BASE + path, timeout=10) as r:\n'
           "E   OSError: [Errno 99] Cannot assign requested address\n")
    assert "on localhost:8000: E   OSError: [Errno 99]" in str(service_failure(out, ""))


def test_pytests_locals_name_the_service() -> None:
    out = ("address = ('localhost', 8000), timeout = 10, source_address = None\n"
           "E               OSError: [Errno 99] Cannot assign requested address\n")
    assert "on localhost:8000:" in str(service_failure(out, ""))


def test_a_wrong_answer_is_not_a_service_failure() -> None:
    assert service_failure("E   AssertionError: assert 'Hello' == 'Hi'\n1 failed", "") is None
