"""What a trial writes besides its verdict: artifacts, the verifier's output, the base-image stand-ins
and the environment record (the image's release and the Debian packages its Dockerfile installed)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from rsi.core.task import Task
from rsi.exec.verify import VerifierRun
from rsi.sandbox.base import Sandbox, SandboxError, SandboxProvider
from rsi.sandbox.base_image import LABEL_SUBSTITUTE, base_tags, stand_in_command


def substitutions(provider: SandboxProvider, task: Task) -> dict[str, str]:
    """FROM tags of the task that resolved to a stand-in made by `rsi sandbox build-base --as`."""
    out = {}
    for tag in sorted(base_tags([Path(task.path) / "environment" / "Dockerfile"])):
        label = provider.image_labels(tag).get(LABEL_SUBSTITUTE)
        if label:
            out[tag] = label
    return out


def missing_base_hint(provider: SandboxProvider, task: Task) -> str | None:
    """For a failed build: the FROM tags the host lacks (no registry to pull them from), with the command that
    makes each resolve offline (`rsi sandbox build-base --as ubuntu:24.04 --suite bookworm` where Ubuntu's
    keyring is missing); None when every FROM is present."""
    try:
        missing = [t for t in sorted(base_tags([Path(task.path) / "environment" / "Dockerfile"]))
                   if provider.image_id(t) is None]
    except (SandboxError, OSError):
        return None
    if not missing:
        return None
    return "; ".join(f"FROM {t} is not on this host (no registry to pull it from): make a stand-in with "
                     f"`{stand_in_command(t)}`" for t in missing)


def environment_record(provider: SandboxProvider, task: Task, image: str, base_image: str) -> dict[str, object]:
    """The task image's OS release and the Debian packages the Dockerfile added or changed (name -> version),
    against the image its final stage builds FROM (a `${BASE_IMAGE}` FROM: the workspace's base image)."""
    froms = _final_from(Path(task.path) / "environment" / "Dockerfile")
    base = froms if froms and "$" not in froms else base_image
    record: dict[str, object] = {"from": base}
    try:
        record["release"] = provider.image_release(image)
        pkgs = provider.image_packages(image)
        before = provider.image_packages(base) if provider.image_id(base) is not None else {}
    except SandboxError as e:  # a record, not a verdict: never fails the trial
        record["unavailable"] = str(e)[:300]
        return record
    record["apt_installed"] = {n: v for n, v in sorted(pkgs.items()) if before.get(n) != v}
    return record


def _final_from(dockerfile: Path) -> str | None:
    """The image the last FROM names (a stage name is followed to the image that stage starts from)."""
    if not dockerfile.is_file():
        return None
    stages: dict[str, str] = {}
    last: str | None = None
    for line in dockerfile.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].upper() == "FROM":
            args = [a for a in parts[1:] if not a.startswith("--")]
            if not args:
                continue
            image = stages.get(args[0].lower(), args[0])
            if len(args) >= 3 and args[1].upper() == "AS":
                stages[args[2].lower()] = image
            last = image
    return last


def collect_artifacts(box: Sandbox, task: Task, trial_dir: Path) -> None:
    """Harbor's artifacts (top-level and `[environment]`): copied out of the agent's container into artifacts/."""
    for path in task.spec.artifact_sources():
        data = box.get_archive(path)
        if data is None:
            continue
        dest = trial_dir / "artifacts"
        dest.mkdir(exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            tar.extractall(dest, filter="data")


def save_verifier_output(trial_dir: Path, vrun: VerifierRun) -> None:
    vdir = trial_dir / "verifier"
    vdir.mkdir(exist_ok=True)
    (vdir / "test-stdout.txt").write_text(vrun.result.stdout)
    (vdir / "test-stderr.txt").write_text(vrun.result.stderr)
    for name, data in vrun.files.items():
        if data is not None:
            (vdir / name).write_bytes(data)
