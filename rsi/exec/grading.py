"""Reward parsing and tamper detection: the rules that decide a verdict, kept small and pure."""

from __future__ import annotations

import fnmatch
import json
import math

from rsi.core.trial import ErrorType


class RewardError(Exception):
    def __init__(self, error_type: ErrorType, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type


def parse_reward(files: dict[str, bytes | None], reward_key: str) -> tuple[float, dict[str, float]]:
    """Read the reward from `reward.txt` (a number) or `reward.json` (a metric map).

    Raises RewardError(REWARD_MISSING) when neither exists and RewardError(REWARD_INVALID) when
    the content is not a finite number / numeric map. Never defaults to a pass.
    """
    txt = files.get("reward.txt")
    js = files.get("reward.json")
    if txt is None and js is None:
        raise RewardError(ErrorType.REWARD_MISSING, "the verifier wrote no reward.txt or reward.json")
    if txt is not None:
        raw = txt.decode("utf-8", errors="replace").strip()
        try:
            value = float(raw)
        except ValueError:
            raise RewardError(ErrorType.REWARD_INVALID, f"reward.txt is not a number: {raw[:80]!r}") from None
        if not math.isfinite(value):
            raise RewardError(ErrorType.REWARD_INVALID, f"reward.txt is not finite: {raw[:80]!r}")
        return value, {reward_key: value}
    assert js is not None
    try:
        data = json.loads(js)
    except ValueError:
        raise RewardError(ErrorType.REWARD_INVALID, "reward.json is not valid JSON") from None
    if isinstance(data, int | float) and not isinstance(data, bool):
        data = {reward_key: data}
    if not isinstance(data, dict) or not data:
        raise RewardError(ErrorType.REWARD_INVALID, "reward.json must be a number or a non-empty map")
    metrics: dict[str, float] = {}
    for k, v in data.items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
            raise RewardError(ErrorType.REWARD_INVALID, f"reward.json: '{k}' is not a finite number")
        metrics[str(k)] = float(v)
    value = metrics[reward_key] if reward_key in metrics else sum(metrics.values()) / len(metrics)
    return value, metrics


def _under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root + "/")


def tampered_paths(changed: list[str], protected: list[str], ignore: list[str]) -> list[str]:
    """Changed paths that fall under a protected path and match no ignore pattern.

    A directory shows as changed when anything below it changes, so only leaves count: an
    entry that is an ancestor of another changed entry is judged through its children.
    """
    paths = sorted(set(changed))
    leaves = [p for i, p in enumerate(paths) if not (i + 1 < len(paths) and _under(paths[i + 1], p))]
    out = []
    for p in leaves:
        if any(fnmatch.fnmatch(p, pat) for pat in ignore):
            continue
        if any(_under(p, root) for root in protected):
            out.append(p)
    return sorted(out)
