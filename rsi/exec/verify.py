"""Running a task's verifier at the integrity level its grading policy names (DESIGN §5).

Levels 1 and 2 run `tests/test.sh` as the *main process* of a fresh verifier container: when it
exits, the container ends and the kernel kills everything it left behind, so no detached process
can rewrite the reward afterwards; the exit code comes from the daemon, not from anything inside.
Level 1 starts from the task's pristine image with only the declared reads copied in; level 2
from a snapshot of the frozen agent container. Level 3 (`shared`) runs test.sh in the agent's own
container and freezes it before the reward is read. In every level test.sh runs in the task's
workdir with the image's environment plus `[verifier] env`; a test.sh that fetches uv's installer or
calls uv (or installs with pip or apt-get) gets rsi's verify-time tool shim first (sandbox/tool_shim.py:
its pinned requirements served offline from the host), and the trial records it. `judge` turns a
verifier run, the tamper findings and the agent's outcome into the trial's verdict; a verifier that
could not install its own tools (its output says so, exec/verifier_offline.py) is a `verifier_error`,
blamed on the task.
"""

from __future__ import annotations

import io
import posixpath
import shlex
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from rsi.core.contract import Contract
from rsi.core.trial import NEVER_PASS, ErrorType
from rsi.exec.grading import GradingPolicy, RewardError, parse_reward
from rsi.exec.services import service_failure
from rsi.exec.verifier_offline import scripts_text, serve_wheels, setup_failure, task_needs
from rsi.harness.agent import AgentOutcome
from rsi.sandbox.base import ExecResult, Sandbox, SandboxError
from rsi.sandbox.tool_shim import PythonFor, Shim, build_shim, wants_shim

VERIFIER_DIR = "/logs/verifier"
STAGE = ".rsi-stage"
R = '"${SANDBOX_ROOT:-}"'  # empty in a container; the fake provider's private root otherwise
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # Docker's, for an image without one


@dataclass
class VerifierRun:
    result: ExecResult
    files: dict[str, bytes | None] = field(default_factory=dict)


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def verifier_shim(tests_dir: Path, image_env: dict[str, str], python: PythonFor | None = None) -> Shim | None:
    """The verify-time tool shim this task's test.sh (or a script it runs: TB1's run-tests.sh) needs;
    `python` adds an interpreter when the image lacks the one test.sh asks uv for. The wheels of its
    pinned requirements come from the host's cache (fetched there now if the job's preflight did not)."""
    text = scripts_text(tests_dir)
    needs = task_needs(tests_dir)
    if not (wants_shim(text) or needs.requirements or needs.apt):
        return None
    return build_shim(text, home=image_env.get("HOME") or "/root", image_path=image_env.get("PATH") or DEFAULT_PATH,
                      python=python, wheels=serve_wheels(needs), needs=needs)


def stage_archive(tests_dir: Path, reads: dict[int, bytes], shim: Shim | None = None) -> bytes:
    """One tar for `/`: the task's tests under .rsi-stage/tests and each declared read `i` (a
    docker-cp style archive whose top entry is the path's basename) under .rsi-stage/reads/i/;
    the tool shim's files (absolute path, data, mode) and host trees (a Python) at their own paths."""
    buf = io.BytesIO()
    extra = shim.files if shim is not None else []
    with tarfile.open(fileobj=buf, mode="w") as out:
        out.add(str(tests_dir), arcname=f"{STAGE}/tests", filter=_root_owned)
        for tree in shim.trees if shim is not None else []:
            out.add(str(tree.src), arcname=posixpath.normpath(tree.dest).lstrip("/"), filter=_root_owned)
        for path, data, mode in extra:
            info = _root_owned(tarfile.TarInfo(posixpath.normpath(path).lstrip("/")))
            info.size, info.mode = len(data), mode
            out.addfile(info, io.BytesIO(data))
        for i, data in reads.items():
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as src:
                for member in src:
                    name = posixpath.normpath(member.name)
                    if name.startswith(("/", "..")) or not (member.isfile() or member.isdir() or member.issym()
                                                             or member.islnk()):
                        continue  # never let an archive from the agent's side escape the stage
                    member.name = f"{STAGE}/reads/{i}/{name}"
                    if member.islnk():
                        member.linkname = f"{STAGE}/reads/{i}/{posixpath.normpath(member.linkname)}"
                    fileobj = src.extractfile(member) if member.isfile() else None
                    out.addfile(member, fileobj)
    return buf.getvalue()


def verifier_script(policy: GradingPolicy, reads_present: dict[int, str]) -> str:
    """The verifier container's command: put the staged files in place, then exec test.sh.

    A declared read that was absent in the agent's container is removed here too (the pristine
    image may hold it: a task that asks to delete or move a file).
    """
    lines = [
        "set -e",
        f'rm -rf {R}/tests {R}{VERIFIER_DIR}',
        f'mkdir -p {R}{VERIFIER_DIR}',
        f'mv {R}/{STAGE}/tests {R}/tests',
    ]
    for i, path in enumerate(policy.reads):
        q = shlex.quote(path)
        lines.append(f"rm -rf {R}{q}")
        if i in reads_present:
            lines.append(f"mkdir -p {R}{shlex.quote(posixpath.dirname(path))}")
            lines.append(f"mv {R}/{STAGE}/reads/{i}/{shlex.quote(reads_present[i])} {R}{q}")
    lines += [
        f"rm -rf {R}/{STAGE}",
        f"mkdir -p {R}{shlex.quote(policy.workdir)}",
        f"cd {R}{shlex.quote(policy.workdir)}",
        "set +e",
        f'exec bash {R}/tests/test.sh',
    ]
    return "\n".join(lines) + "\n"


def top_entry(archive: bytes) -> str | None:
    """The basename a docker-cp style archive holds at its top."""
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
        for member in tar:
            return posixpath.normpath(member.name).split("/", 1)[0]
    return None


def read_reward_files(box: Sandbox, names: list[str]) -> dict[str, bytes | None]:
    return {name: box.get_file(f"{VERIFIER_DIR}/{name}") for name in names}


def run_shared(box: Sandbox, tests_dir: Path, policy: GradingPolicy, timeout: float,
               env: dict[str, str] | None, reward_files: list[str], shim: Shim | None = None) -> VerifierRun:
    """Level 3: test.sh in the agent's container (after the tool shim, if any, is put in place); the
    container is frozen before the reward is read."""
    wipe = box.exec(
        f'rm -rf {R}/tests {R}{VERIFIER_DIR} && mkdir -p {R}{VERIFIER_DIR} {R}/tests', timeout=60
    )
    if not wipe.ok:
        raise SandboxError(f"could not prepare the verifier sandbox: {wipe.stderr.strip()[:200]}")
    box.put_dir(tests_dir, "/tests")
    if shim is not None:
        for path, data, mode in shim.files:
            box.put_file(path, data, mode)
        for tree in shim.trees:
            box.put_dir(tree.src, tree.dest)
        env = {**shim.env, **(env or {})}
    res = box.exec(f"bash {R}/tests/test.sh", timeout=timeout, workdir=policy.workdir, env=env or None)
    box.freeze()
    return VerifierRun(res, read_reward_files(box, reward_files))


@dataclass
class Verdict:
    reward: float | None
    rewards: dict[str, float]
    passed: bool
    error_type: ErrorType | None
    message: str | None
    # a failed trial whose tests found no service to talk to (exec/services.py), whoever acted
    service_note: str | None = None


def judge(
    vrun: VerifierRun,
    findings: list[tuple[str, str]],
    outcome: AgentOutcome,
    contract: Contract,
    verifier_timeout_sec: float,
    agent_timeout_sec: float,
    *,
    reference: bool = False,
) -> Verdict:
    """The verdict, failing closed: a tamper outranks every verifier error, a verifier error every
    agent error; a non-zero exit of test.sh is never a pass, whatever the reward says. A `reference`
    solution (the oracle) that fails because its tests could not reach a service is `service_unreachable`
    (the environment's fault); for any other agent that is only noted."""
    g = contract.grading
    reward: float | None = None
    rewards: dict[str, float] = {}
    error: ErrorType | None = None
    message: str | None = None
    res = vrun.result
    if res.timed_out:
        error, message = ErrorType.VERIFIER_TIMEOUT, f"tests/test.sh exceeded {verifier_timeout_sec:g}s"
    else:
        try:
            reward, rewards = parse_reward(vrun.files, g.reward_key, g.reward_range)
        except RewardError as e:
            error, message = e.error_type, str(e)
        if error is None and res.exit_code != 0 and reward is not None and reward >= g.pass_threshold:
            error = ErrorType.VERIFIER_ERROR
            message = f"tests/test.sh exited {res.exit_code} although its reward says {reward:g}; not a pass"
    if error in (None, ErrorType.REWARD_MISSING, ErrorType.REWARD_INVALID) and not (
            reward is not None and reward >= g.pass_threshold and res.exit_code == 0):
        why = setup_failure(res.stdout, res.stderr)
        if why is not None:  # the tests never ran: the task's verifier, not the solution, failed
            error, message = ErrorType.VERIFIER_ERROR, (f"the verifier could not set itself up before its tests ran "
                                                     f"(task-side: the environment, not the solution): {why}")
    if findings:
        error = ErrorType.TAMPER_DETECTED
        message = "the agent changed paths that void a pass: " + "; ".join(f"{p} {why}" for p, why in findings[:10])
    if error is None and outcome.error_type is not None:
        error, message = outcome.error_type, outcome.error_message
    if error is None and outcome.timed_out:
        error, message = ErrorType.AGENT_TIMEOUT, f"agent exceeded {agent_timeout_sec:g}s"
    passed = (
        reward is not None
        and reward >= g.pass_threshold
        and res.exit_code == 0
        and not res.timed_out
        and error not in NEVER_PASS
    )
    note = None if passed or error is not None or res.timed_out else service_failure(res.stdout, res.stderr)
    if note is not None and reference:
        error, message = ErrorType.SERVICE_UNREACHABLE, f"environment, not the solution: {note}"
    return Verdict(reward, rewards, passed, error, message, note)
