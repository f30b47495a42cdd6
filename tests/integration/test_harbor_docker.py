"""Harbor-shaped tasks in real Docker, offline, unedited: Terminal-Bench 2.1's task.toml shape, a test that
talks to a service the agent started (Harbor's `shared` verifier), artifacts, [solution] env; the fixture
tasks in tests/fixtures (TB 2.1 and TB1 shapes, uv-installing test scripts) through the verify-time shim."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from rsi.exec.trial import TrialEnv
from rsi.loop.context import WorkspaceContext
from rsi.loop.init import init_workspace
from rsi.loop.run import RunRequest, run_job
from tests.taskgen import make_task

pytestmark = pytest.mark.docker

FIXTURES = Path(__file__).parent.parent / "fixtures"

TOML = '''schema_version = "1.1"

[task]
name = "acme/{name}"
authors = [{{ name = "Someone" }}]

[metadata]
difficulty = "easy"

[verifier]
timeout_sec = 60.0
env = {{}}
{verifier_extra}

[agent]
timeout_sec = 60.0

[environment]
build_timeout_sec = 300.0
docker_image = "registry.example/acme/{name}:2.1"
cpus = 1
memory_mb = 512
storage_mb = 10240
gpus = 0
allow_internet = true
env = {{ GREETING = "${{RSI_TEST_GREETING:-hello}}" }}
artifacts = ["/app/out.txt"]

[solution]
env = {{ ANSWER = "ok" }}
'''

# The agent starts a service and leaves it running; the test asks it (needs Harbor's shared mode).
SERVICE_SOLVE = (
    'mkdir -p /srv && echo "$ANSWER" > /srv/index.txt && echo "$GREETING" > /app/out.txt\n'
    "cd /srv && nohup python3 -m http.server 8123 >/dev/null 2>&1 &\n"
    "for i in $(seq 50); do python3 -c 'import urllib.request; urllib.request.urlopen(\"http://127.0.0.1:8123/\")'"
    " 2>/dev/null && break; sleep 0.1; done\n"
)
SERVICE_TEST = (
    "mkdir -p /logs/verifier\n"
    "got=$(python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://127.0.0.1:8123/index.txt\")"
    ".read().decode().strip())' 2>/dev/null)\n"
    'if [ "$got" = ok ] && [ "$(cat /app/out.txt)" = hello ]; then echo 1 > /logs/verifier/reward.txt; '
    "else echo 0 > /logs/verifier/reward.txt; fi\n"
)


@pytest.fixture
def ctx(tmp_path: Path) -> WorkspaceContext:
    init_workspace(tmp_path / "ws", starter_tasks=False)
    return WorkspaceContext.open(tmp_path / "ws")


def _task(root: Path, name: str, verifier_extra: str = "") -> Path:
    d = make_task(root, name, solve=SERVICE_SOLVE, test=SERVICE_TEST)
    (d / "task.toml").write_text(TOML.format(name=name, verifier_extra=verifier_extra))
    return d


def test_a_harbor_service_task_that_asks_for_shared_passes_with_oracle_and_fails_with_nop(
    ctx: WorkspaceContext, tmp_path: Path
) -> None:
    task = _task(tmp_path / "tasks", "service", 'environment_mode = "shared"')
    ok = run_job(ctx, RunRequest(paths=[task], agent="oracle")).trials[0]
    assert ok.passed, (ok.error_type, ok.error_message)
    assert ok.integrity == "shared"  # asked for by name, recorded on the trial
    result = json.loads((Path(ok.trial_dir) / "result.json").read_text())
    assert "was not pulled" in result["extra"]["image_source"]
    assert (Path(ok.trial_dir) / "artifacts" / "out.txt").read_text().strip() == "hello"
    nop = run_job(ctx, RunRequest(paths=[task], agent="nop")).trials[0]
    assert not nop.passed and nop.reward == 0.0


@pytest.mark.parametrize("mode", ["", 'environment_mode = "separate"'])
def test_without_shared_by_name_a_harbor_service_task_is_graded_at_the_snapshot_level_with_its_service(
    ctx: WorkspaceContext, tmp_path: Path, mode: str
) -> None:
    """Harbor's own default is `shared`; rsi's is the snapshot level: a fresh verifier container from the
    paused agent container's snapshot, in that container's network namespace, so the service the agent left
    running answers; a contract with `agent_services: stopped` ends it before grading."""
    task = _task(tmp_path / "tasks", "service-snapshot" + ("-separate" if mode else ""), mode)
    solve = task / "solution" / "solve.sh"  # served from a writable root (/srv is outside them: a void here)
    solve.write_text(solve.read_text().replace("/srv", "/tmp/srv"))
    t = run_job(ctx, RunRequest(paths=[task], agent="oracle")).trials[0]
    assert t.integrity == "snapshot" and t.passed, (t.error_type, t.error_message)
    if mode:
        return

    def stop_services(env: TrialEnv) -> None:
        g = env.contract.grading.model_copy(update={"agent_services": "stopped"})
        env.contract = env.contract.model_copy(update={"grading": g})

    t = run_job(ctx, RunRequest(paths=[task], agent="oracle"), trial_env_hook=stop_services).trials[0]
    assert t.integrity == "snapshot" and not t.passed and t.reward == 0.0, (t.error_type, t.error_message)


def test_a_public_from_tag_resolves_offline_and_the_trial_records_the_substitution(
    ctx: WorkspaceContext, tmp_path: Path
) -> None:
    import subprocess
    import sys

    import docker

    tag = "python:3.11-slim-bookworm"  # bookworm's python3 is 3.11: the bookworm base stands in
    task = make_task(tmp_path / "tasks", "public-from", dockerfile=f"FROM {tag}\nWORKDIR /app\n")
    api = docker.from_env().api
    api.remove_image(tag, force=True) if api.images(name=tag) else None
    doctor = subprocess.run([sys.executable, "-m", "rsi", "-w", str(ctx.ws.root), "doctor", "--no-start", "--json",
                             str(tmp_path / "tasks")], capture_output=True, text=True)
    checks = {c["name"]: c for c in json.loads(doctor.stdout)}
    assert checks[f"base {tag}"]["fix"] == f"rsi sandbox build-base --as {tag}", doctor.stdout
    made = subprocess.run([sys.executable, "-m", "rsi", "sandbox", "build-base", "--as", tag],
                          capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    try:
        t = run_job(ctx, RunRequest(paths=[task], agent="oracle")).trials[0]
        assert t.passed, (t.error_type, t.error_message)
        result = json.loads((Path(t.trial_dir) / "result.json").read_text())
        assert "standing in for python:3.11-slim-bookworm" in result["extra"]["base_substitution"][tag]
    finally:
        api.remove_image(tag, force=True)


def test_base_tags_come_from_from_lines() -> None:
    from rsi.sandbox.base_image import base_tags, suite_for

    assert suite_for("python:3.13-slim-bookworm") == "bookworm" and suite_for("ubuntu:24.04") == "noble"
    assert suite_for("python:3.11-slim") == "bookworm" and suite_for("debian:bullseye-slim") == "bullseye"
    assert suite_for("python:3.13-slim") == "trixie"
    d = Path(__file__).parent / "_tmp_dockerfile"
    try:
        d.write_text("ARG BASE_IMAGE=x\nFROM ${BASE_IMAGE}\nFROM --platform=linux/amd64 ubuntu:24.04 AS build\n"
                     "FROM build\nFROM python:3.13-slim-bookworm\n")
        assert base_tags([d]) == {"ubuntu:24.04", "python:3.13-slim-bookworm"}
    finally:
        d.unlink()


def _tb1_task(root: Path) -> Path:
    """A task in Terminal-Bench 1's shape (written for this test, not copied from TB)."""
    d = root / "tb1-count-words"
    (d / "tests").mkdir(parents=True)
    (d / "task.yaml").write_text(
        "instruction: |-\n  Write the number of words in /app/story.txt to /app/count.txt.\n"
        "author_email: someone@example.com\ndifficulty: easy\ncategory: file-operations\ntags: [wc]\n"
        "parser_name: pytest\nmax_agent_timeout_sec: 120\nmax_test_timeout_sec: 60\nrun_tests_in_same_shell: false\n"
    )
    (d / "Dockerfile").write_text("ARG BASE_IMAGE\nFROM ${BASE_IMAGE}\nWORKDIR /app\nCOPY story.txt /app/story.txt\n")
    (d / "story.txt").write_text("one two three four\n")
    (d / "docker-compose.yaml").write_text(
        "services:\n  client:\n    build:\n      dockerfile: Dockerfile\n    command: [sh, -c, sleep infinity]\n")
    (d / "run-tests.sh").write_text("#!/bin/bash\npython3 $TEST_DIR/test_outputs.py\n")
    (d / "tests" / "test_outputs.py").write_text(
        "from pathlib import Path\nassert Path('/app/count.txt').read_text().strip() == '4'\nprint('PASS')\n")
    (d / "solution.sh").write_text("#!/bin/bash\nwc -w < /app/story.txt > /app/count.txt\n")
    return d


def test_a_terminal_bench_1_task_imports_and_runs(ctx: WorkspaceContext, tmp_path: Path) -> None:
    import tomllib

    from rsi.store.task_import import import_tasks

    (task,) = import_tasks(_tb1_task(tmp_path / "tb1"), tmp_path / "imported")
    spec = tomllib.loads((Path(task.path) / "task.toml").read_text())
    assert spec["metadata"]["rsi"]["origin"].startswith("tb1:") and "environment_mode" not in spec["verifier"]
    ok = run_job(ctx, RunRequest(paths=[Path(task.path)], agent="oracle")).trials[0]
    assert ok.passed and ok.integrity == "snapshot", (ok.error_type, ok.error_message)
    assert ok.integrity in ctx.contract.grading.training_integrity  # an import's passes may feed training
    nop = run_job(ctx, RunRequest(paths=[Path(task.path)], agent="nop")).trials[0]
    assert not nop.passed and nop.reward == 0.0


# -- the fixture tasks in Terminal-Bench 2.1 / TB1 shape, run unedited through the verify-time tool shim

def _tree(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(d.rglob("*")) if p.is_file()}


def _stand_ins(dockerfile: Path) -> None:
    """`rsi sandbox build-base --as TAG` for each FROM tag the daemon lacks (what `rsi doctor` asks for)."""
    import docker

    from rsi.sandbox.base_image import base_tags, substitute_base

    api = docker.from_env().api
    for tag in base_tags([dockerfile]):
        if not api.images(name=tag):
            substitute_base(tag)


def _verifier_out(t: object) -> str:
    vdir = Path(t.trial_dir) / "verifier"  # type: ignore[attr-defined]
    names = ("test-stdout.txt", "test-stderr.txt")
    return "".join((vdir / n).read_text()[-3000:] for n in names if (vdir / n).exists())


def _shim_record(t: object) -> dict[str, object]:
    extra = json.loads((Path(t.trial_dir) / "result.json").read_text())["extra"]  # type: ignore[attr-defined]
    return dict(extra["verifier_shim"])


def _served_offline(shim: dict[str, object], pins: list[str]) -> None:
    """The verifier's pinned test tools came from the host's wheels, uv ran offline, apt-get was answered."""
    assert shim["used"] is True and shim["requirements"] == pins, shim
    assert str(shim["offline"]).startswith("uv runs offline") and "UV_OFFLINE" in str(shim["offline"]), shim
    wheels = shim["wheels"]
    assert isinstance(wheels, dict), shim
    assert any(w.startswith("pytest-8.4.1-") for w in wheels["wheels"]), wheels
    assert str(wheels["source"]).startswith(("from the host's cache", "fetched now on the host")), wheels


@pytest.mark.parametrize("name", ["csv-region-totals", "kv-http-service", "log-error-counts"])
def test_terminal_bench_2_1_shaped_tasks_pass_with_oracle_and_fail_with_nop_offline_unedited(
    ctx: WorkspaceContext, name: str
) -> None:
    """Under the default contract (no network), although the tasks say allow_internet = true: test.sh's
    `apt-get install curl`, uv's installer and `uvx -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5` are served
    from the host. log-error-counts is FROM python:3.11 (the bookworm stand-in, python 3.11) but its test.sh
    runs `uvx -p 3.13`: rsi's portable CPython 3.13 answers, last on PATH; the others' images have 3.13 (the
    bookworm stand-in for python:3.13-slim-bookworm carries it in /usr/local).
    kv-http-service's test talks to the server the agent left running, so it asks for the shared verifier."""
    import docker

    from rsi.sandbox.base_image import base_tags

    assert ctx.contract.limits.sandbox.network is False
    task = FIXTURES / "tb21" / name
    before = _tree(task)
    _stand_ins(task / "environment" / "Dockerfile")
    (tag,) = base_tags([task / "environment" / "Dockerfile"])
    own_313 = "3.13" in tag
    if not own_313:  # what `rsi doctor` asks for: rsi-base:trixie, which rsi's python 3.13 is assembled from
        from rsi.sandbox.base_image import base_image_present, build_base_image

        if not base_image_present("rsi-base:trixie"):
            build_base_image("rsi-base:trixie", "trixie")
    ok = run_job(ctx, RunRequest(paths=[task], agent="oracle")).trials[0]
    assert ok.passed, (ok.error_type, ok.error_message, _verifier_out(ok))
    if name == "kv-http-service":
        assert ok.integrity == "shared"  # asked for by name in its task.toml
    else:  # graded at the snapshot level, so their passes count for training and promotion
        assert ok.integrity == "snapshot"
        g = ctx.contract.grading
        assert ok.integrity in g.training_integrity and ok.integrity in g.promotion_integrity
    shim = _shim_record(ok)
    assert "from the PyPI uv wheel" in str(shim["uv"])
    _served_offline(shim, ["pytest-json-ctrf==0.3.5", "pytest==8.4.1"])
    if own_313:
        assert shim["python"] == "from the image (it has python3.13)", shim
    else:
        said = str(shim["python"])
        assert said.startswith("rsi's portable CPython 3.13") and "the image has no python3.13" in said, said
    stdout = (Path(ok.trial_dir) / "verifier" / "test-stdout.txt").read_text()
    assert "Python 3.13" in stdout and "passed" in stdout  # pytest really ran, on 3.13
    stderr = (Path(ok.trial_dir) / "verifier" / "test-stderr.txt").read_text()
    assert "answered with rsi's offline stand-in for uv's installer" in stderr  # the curl | sh was intercepted
    assert "rsi shim: apt-get update answered offline" in stderr
    assert "rsi shim: apt-get install -y curl answered offline" in stderr or \
        "rsi shim: apt-get install curl answered offline" in stderr, stderr
    substituted = docker.from_env().api.inspect_image(tag)["Config"]["Labels"].get("rsi.substitute")
    extra = json.loads((Path(ok.trial_dir) / "result.json").read_text())["extra"]
    if substituted:
        assert f"standing in for {tag}" in extra["base_substitution"][tag]
    # and a user sees what was served, with the integrity level, in `rsi trials show`
    from typer.testing import CliRunner

    from rsi.cli.app import app

    shown = CliRunner().invoke(app, ["-w", str(ctx.ws.root), "trials", "show", ok.id])
    assert shown.exit_code == 0, shown.output
    assert f"integrity={ok.integrity}" in shown.output and "verifier tool shim" in shown.output
    assert "wheels: " in shown.output and "pytest-8.4.1-" in shown.output and "uv runs offline" in shown.output
    assert (f"base image {tag} was a local substitute" in shown.output) == bool(substituted)
    shown = CliRunner().invoke(app, ["-w", str(ctx.ws.root), "trials", "show", ok.id, "--json"])
    assert json.loads(shown.output)["verifier_shim"]["used"] is True
    nop = run_job(ctx, RunRequest(paths=[task], agent="nop")).trials[0]
    assert not nop.passed and nop.reward == 0.0, (nop.error_type, nop.error_message)
    assert nop.error_type is None and nop.verifier_exit_code == 0  # pytest failed, test.sh wrote 0: a clean fail
    assert _shim_record(nop)["wheels"]["source"].startswith("from the host's cache")  # type: ignore[index]
    assert _tree(task) == before  # no file of the task was edited


@pytest.mark.parametrize("base", [None, "python:3.13-slim-bookworm"])
def test_a_terminal_bench_1_shaped_task_with_a_uv_run_tests_sh_imports_and_runs_offline(
    ctx: WorkspaceContext, tmp_path: Path, base: str | None
) -> None:
    """TB1's run-tests.sh: `uv init; uv add pytest==8.4.1; uv run pytest` in a project, offline (uv's lock
    resolves for every platform, so the wheels include what only other platforms need); also FROM
    python:3.13-slim-bookworm, whose stand-in's CPython 3.13 (rsi's portable one in /usr/local) must make a
    venv uv can query (issue 49: "Could not find platform independent libraries" there was a wrong solution)."""
    import re
    import shutil

    from rsi.store.task_import import import_tasks

    src = FIXTURES / "tb1" / "tb1-line-stats"
    before = _tree(src)
    if base is not None:  # the same task on another FROM, as a fresh clone's README set-up makes it resolve
        from rsi.sandbox.base_image import substitute_base

        copy = tmp_path / "src" / src.name
        shutil.copytree(src, copy)
        dockerfile = copy / "Dockerfile"
        dockerfile.write_text(re.sub(r"^FROM .*$", f"FROM {base}", dockerfile.read_text(), count=1, flags=re.M))
        substitute_base(base)  # `rsi sandbox build-base --as python:3.13-slim-bookworm` (a no-op when current)
        src, before = copy, _tree(copy)
    (task,) = import_tasks(src, tmp_path / "imported")
    _stand_ins(Path(task.path) / "environment" / "Dockerfile")
    ok = run_job(ctx, RunRequest(paths=[Path(task.path)], agent="oracle")).trials[0]
    assert ok.passed, (ok.error_type, ok.error_message, _verifier_out(ok))
    shim = _shim_record(ok)  # run-tests.sh's uv install, not test.sh's
    _served_offline(shim, ["pytest==8.4.1"])
    assert any(w.startswith("colorama-") for w in shim["wheels"]["wheels"])  # type: ignore[index]
    nop = run_job(ctx, RunRequest(paths=[Path(task.path)], agent="nop")).trials[0]
    assert not nop.passed and nop.reward == 0.0 and nop.error_type is None, (nop.error_type, nop.error_message)
    assert _tree(src) == before


def _tb2_copy(root: Path, name: str, uvx_line: str, network: str = "allow_internet = true") -> Path:
    """csv-region-totals with its uvx line replaced (and its network field)."""
    import shutil

    d = root / name
    shutil.copytree(FIXTURES / "tb21" / "csv-region-totals", d)
    test = d / "tests" / "test.sh"
    text = test.read_text()
    start = text.index("uvx \\")
    end = text.index("-rA", start) + len("-rA")
    test.write_text(text[:start] + uvx_line + text[end:])
    toml = d / "task.toml"
    toml.write_text(toml.read_text().replace("allow_internet = true", network))
    return d


def test_a_task_whose_verifier_needs_an_unpinned_requirement_is_refused_before_any_trial(
    ctx: WorkspaceContext, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from rsi.cli.app import app

    task = _tb2_copy(tmp_path, "needs-unpinned",
                     "uvx -p 3.13 -w pytest -w pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json "
                     "/tests/test_outputs.py -rA")
    got = CliRunner().invoke(app, ["-w", str(ctx.ws.root), "run", str(task), "--agent", "oracle"])
    assert got.exit_code == 2, got.output
    said = " ".join(got.output.split())
    assert "environment.allow_internet" in said and "rsi-fixtures/csv-region-totals" in said, said
    assert "uvx -w pytest (not pinned to one version)" in said and "pin it" in said, said
    assert "allow the network in the contract" in said, said
    jobs = CliRunner().invoke(app, ["-w", str(ctx.ws.root), "jobs", "list", "--all", "--json"])
    assert jobs.exit_code == 0 and json.loads(jobs.output) == [], jobs.output  # no job was created


def test_a_verifier_that_cannot_install_its_tools_is_a_verifier_error_not_a_wrong_solution(
    ctx: WorkspaceContext, tmp_path: Path
) -> None:
    """A task that asks for no network, so nothing is refused; its unpinned uvx requirement cannot be served
    and uv cannot reach an index: the trial is the verifier's (task-side) error, never the solution's."""
    task = _tb2_copy(tmp_path, "cannot-install",
                     "uvx -p 3.13 -w pytest -w pytest-json-ctrf==0.3.5 pytest /tests/test_outputs.py -rA",
                     'network_mode = "no-network"')
    _stand_ins(task / "environment" / "Dockerfile")
    t = run_job(ctx, RunRequest(paths=[task], agent="oracle")).trials[0]
    assert not t.passed and t.error_type == "verifier_error", (t.error_type, t.error_message, _verifier_out(t))
    assert "could not set itself up" in str(t.error_message)
    assert "uv keeps its index" in str(_shim_record(t)["offline"])
