"""Harbor's task.toml as Terminal-Bench 2.x writes it: every field parsed, mapped, or refused by name."""

from __future__ import annotations

import pytest

from rsi.core.contract import Contract
from rsi.core.errors import InputError
from rsi.core.limits import effective_limits
from rsi.core.task import Task, parse_task_toml, resolve_env
from rsi.exec.grading import grading_policy

FILE = "/tasks/harbor-task/task.toml"

TB21 = '''
schema_version = "1.1"

[task]
name = "acme/harbor-task"
description = "A task in Terminal-Bench 2.1's shape"
authors = [{ name = "Someone", email = "someone@example.com" }]
keywords = ["files"]

[metadata]
difficulty = "medium"
category = "software-engineering"
tags = ["python"]

[verifier]
timeout_sec = 900.0
env = {}

[agent]
timeout_sec = 900.0

[environment]
build_timeout_sec = 600.0
docker_image = "registry.example/acme/harbor-task:2.1"
cpus = 1
memory_mb = 2048
storage_mb = 10240
gpus = 0
allow_internet = true
env = {}

[solution]
env = {}
'''
CONTRACT = Contract.model_validate({"hcp": "1.0.0", "substrate": {"tools": {}}})


def test_a_terminal_bench_2_task_toml_parses_unchanged() -> None:
    spec = parse_task_toml(TB21, FILE)
    assert spec.schema_version == "1.1" and spec.task.name == "acme/harbor-task"
    assert spec.task.authors[0]["name"] == "Someone" and spec.task.keywords == ["files"]
    assert spec.environment.docker_image and spec.environment.storage_mb == 10240 and spec.environment.gpus == 0
    assert spec.network() == "public"  # allow_internet = true, as Harbor maps it
    assert spec.environment_mode is None  # not Harbor's weak default: the contract decides (snapshot)
    assert grading_policy(Task(name="t", path="/t", spec=spec, instruction="x", digest="d", env_digest="e",
                               has_solution=True), CONTRACT).integrity == "snapshot"
    # ... but the contract's ceiling rules: no network on this contract
    assert effective_limits(spec, CONTRACT, None).network is False


@pytest.mark.parametrize(
    ("env", "want"),
    [('network_mode = "no-network"', "no-network"), ('network_mode = "public"', "public"),
     ("allow_internet = false", "no-network"), ("allow_internet = true", "public"),
     ('network_mode = "none"', "no-network"), ('network_mode = "bridge"', "public"), ("", "no-network"),
     ('network_mode = "no-network"\nallow_internet = true', "no-network")],
)
def test_network_modes_map_as_harbor_does(env: str, want: str) -> None:
    assert parse_task_toml(f"[environment]\n{env}\n", FILE).network() == want


def test_per_phase_network_overrides_the_environments() -> None:
    spec = parse_task_toml('[environment]\nnetwork_mode = "public"\n[verifier]\nnetwork_mode = "no-network"\n', FILE)
    assert spec.network("agent") == "public" and spec.network("verifier") == "no-network"


def test_public_is_bridge_only_when_the_contract_allows() -> None:
    spec = parse_task_toml('[environment]\nnetwork_mode = "public"\n', FILE)
    open_contract = CONTRACT.model_copy(update={"limits": CONTRACT.limits.model_copy(
        update={"sandbox": CONTRACT.limits.sandbox.model_copy(update={"network": True})})})
    assert effective_limits(spec, open_contract, None).network is True
    assert effective_limits(spec, CONTRACT, None).network is False


@pytest.mark.parametrize(
    ("toml", "field", "why"),
    [
        ('[environment]\nos = "windows"\n', "environment.os", "Linux containers only"),
        ("[environment]\ngpus = 1\n", "environment.gpus", "no GPUs"),
        ('[environment]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n', "environment.network_mode",
         "no egress filter"),
        ('[agent]\nallowed_hosts = ["pypi.org"]\n', "agent.network_mode", "no egress filter"),
        ('[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n', "steps", "multi-step"),
        ('[[environment.mcp_servers]]\nname = "x"\nurl = "http://x"\n', "environment.mcp_servers", "MCP"),
        ('[environment.healthcheck]\ncommand = "true"\n', "environment.healthcheck", "healthchecks"),
        ('[agent]\nuser = "agent"\n', "agent.user", "default user"),
        ('[environment]\nskills_dir = "/skills"\n', "environment.skills_dir", "skills"),
        ('[verifier]\nuser = "tester"\n', "verifier.user", "default user"),
        ('[verifier]\nnetwork_mode = "allowlist"\n', "verifier.network_mode", "no egress filter"),
        ('[verifier.environment]\ndocker_image = "x"\n', "verifier.environment", "verifier environment of its own"),
        ('artifacts = [{ source = "/app/a", destination = "b" }]\n', "artifacts[0].destination", "as it is"),
        ('artifacts = [{ source = "/app/a", exclude = ["*.pyc"] }]\n', "artifacts[0].exclude", "exclude"),
        ('[environment]\nos = "macos"\n', "environment.os", "Linux containers only"),
    ],
)
def test_fields_rsi_cannot_honour_are_refused_by_name(toml: str, field: str, why: str) -> None:
    with pytest.raises(InputError) as e:
        parse_task_toml(toml, FILE)
    # the task (its task.toml's path), the field and the reason, all in the one-line message
    assert e.value.file == FILE and e.value.field == field and why in str(e.value)
    assert str(e.value).startswith(f"{FILE}: {field}: cannot be honoured: ")


# Every field of Harbor's task.toml (schema 1.1-1.4) that rsi parses, in one file.
EVERY_FIELD = '''
schema_version = "1.4"
source = "terminal-bench/terminal-bench-2@2.1"
multi_step_reward_strategy = "mean"
artifacts = ["/app/report.txt", { source = "/app/logs" }]

[task]
name = "acme/every-field"
description = "d"
authors = [{ name = "A", email = "a@example.com" }]
keywords = ["k"]

[metadata]
author_name = "A"
author_email = "a@example.com"
difficulty = "hard"
category = "c"
tags = ["t"]
expert_time_estimate_min = 5.0

[agent]
timeout_sec = 100.0
user = "root"
network_mode = "no-network"

[verifier]
timeout_sec = 200.0
user = 0
network_mode = "public"
environment_mode = "separate"
env = { TOKEN = "${HOST_TOKEN:-none}" }

[solution]
env = { ANSWER = "42" }

[environment]
build_timeout_sec = 300.0
docker_image = "registry.example/acme/every-field:1"
docker_image_archive = "images/every-field.tar"
docker_image_archive_expected_sha256 = "abc"
os = "Linux"
cpus = 2
memory = "3G"
storage = "20G"
gpus = 0
gpu_types = ["H100"]
network_mode = "public"
env = { MODE = "test" }
workdir = "/work"
artifacts = ["/work/out.txt"]
mcp_servers = []
'''


def test_every_harbor_field_is_parsed_and_mapped() -> None:
    spec = parse_task_toml(EVERY_FIELD, FILE)
    assert spec.schema_version == "1.4" and spec.source and spec.multi_step_reward_strategy == "mean"
    assert (spec.task.name, spec.task.description, spec.task.keywords) == ("acme/every-field", "d", ["k"])
    assert spec.task.authors == [{"name": "A", "email": "a@example.com"}]
    assert spec.metadata.difficulty == "hard" and spec.metadata.model_extra == {"expert_time_estimate_min": 5.0}
    assert spec.agent.timeout_sec == 100 and spec.agent.user == "root" and spec.network("agent") == "no-network"
    assert spec.verifier.timeout_sec == 200 and spec.verifier.user == 0 and spec.network("verifier") == "public"
    assert spec.environment_mode == "separate" and spec.verifier.env == {"TOKEN": "${HOST_TOKEN:-none}"}
    assert spec.solution.env == {"ANSWER": "42"}
    env = spec.environment
    assert env.build_timeout_sec == 300 and env.docker_image and env.docker_image_archive and env.os == "Linux"
    assert env.cpus == 2 and env.memory_mb == 3072 and env.storage_mb == 20480  # deprecated sizes mapped
    assert env.gpus == 0 and env.gpu_types == ["H100"] and env.env == {"MODE": "test"} and env.workdir == "/work"
    assert spec.artifact_sources() == ["/work/out.txt", "/app/report.txt", "/app/logs"]
    assert effective_limits(spec, CONTRACT, None).cpus <= 2


def test_a_bad_deprecated_size_names_the_field() -> None:
    with pytest.raises(InputError) as e:
        parse_task_toml('[environment]\nmemory = "lots"\n', FILE)
    assert "environment.memory" in str(e.value) and "'lots'" in str(e.value)


def test_verifier_environment_mode() -> None:
    assert parse_task_toml('[verifier]\nenvironment_mode = "separate"\n', FILE).environment_mode == "separate"
    assert parse_task_toml('schema_version = "1.2"\n', FILE).environment_mode is None  # snapshot, not shared
    assert parse_task_toml('schema_version = "1.2"\n[verifier]\nenvironment_mode = "shared"\n',
                           FILE).environment_mode == "shared"
    assert parse_task_toml('version = "1.0"\n', FILE).environment_mode is None  # the contract decides


def test_env_tables_resolve_from_the_host() -> None:
    host = {"TOKEN": "abc"}
    assert resolve_env({"A": "${TOKEN}", "B": "${MISSING:-dflt}", "C": "x${TOKEN}y", "D": "plain"}, host) == {
        "A": "abc", "B": "dflt", "C": "xabcy", "D": "plain"}
