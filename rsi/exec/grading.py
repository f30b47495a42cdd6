"""The rules that decide a verdict, kept small and pure: rewards and the grading policy.

Grading fails closed (DESIGN §5). A task that declares the paths its verifier reads
(`[verifier] reads`) is graded at level 1: the verifier starts from the pristine image with only
those paths copied in. Otherwise level 2 (also for Harbor-format tasks that do not ask for
`environment_mode = "shared"` by name): the agent's container is frozen, its changes are checked
against the contract's writable roots (an allow-list a task may widen) and the change rules of
tamper.py, and the verifier starts from a snapshot. Level 3 (`shared`) only when the task or the
contract asks for it.
"""

from __future__ import annotations

import json
import math
import posixpath
from dataclasses import dataclass, field

from rsi.core.contract import Contract
from rsi.core.errors import InputError
from rsi.core.task import Task
from rsi.core.trial import ErrorType, Integrity


class RewardError(Exception):
    def __init__(self, error_type: ErrorType, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def parse_reward(
    files: dict[str, bytes | None], reward_key: str, reward_range: tuple[float, float] = (0.0, 1.0)
) -> tuple[float, dict[str, float]]:
    """The reward from `reward.txt` (one number) or `reward.json` (a metric map with `reward_key`).

    Raises RewardError(REWARD_MISSING) when neither exists and RewardError(REWARD_INVALID) for
    anything else than a finite number in `reward_range`: a map without the key never falls
    back to a mean of its metrics. If both files exist they must agree.
    """
    txt, js = files.get("reward.txt"), files.get("reward.json")
    if txt is None and js is None:
        raise RewardError(ErrorType.REWARD_MISSING, "the verifier wrote no reward.txt or reward.json")
    lo, hi = reward_range
    value: float | None = None
    metrics: dict[str, float] = {}
    if txt is not None:
        raw = txt.decode("utf-8", errors="replace").strip()
        try:
            value = float(raw)
        except ValueError:
            raise RewardError(ErrorType.REWARD_INVALID, f"reward.txt is not a number: {raw[:80]!r}") from None
        if not math.isfinite(value):
            raise RewardError(ErrorType.REWARD_INVALID, f"reward.txt is not finite: {raw[:80]!r}")
        metrics = {reward_key: value}
    if js is not None:
        try:
            data = json.loads(js)
        except ValueError:
            raise RewardError(ErrorType.REWARD_INVALID, "reward.json is not valid JSON") from None
        if not isinstance(data, dict):
            raise RewardError(ErrorType.REWARD_INVALID, f"reward.json must be a map holding '{reward_key}'")
        for k, v in data.items():
            if not _finite(v):
                raise RewardError(ErrorType.REWARD_INVALID, f"reward.json: '{k}' is not a finite number")
        if reward_key not in data:
            raise RewardError(ErrorType.REWARD_INVALID, f"reward.json has no '{reward_key}' key")
        from_json = float(data[reward_key])
        if value is not None and from_json != value:
            raise RewardError(
                ErrorType.REWARD_INVALID, f"reward.txt says {value:g} but reward.json says {from_json:g}"
            )
        value = from_json
        metrics = {str(k): float(v) for k, v in data.items()}
    assert value is not None
    if not lo <= value <= hi:
        raise RewardError(ErrorType.REWARD_INVALID, f"reward {value:g} is outside the declared range [{lo:g}, {hi:g}]")
    return value, metrics


def under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return root == "/" or path == root or path.startswith(root + "/")


@dataclass(frozen=True)
class GradingPolicy:
    """How one task's trials are graded under a contract."""

    integrity: Integrity
    writable_roots: tuple[str, ...]
    protected: tuple[str, ...]
    reads: tuple[str, ...] = ()
    widened: tuple[str, ...] = ()  # roots the task added to the contract's allow-list
    workdir: str = "/app"
    ignore: tuple[str, ...] = field(default_factory=tuple)


def _absolute(paths: list[str], file: str, fld: str) -> list[str]:
    out = []
    for i, p in enumerate(paths):
        norm = posixpath.normpath(p)
        if not p.startswith("/") or norm in ("/", "//"):
            raise InputError(file, f"{fld}[{i}]", f"'{p}' must be an absolute path below /")
        out.append(norm)
    return out


def grading_policy(task: Task, contract: Contract) -> GradingPolicy:
    """The task's policy; InputError (task.toml + field) if it declares reads the agent may not write."""
    g, spec = contract.grading, task.spec
    file = f"{task.path}/task.toml"
    env = spec.environment
    workdir = posixpath.normpath(env.workdir)
    widened = tuple(p for p in _absolute(env.writable_roots_add, file, "environment.writable_roots_add")
                    if not any(under(p, r) for r in g.writable_roots))
    roots = (*g.writable_roots, workdir, *widened)
    protected = tuple(spec.protected_paths(g.protected_paths))
    mode = spec.environment_mode
    if mode == "shared" or (mode is None and g.verifier_mode == "same"):
        integrity: Integrity = "shared"
    elif spec.verifier.reads is not None:
        integrity = "declared_outputs"
    else:
        integrity = "snapshot"
    reads = tuple(_absolute(list(spec.verifier.reads or []), file, "verifier.reads"))
    for i, p in enumerate(reads):
        if not any(under(p, r) for r in roots) or any(under(p, pr) for pr in protected):
            raise InputError(
                file, f"verifier.reads[{i}]",
                f"'{p}' is not under a writable root ({', '.join(roots)}): the agent could plant it",
            )
    return GradingPolicy(
        integrity=integrity, writable_roots=roots, protected=protected, reads=reads, widened=widened,
        workdir=workdir, ignore=tuple(g.tamper_ignore),
    )


def leaves(changed: list[str]) -> list[str]:
    """Changed paths that are not an ancestor of another changed path (a directory shows as
    changed when anything below it does; it is judged through its children)."""
    paths = set(changed)
    ancestors: set[str] = set()
    for p in paths:
        parent = posixpath.dirname(p)
        while parent not in ancestors and parent not in ("", "/"):
            ancestors.add(parent)
            parent = posixpath.dirname(parent)
    return sorted(p for p in paths if p not in ancestors)
