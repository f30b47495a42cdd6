"""Update's inputs: trials read back as selection records and dataset lines, and the config check.

No train/serve mismatch (BACKGROUND: a mismatch is a bug): a trajectory may train the candidate only
if it was produced under the config the candidate will be served with — the same digest, or a config
whose behaviour is identical (`rsi expand` renames the config it adopts; the name is in the digest but
in no prompt). Anything else is refused with the fields that differ. A trajectory sampled by another
generation's model is refused too: its rewards and logprobs belong to another policy.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsi.core.errors import ConfigError
from rsi.core.harness_config import HarnessConfig
from rsi.core.replay import refers_to_hint
from rsi.core.training import OWN_SOURCES, TrialRecord
from rsi.harness.atif import load_trajectory
from rsi.loop.context import WorkspaceContext
from rsi.store.tables import TrialRow
from rsi.train.dataset import DatasetLine

TOKEN_KEYS = ("prompt_token_ids", "completion_token_ids", "logprobs")


def config_differences(a: HarnessConfig, b: HarnessConfig) -> list[str]:
    """Dotted paths whose values differ between two configs' identities, the name left out."""
    out: list[str] = []

    def walk(x: Any, y: Any, path: str) -> None:
        if isinstance(x, dict) and isinstance(y, dict):
            for k in sorted(set(x) | set(y)):
                walk(x.get(k), y.get(k), f"{path}.{k}" if path else k)
        elif x != y and path != "name":
            out.append(path)

    walk(a.identity(), b.identity(), "")
    return out


@dataclass
class ConfigGate:
    """Decides, per trial, whether it ran under the serving config (cached per digest)."""

    ctx: WorkspaceContext
    generation: str
    serving: HarnessConfig
    serving_digest: str
    _seen: dict[str, str | None] = field(default_factory=dict)

    def refusal(self, row: TrialRow) -> str | None:
        if row.generation != self.generation:
            return (f"mismatch: sampled by {row.generation}'s model, not {self.generation}'s "
                    "(its logprobs and rewards belong to another policy)")
        d = row.harness_config_digest
        if d is None:
            return "mismatch: the trial records no harness config"
        if d not in self._seen:
            self._seen[d] = self._check(d)
        return self._seen[d]

    def _check(self, digest: str) -> str | None:
        if digest == self.serving_digest:
            return None
        try:
            cfg = self.ctx.config_by_digest(digest)
        except ConfigError as e:
            return f"mismatch: {e}"
        diff = config_differences(cfg, self.serving)
        if not diff:
            return None
        shown = ", ".join(diff[:4]) + (f" (+{len(diff) - 4} more)" if len(diff) > 4 else "")
        return (f"mismatch: ran under config {cfg.name} ({digest[:12]}), but the candidate is served with "
                f"{self.serving.name} ({self.serving_digest[:12]}); they differ in {shown}, so its prompts "
                "are not the ones the candidate will see")


@dataclass
class LoadedTrial:
    record: TrialRecord
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    prompt_messages: int
    tokens: list[dict[str, Any]] | None
    job_id: str
    trial_dir: str = ""
    rerendered: bool = False  # its head was rendered again under a later config (update's replay)
    phrasing: int | None = None  # which wording of its template the task's instruction is (provenance)


def load_trial(row: TrialRow, root: Path, max_turns: int, *, template: str | None = None) -> LoadedTrial | str:
    """The trial's trajectory as training needs it (its task's `template`, if it has one), or why it cannot be used."""
    d = Path(row.trial_dir)
    path = (d if d.is_absolute() else root / d) / "trajectory.json"
    if not path.is_file():
        return f"no_trajectory: {path} is missing"
    try:
        traj = load_trajectory(path)
    except (ValueError, OSError) as e:
        return f"no_trajectory: {path}: {e}"
    rsi = traj.rsi
    messages = list(rsi.get("messages") or [])
    if not messages:
        return "no_trajectory: the trajectory records no messages"
    source = str(rsi.get("source") or "self")
    hint = rsi.get("hint")
    if hint is not None:  # a hinted rollout: stored as production renders it, the hint's message removed
        messages, why = without_hint(messages, hint)
        if why is not None:
            return why
    head = 2 + len(rsi.get("few_shot") or [])
    if len(messages) < head or messages[head - 1].get("role") != "user":
        return "no_trajectory: the messages do not start with the harness's head"
    actions = tuple(str(m.get("content") or "") + json.dumps(m.get("tool_calls") or [], sort_keys=True)
                    for m in messages[head:] if m.get("role") == "assistant")
    tokens: list[dict[str, Any]] = []
    # other sources' tokens were served in another context; `gateway` trajectories are nothing but served tokens
    for st in traj.steps if source in OWN_SOURCES else ():
        ex = st.extra or {}
        if st.source == "agent" and ex.get("prompt_token_ids") is not None:
            tokens.append({"turn": ex.get("turn"), **{k: ex.get(k) for k in TOKEN_KEYS}})
    n_turns = sum(1 for m in messages[head:] if m.get("role") == "assistant")
    has_tokens = bool(tokens) and len(tokens) == n_turns
    rec = TrialRecord(
        trial_id=row.id, task_digest=row.task_digest, task_name=row.task_name, generation=row.generation,
        config_digest=row.harness_config_digest, attempt=row.attempt, split=row.split, reward=row.reward,
        error_type=row.error_type, integrity=row.integrity, tampered=bool(row.tampered_paths),
        turns=row.turns, max_turns=max_turns, actions=actions, template=template, source=source,
    )
    return LoadedTrial(record=rec, messages=messages, tools=list(rsi.get("tools") or []), prompt_messages=head,
                       tokens=tokens if has_tokens else None, job_id=row.job_id, trial_dir=str(path.parent))


def without_hint(messages: list[dict[str, Any]], hint: dict[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """A hinted rollout's messages with the hint's message removed (the serving prompts' rendering), or why it
    cannot train: the hint is not where the trajectory says, or a reply refers to it (the model would learn to
    answer a message production never shows)."""
    i, text = hint.get("index"), hint.get("text")
    if not isinstance(i, int) or not 0 < i < len(messages) or messages[i].get("content") != text \
            or messages[i].get("role") != "user":
        return messages, "no_trajectory: the hint's message is not where the trajectory records it"
    rest = messages[:i] + messages[i + 1:]
    for m in rest[i:]:
        if m.get("role") == "assistant" and refers_to_hint(str(m.get("content") or "")):
            return rest, "hint_leak: a reply refers to the hint production never shows"
    return rest, None


def dataset_line(t: LoadedTrial, *, accepted: bool, group_id: str, sample_index: int, advantage: float,
                 serving_digest: str, validation: bool = False) -> DatasetLine:
    r = t.record
    return DatasetLine(
        messages=t.messages, tools=t.tools, reward=float(r.reward or 0.0), accepted=accepted, group_id=group_id,
        sample_index=sample_index, advantage=round(advantage, 6) if r.own else 0.0, prompt_messages=t.prompt_messages,
        provenance={"generation": r.generation, "config_digest": r.config_digest,
                    "serving_config_digest": serving_digest, "task_digest": r.task_digest, "task": r.task_name,
                    "trial_id": r.trial_id, "job_id": t.job_id, "attempt": r.attempt, "template": r.unit,
                    **({"phrasing": t.phrasing} if t.phrasing is not None else {})},
        tokens=t.tokens if r.own else None, validation=validation, source=r.source,
    )


__all__ = ["ConfigGate", "LoadedTrial", "config_differences", "dataset_line", "load_trial", "without_hint"]
