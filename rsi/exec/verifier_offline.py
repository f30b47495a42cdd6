"""Whether a task's verifier can set itself up offline, before any trial, and naming it when it could not.

A Terminal-Bench task says `allow_internet = true` (or `network_mode = "public"`) because its test.sh
fetches its own test tools. Under a contract that forbids the network, rsi serves those tools from the
host (tool_shim.py: uv, curl's uv installer, apt-get for what the image has, the wheels of exactly-pinned
requirements from wheel_cache.py). `check_verifiers_offline` checks every task of a job before anything
is written (rsi run, every phase's trial jobs, expand before its job exists): a task whose verifier
needs something rsi cannot serve offline (a requirement that is not pinned, a pin the host cannot
fetch, a Debian package, another download) is refused with one line naming the task, the field that
asks for the network and the fix, rather than run and scored 0 against the solution.
The wheels it fetches are cached, so the trials find them there.

`setup_failure` reads a failed verifier's output for the signs that it could not install its own tools
(a uv resolution or download failure, pip's "No matching distribution", apt's "Unable to locate
package"...) or start the interpreter they run on (uv's "Querying Python at ... failed", "Fatal Python error",
a missing python3): such a trial is a `verifier_error` (task-side: the environment, never the solution).
"""

from __future__ import annotations

import re
from pathlib import Path

from rsi.core.contract import Contract
from rsi.core.errors import InputError
from rsi.core.task import Task, TaskSpec
from rsi.sandbox.tool_shim import host_uv, wants_shim
from rsi.sandbox.verifier_needs import VerifierNeeds, apt_provided, verifier_needs
from rsi.sandbox.wheel_cache import WheelFetchError, WheelSet, provide_wheels
from rsi.store.paths import cache_dir


def wheel_root() -> Path:
    """Where fetched verifier wheels are kept (rsi's cache seam: RSI_CACHE_DIR, XDG_CACHE_HOME)."""
    return cache_dir() / "verifier-wheels"


def scripts_text(tests_dir: Path) -> str:
    """test.sh and every other shell script beside it (TB1's run-tests.sh), concatenated."""
    scripts = sorted(tests_dir.rglob("*.sh")) if tests_dir.is_dir() else []
    return "\n".join(p.read_text(errors="replace") for p in scripts if p.is_file())


def task_needs(tests_dir: Path) -> VerifierNeeds:
    """What the task's verifier scripts fetch; a requirements file they name under /tests is read from the task."""

    def read(path: str) -> str | None:
        rel = path[len("/tests/"):] if path.startswith("/tests/") else path.lstrip("./")
        f = tests_dir / rel
        try:
            return f.read_text() if f.is_file() and f.resolve().is_relative_to(tests_dir.resolve()) else None
        except OSError:
            return None

    return verifier_needs(scripts_text(tests_dir), read)


def serve_wheels(needs: VerifierNeeds, *, fetch: bool = True, root: Path | None = None) -> WheelSet | str | None:
    """The wheels of the verifier's exact pins (from the cache, else fetched now), None when it pins
    nothing, or why they could not be fetched."""
    if not needs.pinned:
        return None
    try:
        uv = host_uv()
        got = provide_wheels(needs.pinned, pythons=needs.pythons, project=needs.project,
                             cache_root=root or wheel_root(), uv=uv[0] if uv else None, fetch=fetch)
    except WheelFetchError as e:
        return str(e)
    return got if got is not None else "not fetched yet"


def network_field(spec: TaskSpec) -> str:
    """The task.toml field that gives the verifier its network request (as `TaskSpec.network` reads it)."""
    if spec.verifier.network_mode is not None:
        return "verifier.network_mode"
    if spec.environment.network_mode is not None:
        return "environment.network_mode"
    return "environment.allow_internet"


def _fix(what: str) -> str:
    if "not pinned" in what:
        return "pin it to one version (name==version) in the task's test scripts"
    if what.startswith("apt-get"):
        return "install the package in environment/Dockerfile"
    if what.startswith("a download"):
        return "ship the file with the task's tests"
    return "pin a version the host's package index has"


def offline_refusal(task: str, field: str, unprovided: list[str], *, asks_network: bool,
                    contract_network: bool) -> str | None:
    """The refusal for a task whose verifier asks for the network the contract forbids and needs what rsi
    cannot provide offline (`unprovided`); None when it may run."""
    if not asks_network or contract_network or not unprovided:
        return None
    more = f" (and {len(unprovided) - 1} more)" if len(unprovided) > 1 else ""
    return (f"asks for the network, which the contract forbids (limits.sandbox.network: false), and task {task}'s "
            f"verifier needs what rsi cannot provide offline: {unprovided[0]}{more}; fix: {_fix(unprovided[0])}, "
            "or allow the network in the contract")


def check_task(task: Task, contract: Contract, *, fetch: bool = True) -> None:
    """Refuse (InputError: task, field, fix) a task whose verifier cannot set itself up offline when it
    would have to; fetch (or find cached) the wheels of its pinned requirements either way."""
    tests_dir = Path(task.path) / "tests"
    text = scripts_text(tests_dir)
    needs = task_needs(tests_dir)
    if not (wants_shim(text) or needs.requirements or needs.apt or needs.fetches):
        return
    asks = task.spec.network("verifier") == "public"
    allowed = contract.limits.sandbox.network
    if not asks or allowed:  # nothing to refuse: fetch what can be served, the trial records the rest
        serve_wheels(needs, fetch=fetch)
        return
    dockerfile = Path(task.path) / "environment" / "Dockerfile"
    docker_text = dockerfile.read_text(errors="replace") if dockerfile.is_file() else ""
    unprovided = needs.unprovided(lambda p: apt_provided(p, needs, docker_text))
    if not unprovided:
        got = serve_wheels(needs, fetch=fetch)
        if isinstance(got, str):
            unprovided = [f"its pinned requirements {' '.join(needs.pinned)}, which the host could not fetch "
                          f"({got})"]
    why = offline_refusal(task.name, network_field(task.spec), unprovided, asks_network=asks,
                          contract_network=allowed)
    if why is not None:
        raise InputError(str(Path(task.path) / "task.toml"), network_field(task.spec), why)


def check_verifiers_offline(tasks: list[Task], contract: Contract) -> None:
    """`check_task` for every task of a job, before anything is written."""
    for t in tasks:
        check_task(t, contract)


_SETUP_FAILURES = [
    (re.compile(r"No solution found when resolving|was not found in the (?:package registry|provided package "
                r"locations)|Failed to (?:download|fetch|resolve|build)\b|Network connectivity is disabled|"
                r"No interpreter found for Python|No download found for request|error: Request failed"),
     "uv could not install the verifier's tools"),
    (re.compile(r"No matching distribution found for|Could not find a version that satisfies"),
     "pip could not install the verifier's tools"),
    (re.compile(r"Unable to locate package|has no installation candidate|Temporary failure resolving|"
                r"Could not resolve '[^']+'"),
     "apt-get could not install the verifier's tools"),
    (re.compile(r"Could not resolve host|Failed to establish a new connection|Temporary failure in name resolution|"
                r"Network is unreachable"),
     "the verifier tried to reach the network"),
    (re.compile(r"(?:^|\s)(?:uvx?|pytest|curl|wget): (?:command )?not found", re.MULTILINE),
     "the verifier's tools are missing"),
    # The interpreter the verifier's tools run on cannot start (a stand-in's Python without its standard library,
    # a venv whose base is gone): the environment, not the solution. Only start-up failures count: a crash of the
    # solution's own program under test is the solution's.
    (re.compile(r"Querying Python at \S+ failed|Could not find platform (?:in)?dependent libraries|"
                r"Fatal Python error: (?:init_fs_encoding|init_sys_streams|init_import_site|_Py\w*Init\w*|"
                r"Failed to import encodings)|No module named '?encodings'?"),
     "the verifier's interpreter could not start"),
]
_TESTS_RAN = re.compile(r"=+ test session starts =+")


def setup_failure(stdout: str, stderr: str) -> str | None:
    """Why the verifier could not set itself up, from its output (None: no sign of that). Output after
    pytest's session started is the tests' own, so only what came before counts."""
    text = f"{stdout}\n{stderr}"
    if _TESTS_RAN.search(stdout):
        text = stdout[:_TESTS_RAN.search(stdout).start()]  # type: ignore[union-attr]
    for pattern, what in _SETUP_FAILURES:
        m = pattern.search(text)
        if m:
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            line = text[start:end if end >= 0 else len(text)].strip()
            return f"{what}: {line[:200]}"
    return None
