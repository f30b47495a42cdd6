"""A verifier that must set itself up offline: refused before any trial when it cannot, blamed on the task
when it fails to at run time (exec/verifier_offline.py), served from the host's wheels when it can."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsi.core.contract import Contract
from rsi.core.errors import InputError
from rsi.core.trial import BLAME, NEVER_PASS, ErrorType
from rsi.exec import verifier_offline
from rsi.exec.verifier_offline import check_task, network_field, offline_refusal, setup_failure
from rsi.sandbox.wheel_cache import WheelSet
from rsi.store.files import load_contract, load_task
from tests.taskgen import make_task

CONTRACT = Path(__file__).resolve().parents[2] / "contracts" / "hcp-1.0.yaml"
TB2_TEST = ("apt-get update\napt-get install -y curl\ncurl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh\n"
            "source $HOME/.local/bin/env\nuvx -p 3.13 -w pytest==8.4.1 {extra}pytest /tests/test_outputs.py\n")


@pytest.fixture
def contract() -> Contract:
    c = load_contract(CONTRACT)
    assert c.limits.sandbox.network is False  # the default contract forbids the network
    return c


def _task(tmp_path: Path, name: str, test: str, network: str = "allow_internet = true") -> Path:
    d = make_task(tmp_path, name, test=test)
    toml = (d / "task.toml").read_text()
    (d / "task.toml").write_text(toml.replace('network_mode = "none"', network))
    return d


def test_the_refusal_rule() -> None:
    assert offline_refusal("t", "environment.allow_internet", [], asks_network=True, contract_network=False) is None
    assert offline_refusal("t", "f", ["uvx ruff (not pinned to one version)"], asks_network=False,
                           contract_network=False) is None  # it never asked for a network: nothing to refuse
    assert offline_refusal("t", "f", ["x"], asks_network=True, contract_network=True) is None  # it gets one
    why = offline_refusal("acme/t", "environment.allow_internet", ["uvx ruff (not pinned to one version)", "y"],
                          asks_network=True, contract_network=False)
    assert why is not None and "acme/t" in why and "uvx ruff" in why and "(and 1 more)" in why
    assert "pin it to one version" in why and "allow the network in the contract" in why


def test_an_unpinned_requirement_is_refused_naming_task_field_and_fix(tmp_path: Path, contract: Contract) -> None:
    d = _task(tmp_path, "needs-ruff", TB2_TEST.format(extra="-w ruff ").replace("uvx", "uvx", 1))
    with pytest.raises(InputError) as e:
        check_task(load_task(d), contract, fetch=False)
    msg = str(e.value)
    assert e.value.exit_code == 2 and "\n" not in msg
    assert msg.startswith(f"{d / 'task.toml'}: environment.allow_internet:")
    assert "uvx -w ruff (not pinned to one version)" in msg and "pin it" in msg and "contract" in msg


@pytest.mark.parametrize(("extra_test", "dockerfile", "refused"), [
    ("apt-get install -y ffmpeg\n", None, "apt-get install ffmpeg"),
    ("apt-get install -y ffmpeg\n", "FROM python:3.13\nRUN apt-get update && apt-get install -y ffmpeg\n", None),
    ("curl -sSf -o /tmp/x.csv https://data.example.org/x.csv\n", None, "a download of https://data.example.org"),
    ("curl -s http://localhost:8080/health\n", None, "apt-get install curl"),  # rsi's curl is no real curl
    ("git clone https://github.com/acme/x /tmp/x\n", None, "a download of https://github.com/acme/x"),
])
def test_what_else_rsi_cannot_provide_offline(tmp_path: Path, contract: Contract, extra_test: str,
                                              dockerfile: str | None, refused: str | None,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verifier_offline, "serve_wheels", lambda needs, fetch=True: None)
    d = _task(tmp_path, "t", TB2_TEST.format(extra="") + extra_test, 'network_mode = "public"')
    if dockerfile:
        (d / "environment" / "Dockerfile").write_text(dockerfile)
    if refused is None:
        check_task(load_task(d), contract)
        return
    with pytest.raises(InputError, match="environment.network_mode") as e:
        check_task(load_task(d), contract)
    assert refused in str(e.value)


def test_pinned_requirements_pass_when_their_wheels_come(tmp_path: Path, contract: Contract,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[list[str]] = []

    def serve(needs: object, fetch: bool = True) -> WheelSet | str:
        asked.append(needs.pinned)  # type: ignore[attr-defined]
        return WheelSet(tmp_path, "k", [], ["3.13"], [], fetched=True) if len(asked) == 1 else "pip: no such version"

    monkeypatch.setattr(verifier_offline, "serve_wheels", serve)
    task = load_task(_task(tmp_path, "tb2", TB2_TEST.format(extra="")))
    check_task(task, contract)  # served: runs offline
    assert asked == [["pytest==8.4.1"]]
    with pytest.raises(InputError, match="which the host could not fetch .pip: no such version."):
        check_task(task, contract)


def test_a_task_that_asks_for_no_network_or_gets_one_is_not_refused(tmp_path: Path, contract: Contract,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(verifier_offline, "serve_wheels", lambda needs, fetch=True: "unreachable")
    check_task(load_task(_task(tmp_path, "no-net", "uvx ruff check\n", 'network_mode = "none"')), contract)
    open_contract = contract.model_copy(deep=True)
    open_contract.limits.sandbox.network = True
    check_task(load_task(_task(tmp_path, "net", "uvx ruff check\n")), open_contract)


def test_the_field_named_is_the_one_that_asks() -> None:
    from rsi.core.task import parse_task_toml

    base = '[task]\nname = "x"\n'
    assert network_field(parse_task_toml(base + "[environment]\nallow_internet = true\n", "t")) == \
        "environment.allow_internet"
    assert network_field(parse_task_toml(base + '[environment]\nnetwork_mode = "public"\n', "t")) == \
        "environment.network_mode"
    assert network_field(parse_task_toml(base + '[verifier]\nnetwork_mode = "public"\n', "t")) == \
        "verifier.network_mode"


@pytest.mark.parametrize(("stdout", "stderr", "said"), [
    ("", "  × No solution found when resolving tool dependencies:\n  ╰─▶ Because pytest==9.9 was not found in the "
     "provided package locations\n", "uv could not install"),
    ("", "error: Failed to download `pytest==8.4.1`\n  Caused by: Network connectivity is disabled\n",
     "uv could not install"),
    ("", "E: Unable to locate package ffmpeg\n", "apt-get could not install"),
    ("", "ERROR: No matching distribution found for requests\n", "pip could not install"),
    ("", "curl: (6) Could not resolve host: example.org\n", "reach the network"),
    ("", "/tests/test.sh: line 9: uvx: command not found\n", "tools are missing"),
    ("", "rsi shim: ...\ncurl: command not found\n", "tools are missing"),  # rsi's wrapper, no real curl
    # the interpreter the tools run on cannot start: a stand-in's venv without its standard library (issue 49)
    ("", "Using CPython 3.13.5 interpreter at: /usr/local/bin/python3.13\nerror: Querying Python at "
     "`/app/.venv/bin/python` failed with exit status exit status: 1\n[stderr]\nCould not find platform independent "
     "libraries <prefix>\nFatal Python error: Failed to import encodings module\nModuleNotFoundError: No module "
     "named 'encodings'\n", "interpreter could not start"),
    ("", "Fatal Python error: init_fs_encoding: failed to get the Python codec of the filesystem encoding\n",
     "interpreter could not start"),
])
def test_a_verifier_that_could_not_install_its_tools_is_recognised(stdout: str, stderr: str, said: str) -> None:
    why = setup_failure(stdout, stderr)
    assert why is not None and said in why


def test_failing_tests_are_not_a_setup_failure() -> None:
    out = ("===== test session starts =====\nFAILED test_outputs.py::test_x - assert 'Unable to locate package' "
           "in ...\n===== 1 failed =====\n")
    assert setup_failure(out, "") is None
    assert setup_failure("3 passed\n", "rsi shim: apt-get install curl answered offline\n") is None
    # the solution's own program crashing under a bash test is the solution's, not a broken verifier
    assert setup_failure("", "Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n"
                         ) is None


def test_a_setup_failure_is_a_task_side_verifier_error_never_a_pass() -> None:
    from rsi.exec.verify import VerifierRun, judge
    from rsi.harness.agent import AgentOutcome
    from rsi.sandbox.base import ExecResult

    contract = load_contract(CONTRACT)
    res = ExecResult(exit_code=0, stdout="", stderr="error: Failed to download `pytest==8.4.1`\n", timed_out=False)
    v = judge(VerifierRun(res, {"reward.txt": b"0\n"}), [], AgentOutcome(), contract, 60, 60)
    assert v.error_type == ErrorType.VERIFIER_ERROR and not v.passed and "could not set itself up" in str(v.message)
    assert BLAME[ErrorType.VERIFIER_ERROR] == "task" and ErrorType.VERIFIER_ERROR in NEVER_PASS
    # a tamper still outranks it, and a real pass is never turned into an error
    t = judge(VerifierRun(res, {"reward.txt": b"0\n"}), [("/usr/bin/uv", "replaced")], AgentOutcome(), contract, 60,
              60)
    assert t.error_type == ErrorType.TAMPER_DETECTED
    ok = judge(VerifierRun(res, {"reward.txt": b"1\n"}), [], AgentOutcome(), contract, 60, 60)
    assert ok.passed and ok.error_type is None


def test_attribution_blames_the_task_when_its_verifier_never_ran() -> None:
    from rsi.core.attribution import Evidence, attribute

    broken = [Evidence(f"h{i}", "harness", False, task_side=True) for i in range(2)]
    oracle = [Evidence("o", "oracle", True)]
    v = attribute(broken, oracle, [], [])
    assert v is not None and v.kind == "task" and "verifier_error" in v.reason  # not "model", whatever the oracle did
    mixed = [broken[0], Evidence("h9", "harness", False)]
    m = attribute(mixed, oracle, [Evidence("n", "nop", False)], [])
    assert m is not None and m.kind == "model"  # one plain failure is the model's evidence as before
