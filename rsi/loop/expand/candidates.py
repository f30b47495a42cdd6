"""Expansion's config candidates: the base config's `search_space` variants, the user's own patches
(`rsi expand --candidate`) and reflective proposals.

Every candidate is a harness config stored by digest (origin `search_space`, `manual` or
`reflection`, parent = the base's digest) and a `search_candidates` row of the expand job. A manual
patch has the reflective proposals' form (dotted config paths to values, `prompt`, `sampling` or
`loop` only) and is checked against the contract before anything runs: a bad one is an error, not
a refused row. A reflective
proposal is the proposer model's YAML patch, written after it read a failed trajectory and the
verifier's output; the patch is checked against the contract (rsi.core.variants.apply_variant)
before any trial, and one that fails (loosens a limit, names an unknown field, is not YAML) is
recorded as `refused` with the reason. Proposals are asked once per job: on resume the rows are
read back, so the model is never asked again for the same slot.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from rsi.core.arm import Arm
from rsi.core.contract import Contract
from rsi.core.errors import ConfigError, InputError, RsiError
from rsi.core.generation import GenerationManifest
from rsi.core.harness_config import HarnessConfig
from rsi.core.reflection import EDITABLE, PatchError, parse_patch
from rsi.core.variants import apply_variant, single_field_variants, variant_label
from rsi.loop.arms import ArmPlan
from rsi.loop.context import WorkspaceContext
from rsi.store.tables import TrialRow

PROMPT = """You tune the harness config of a shell agent. The agent failed a task.

Current config (YAML):
{config}

The task:
{instruction}

What the agent did (last turns):
{trajectory}

What the verifier printed:
{verifier}

Propose ONE config change that could make the agent solve it. Answer only with a YAML mapping of
dotted config paths to new values inside a ```yaml block, e.g.
```yaml
sampling.temperature: 0.2
loop.max_turns: 8
```
You may change only: {editable}. The limits of the contract may not be loosened."""


class Reflector(Protocol):
    def propose(self, prompt: str, seed: int) -> str: ...


@dataclass
class ModelReflector:
    """The proposer model on an OpenAI-compatible endpoint."""

    base_url: str
    model: str
    api_key: str | None = None
    temperature: float = 0.7
    max_tokens: int = 256

    def propose(self, prompt: str, seed: int) -> str:
        from rsi.models.client import ChatClient

        with ChatClient(self.base_url, api_key=self.api_key, timeout=120.0) as client:
            res = client.chat(self.model, [{"role": "user", "content": prompt}], temperature=self.temperature,
                              max_tokens=self.max_tokens, seed=seed)
        return res.content or ""


def search_space_candidates(ctx: WorkspaceContext, job_id: str, base: HarnessConfig, base_digest: str) -> None:
    for assignment in single_field_variants(base):
        label = variant_label(assignment)
        try:
            cfg = apply_variant(base, assignment, ctx.contract)
        except ConfigError as e:
            ctx.store.put_candidate(job_id, label, origin="search_space", config_digest=None,
                                    parent_digest=base_digest, state="refused", reason=str(e),
                                    patch_yaml=yaml.safe_dump(assignment, sort_keys=True))
            continue
        digest = ctx.register_config(cfg, origin="search_space", source=label, parent=base_digest)
        ctx.store.put_candidate(job_id, label, origin="search_space", config_digest=digest,
                                parent_digest=base_digest, patch_yaml=yaml.safe_dump(assignment, sort_keys=True))


def manual_patches(specs: list[str], base: HarnessConfig, contract: Contract) -> list[dict[str, Any]]:
    """`--candidate` values (a YAML patch file, or the patch inline) as flat patches, each checked
    against the contract on `base`; InputError naming the first bad one."""
    out: list[dict[str, Any]] = []
    for spec in specs:
        path = Path(spec)
        where = str(path) if path.is_file() else "--candidate"
        try:
            text = path.read_text() if path.is_file() else spec
            patch = parse_patch(text)
            if apply_variant(base, patch, contract).digest() == base.digest():
                raise PatchError("changes nothing")
        except OSError as e:
            raise InputError(where, None, f"cannot read: {e.strerror}") from None
        except (PatchError, ConfigError) as e:
            hint = " (nor a file)" if where == "--candidate" and "mapping" in str(e) else ""
            raise InputError(where, None if where != "--candidate" else spec[:60], f"{e}{hint}") from None
        if patch not in out:
            out.append(patch)
    return out


def manual_candidates(ctx: WorkspaceContext, job_id: str, base: HarnessConfig, base_digest: str,
                      patches: list[dict[str, Any]]) -> None:
    for patch in patches:
        label = f"manual:{variant_label(patch)}"[:200]
        cfg = apply_variant(base, patch, ctx.contract)
        digest = ctx.register_config(cfg, origin="manual", source=label, parent=base_digest)
        ctx.store.put_candidate(job_id, label, origin="manual", config_digest=digest, parent_digest=base_digest,
                                patch_yaml=yaml.safe_dump(patch, sort_keys=True))


def _tail(path: Path, chars: int) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(not recorded)"


def _trajectory_text(trial: TrialRow, chars: int = 1500) -> str:
    path = Path(trial.trial_dir) / "trajectory.json"
    try:
        steps = json.loads(path.read_text()).get("steps", [])
    except (OSError, ValueError):
        return "(not recorded)"
    lines = [f"{s.get('source', '?')}: {str(s.get('message', ''))[:400]}" for s in steps[-6:]]
    return "\n".join(lines)[-chars:]


def reflective_candidates(ctx: WorkspaceContext, job_id: str, base: HarnessConfig, base_digest: str,
                          failures: list[tuple[TrialRow, str]], n: int, reflector: Reflector | None,
                          seed: int) -> None:
    """Ask for up to `n` proposals, one per failed trial given, unless this job already asked."""
    asked = [r for r in ctx.store.search_candidates(job_id) if r.origin == "reflection"]
    if reflector is None or len(asked) >= n:
        return
    editable = {k: v for k, v in base.model_dump(mode="json").items() if k in EDITABLE}
    for i, (trial, instruction) in enumerate(failures[len(asked):n], start=len(asked)):
        prompt = PROMPT.format(config=yaml.safe_dump(editable, sort_keys=True)[:3000], instruction=instruction[:1500],
                               trajectory=_trajectory_text(trial),
                               verifier=_tail(Path(trial.trial_dir) / "verifier" / "test-stdout.txt", 1000),
                               editable=", ".join(EDITABLE))
        slot = f"reflection-{i + 1}"
        try:
            answer = reflector.propose(prompt, seed + i)
        except RsiError as e:
            ctx.store.put_candidate(job_id, slot, origin="reflection", config_digest=None, parent_digest=base_digest,
                                    state="refused", reason=f"the proposer failed: {e}"[:2000],
                                    source_trial=trial.id)
            continue
        try:
            patch = parse_patch(answer)
            cfg = apply_variant(base, patch, ctx.contract)
        except (PatchError, ConfigError) as e:
            ctx.store.put_candidate(job_id, slot, origin="reflection", config_digest=None, parent_digest=base_digest,
                                    state="refused", reason=str(e)[:2000], patch_yaml=answer[:4000],
                                    source_trial=trial.id)
            continue
        if cfg.digest() == base_digest:
            ctx.store.put_candidate(job_id, slot, origin="reflection", config_digest=None, parent_digest=base_digest,
                                    state="refused", reason="the patch changes nothing", patch_yaml=answer[:4000],
                                    source_trial=trial.id)
            continue
        digest = ctx.register_config(cfg, origin="reflection", source=f"{slot}:{variant_label(patch)}",
                                     parent=base_digest)
        ctx.store.put_candidate(job_id, f"{slot}:{variant_label(patch)}"[:200], origin="reflection",
                                config_digest=digest, parent_digest=base_digest,
                                patch_yaml=yaml.safe_dump(patch, sort_keys=True), source_trial=trial.id)


def candidate_plans(ctx: WorkspaceContext, job_id: str, gen: GenerationManifest) -> dict[str, ArmPlan]:
    """label -> arm plan of every usable candidate of the job (refused ones and duplicates left out)."""
    out: dict[str, ArmPlan] = {}
    seen: set[str] = set()
    for row in ctx.store.search_candidates(job_id):
        if row.config_digest is None or row.state == "refused" or row.config_digest in seen:
            continue
        seen.add(row.config_digest)
        cfg = ctx.config_by_digest(row.config_digest)
        arm = Arm(agent="harness", generation=gen.id, config_digest=row.config_digest, variant=row.label)
        out[row.label] = ArmPlan(arm, gen, cfg)
    return out


def assignments_of(patch_yaml: str | None) -> dict[str, Any]:
    data = yaml.safe_load(patch_yaml or "{}")
    return data if isinstance(data, dict) else {}


__all__ = ["ModelReflector", "Reflector", "assignments_of", "candidate_plans", "manual_candidates", "manual_patches",
           "reflective_candidates", "search_space_candidates"]
