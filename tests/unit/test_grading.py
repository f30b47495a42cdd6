"""Reward parsing and the tamper rule: what turns a verifier's files and `docker diff` into a verdict."""

from __future__ import annotations

import pytest

from rsi.core.contract import DEFAULT_PROTECTED_PATHS, Grading
from rsi.core.trial import ErrorType
from rsi.exec.grading import RewardError, parse_reward, tampered_paths

KEY = "reward"
IGNORE = Grading().tamper_ignore


@pytest.mark.parametrize(("text", "value"), [(b"1", 1.0), (b"0\n", 0.0), (b"  0.25 \n", 0.25), (b"1e0", 1.0)])
def test_reward_txt_is_a_number(text: bytes, value: float) -> None:
    reward, metrics = parse_reward({"reward.txt": text, "reward.json": None}, KEY)
    assert reward == value
    assert metrics == {KEY: value}


def test_reward_json_map_uses_the_reward_key() -> None:
    reward, metrics = parse_reward({"reward.json": b'{"reward": 0.5, "style": 1}'}, KEY)
    assert reward == 0.5
    assert metrics == {"reward": 0.5, "style": 1.0}


def test_reward_json_map_without_the_key_is_the_mean() -> None:
    reward, metrics = parse_reward({"reward.json": b'{"a": 1, "b": 0}'}, KEY)
    assert reward == 0.5
    assert metrics == {"a": 1.0, "b": 0.0}


def test_reward_json_bare_number() -> None:
    assert parse_reward({"reward.json": b"1"}, KEY) == (1.0, {KEY: 1.0})


def test_reward_txt_wins_over_json() -> None:
    reward, _ = parse_reward({"reward.txt": b"0", "reward.json": b'{"reward": 1}'}, KEY)
    assert reward == 0.0


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


def _tampered(changed: list[str]) -> list[str]:
    return tampered_paths(changed, list(DEFAULT_PROTECTED_PATHS), IGNORE)


def test_write_under_app_with_changed_usr_parent_is_not_tampering() -> None:
    # docker diff lists every ancestor of a change as "C"; /usr and /usr/lib here are ancestors of
    # an ignored byte-code cache, /app of the agent's own output: none is a leaf under a protected path.
    changed = [
        "/app", "/app/x",
        "/usr", "/usr/lib", "/usr/lib/python3.11", "/usr/lib/python3.11/__pycache__",
        "/usr/lib/python3.11/__pycache__/os.cpython-311.pyc",
        "/usr/local", "/usr/local/lib", "/usr/local/lib/thing.txt",
    ]
    assert _tampered(changed) == []


def test_changed_system_binary_counts() -> None:
    assert _tampered(["/app", "/app/x", "/usr", "/usr/bin", "/usr/bin/ls"]) == ["/usr/bin/ls"]


def test_deleted_or_added_protected_files_count_and_ancestors_do_not() -> None:
    changed = ["/bin", "/bin/sh", "/logs", "/logs/verifier", "/logs/verifier/reward.txt", "/tests"]
    assert _tampered(changed) == ["/bin/sh", "/logs/verifier/reward.txt", "/tests"]


def test_pycache_under_protected_path_is_ignored() -> None:
    cache = "/usr/lib/python3/dist-packages/__pycache__"
    changed = [cache, f"{cache}/a.pyc"]
    assert _tampered(changed) == []
    assert _tampered(["/usr/lib/python3/dist-packages/a.py"]) == ["/usr/lib/python3/dist-packages/a.py"]


def test_prefix_that_is_not_a_path_component_is_not_protected() -> None:
    # /binaries is not under /bin; /usr/library is not under /usr/lib.
    assert _tampered(["/binaries/x", "/usr/library/y"]) == []
