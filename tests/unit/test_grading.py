"""Reward parsing and the tamper rule: what turns a verifier's files and `docker diff` into a verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from rsi.core.contract import Contract
from rsi.core.errors import InputError
from rsi.core.task import Task, TaskSpec
from rsi.core.trial import ErrorType
from rsi.exec.grading import GradingPolicy, RewardError, grading_policy, leaves, parse_reward
from rsi.exec.tamper import tamper_findings

KEY = "reward"
CONTRACT = Contract.model_validate({"hcp": "1.0.0", "substrate": {"tools": {}}})


@pytest.mark.parametrize(("text", "value"), [(b"1", 1.0), (b"0\n", 0.0), (b"  0.25 \n", 0.25), (b"1e0", 1.0)])
def test_reward_txt_is_a_number(text: bytes, value: float) -> None:
    reward, metrics = parse_reward({"reward.txt": text, "reward.json": None}, KEY)
    assert reward == value
    assert metrics == {KEY: value}


def test_reward_json_map_uses_the_reward_key() -> None:
    reward, metrics = parse_reward({"reward.json": b'{"reward": 0.5, "style": 1}'}, KEY)
    assert reward == 0.5
    assert metrics == {"reward": 0.5, "style": 1.0}


def test_reward_json_without_the_key_is_invalid_not_a_mean() -> None:
    # {"passed": 3, "failed": 7} once read as 5.0: a map without the contract's key is never a reward.
    with pytest.raises(RewardError) as e:
        parse_reward({"reward.json": b'{"passed": 3, "failed": 7}'}, KEY)
    assert e.value.error_type == ErrorType.REWARD_INVALID
    assert "no 'reward' key" in str(e.value)


def test_both_files_must_agree() -> None:
    assert parse_reward({"reward.txt": b"1", "reward.json": b'{"reward": 1, "x": 2}'}, KEY)[0] == 1.0
    with pytest.raises(RewardError) as e:
        parse_reward({"reward.txt": b"0", "reward.json": b'{"reward": 1}'}, KEY)
    assert e.value.error_type == ErrorType.REWARD_INVALID


@pytest.mark.parametrize("files", [{"reward.txt": b"1.5"}, {"reward.txt": b"-0.1"}, {"reward.json": b'{"reward": 2}'},
                                   {"reward.txt": b"1e308"}])
def test_reward_outside_the_declared_range_is_invalid(files: dict[str, bytes]) -> None:
    with pytest.raises(RewardError) as e:
        parse_reward(files, KEY, (0.0, 1.0))
    assert e.value.error_type == ErrorType.REWARD_INVALID


def test_missing_reward_is_reward_missing() -> None:
    with pytest.raises(RewardError) as e:
        parse_reward({"reward.txt": None, "reward.json": None}, KEY)
    assert e.value.error_type == ErrorType.REWARD_MISSING


@pytest.mark.parametrize(
    "files",
    [
        {"reward.txt": b""},
        {"reward.txt": b"pass"},
        {"reward.txt": b"nan"},
        {"reward.txt": b"inf"},
        {"reward.txt": b"-inf"},
        {"reward.txt": b"1 1"},
        {"reward.json": b"{not json"},
        {"reward.json": b"{}"},
        {"reward.json": b"[1]"},
        {"reward.json": b"1"},
        {"reward.json": b'{"reward": 1, "other": "x"}'},
        {"reward.json": b'"1"'},
        {"reward.json": b"true"},
        {"reward.json": b'{"reward": true}'},
        {"reward.json": b'{"reward": "1"}'},
        {"reward.json": b'{"reward": NaN}'},
        {"reward.json": b'{"reward": Infinity}'},
        {"reward.json": b'{"reward": null}'},
    ],
    ids=lambda f: repr(f)[:40],
)
def test_garbage_reward_is_invalid_never_a_pass(files: dict[str, bytes]) -> None:
    with pytest.raises(RewardError) as e:
        parse_reward(files, KEY)
    assert e.value.error_type == ErrorType.REWARD_INVALID


def _task(verifier: dict | None = None, environment: dict | None = None) -> Task:
    spec = TaskSpec.model_validate({"verifier": verifier or {}, "environment": environment or {}})
    return Task(name="t", path="/tasks/t", spec=spec, instruction="x", digest="d", env_digest="e", has_solution=True)


def _policy(**kw: object) -> GradingPolicy:
    return grading_policy(_task(**kw), CONTRACT)  # type: ignore[arg-type]


def _paths(changed: list[str], policy: GradingPolicy | None = None, **kw: object) -> list[str]:
    return [p for p, _ in tamper_findings(changed, policy or _policy(), **kw)]  # type: ignore[arg-type]


def test_writes_under_writable_roots_are_fine_and_ancestors_are_not_judged() -> None:
    changed = ["/app", "/app/x", "/tmp", "/tmp/build/a.o", "/root", "/root/.cache/pip/x", "/var", "/var/tmp/y"]
    assert _paths(changed) == []


def test_a_change_outside_the_allow_list_voids_even_in_unlisted_system_dirs() -> None:
    # /usr/local/bin comes first on PATH and was not on the old deny-list: a planted interpreter.
    found = tamper_findings(["/usr", "/usr/local", "/usr/local/bin", "/usr/local/bin/python3"], _policy())
    assert found == [("/usr/local/bin/python3", "is outside the writable roots and no package manager vouches for it")]
    assert _paths(["/etc/profile.d/x.sh"]) == ["/etc/profile.d/x.sh"]


def test_no_ignore_pattern_applies_under_system_roots() -> None:
    pyc = "/usr/lib/python3.11/__pycache__/json.cpython-311.pyc"
    assert _paths(["/usr/lib/python3.11/__pycache__", pyc]) == [pyc]
    assert _paths(["/app/__pycache__/solution.cpython-311.pyc"]) == []


def test_protected_paths_void_even_under_a_writable_root() -> None:
    assert _paths(["/tests/test.sh", "/logs/verifier/reward.txt"]) == ["/logs/verifier/reward.txt", "/tests/test.sh"]
    policy = _policy(environment={"writable_roots_add": ["/logs"]})
    assert _paths(["/logs/verifier/reward.txt", "/logs/app.log"], policy) == ["/logs/verifier/reward.txt"]


def test_leaves_are_computed_over_all_paths_not_sorted_neighbours() -> None:
    # Sorted, "/app/a" sits next to "/app/a-b", not "/app/a/c": the old neighbour rule called it a leaf.
    assert leaves(["/app/a", "/app/a-b", "/app/a/c"]) == ["/app/a-b", "/app/a/c"]
    # and a directory change only judged through its children: a clean pass stays clean
    assert _paths(["/app/a", "/app/a-b", "/app/a/c"]) == []


@pytest.mark.parametrize("path", ["/app/json.py", "/app/json/__init__.py", "/app/subprocess.pyc",
                                  "/app/_json.cpython-311-x86_64-linux-gnu.so", "/app/sitecustomize.py",
                                  "/tmp/pathlib.py"])
def test_a_new_module_that_shadows_the_standard_library_voids(path: str) -> None:
    found = tamper_findings([path], _policy())
    assert len(found) == 1 and "shadows the standard-library module" in found[0][1]


@pytest.mark.parametrize("path", ["/app/solution.py", "/app/jsonutil.py", "/app/string.txt", "/app/src/json.py",
                                  "/app/mypkg/__init__.py", "/app/test.py", "/app/json.txt"])
def test_honest_modules_in_the_workdir_do_not_shadow(path: str) -> None:
    assert _paths([path]) == []


def test_an_executable_in_a_path_directory_voids_when_that_directory_is_writable() -> None:
    policy = _policy(environment={"writable_roots_add": ["/opt/tools"]})
    found = tamper_findings(["/opt/tools/bin/python3"], policy, path_dirs=["/opt/tools/bin", "/usr/bin"])
    assert found and "on the image's PATH" in found[0][1]
    assert policy.widened == ("/opt/tools",)


def test_declared_outputs_judge_only_what_is_copied_in() -> None:
    policy = _policy(verifier={"reads": ["/app/out.txt", "/app/pkg"]})
    assert policy.integrity == "declared_outputs"
    # junk elsewhere never reaches the verifier; a shadowing module inside a declared dir does
    assert _paths(["/usr/bin/python3", "/app/json.py"], policy) == []
    assert _paths(["/app/pkg/json.py", "/app/out.txt"], policy) == []
    policy_app = _policy(verifier={"reads": ["/app"]})
    assert _paths(["/app/json.py"], policy_app) == ["/app/json.py"]


def test_exempt_paths_are_rsis_own() -> None:
    assert _paths(["/solution/solve.sh"]) == ["/solution/solve.sh"]
    assert _paths(["/solution/solve.sh"], exempt=["/solution"]) == []


@pytest.mark.parametrize(("reads", "field"), [(["/usr/bin/python3"], "verifier.reads[0]"),
                                              (["/app/x", "/tests/x"], "verifier.reads[1]"),
                                              (["relative.txt"], "verifier.reads[0]"), (["/"], "verifier.reads[0]")])
def test_declared_reads_the_agent_may_not_write_are_refused_with_file_and_field(reads: list[str], field: str) -> None:
    with pytest.raises(InputError) as e:
        _policy(verifier={"reads": reads})
    assert e.value.field == field and e.value.file == str(Path("/tasks/t/task.toml"))


def test_integrity_levels() -> None:
    assert _policy().integrity == "snapshot"
    shared = CONTRACT.model_copy(update={"grading": CONTRACT.grading.model_copy(update={"verifier_mode": "same"})})
    assert grading_policy(_task(), shared).integrity == "shared"


def test_shared_level_lets_the_agent_add_files_but_applies_the_change_rules() -> None:
    shared = CONTRACT.model_copy(update={"grading": CONTRACT.grading.model_copy(update={"verifier_mode": "same"})})
    policy = grading_policy(_task(), shared)
    added = {"/srv/index.txt": 1, "/usr/local/lib/python3.11/site-packages/x.py": 1}
    assert _paths(added, policy) == []
    assert _paths(["/tests/test.sh"], policy) == ["/tests/test.sh"]
    # the three classes Harbor's shared mode let through: stdlib shadow, planted interpreter, replaced tool
    assert _paths({"/app/json.py": 1}, policy) == ["/app/json.py"]
    assert _paths({"/usr/local/bin/python3": 1}, policy, path_dirs=["/usr/local/bin", "/usr/bin"]) == \
        ["/usr/local/bin/python3"]
    found = tamper_findings({"/usr/bin/cat": 0}, policy)
    assert found and "modifies an image file outside the writable roots" in found[0][1]
