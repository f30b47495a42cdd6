"""The HCP contract (`contracts/hcp-<version>.yaml`): the external, versioned judge.

It fixes the action substrate a harness must expose, the limits nobody may loosen, how a trial
is graded, what may become training data and what a candidate must show to be promoted.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, model_validator

from rsi.core.model import RsiModel

# Where an agent may write without voiding a pass (an allow-list; the task's workdir is added).
DEFAULT_WRITABLE_ROOTS = ["/app", "/tmp", "/var/tmp", "/root", "/home", "/dev/shm"]
# Paths no change may touch, even under a writable root.
DEFAULT_PROTECTED_PATHS = ["/tests", "/logs/verifier"]


class _Strict(RsiModel):
    model_config = ConfigDict(extra="forbid")


class ToolSpec(_Strict):
    description: str
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class Substrate(_Strict):
    tools: dict[str, ToolSpec]
    observation_max_chars: int = Field(default=8000, gt=0)


class SandboxLimits(_Strict):
    cpus: float = Field(default=2.0, gt=0)
    memory_mb: int = Field(default=4096, gt=0)
    pids: int = Field(default=512, gt=0)
    network: bool = False


class Limits(_Strict):
    """Ceilings. A harness config or a task may tighten them, never loosen them."""

    max_turns: int = Field(default=30, gt=0)
    agent_timeout_sec: float = Field(default=900.0, gt=0)
    command_timeout_sec: float = Field(default=120.0, gt=0)
    verifier_timeout_sec: float = Field(default=300.0, gt=0)
    max_tokens_per_turn: int = Field(default=2048, gt=0)
    sandbox: SandboxLimits = Field(default_factory=SandboxLimits)


Integrity = Literal["declared_outputs", "snapshot", "shared"]
STRONG_LEVELS: tuple[Integrity, ...] = ("declared_outputs", "snapshot")


class Grading(_Strict):
    reward_files: list[str] = Field(default_factory=lambda: ["reward.txt", "reward.json"])
    reward_key: str = "reward"
    reward_range: tuple[float, float] = (0.0, 1.0)
    pass_threshold: float = 1.0
    # separate: the verifier runs in a fresh container (level 1 or 2); same: in the agent's (level 3)
    verifier_mode: Literal["separate", "same"] = "separate"
    # At the snapshot level: `kept` (default) pauses the agent's container for the change check and the
    # snapshot, then lets what it left running (its services) go on in its own container while the verifier
    # runs from the snapshot in that container's network namespace; `stopped` kills them before grading.
    agent_services: Literal["kept", "stopped"] = "kept"
    writable_roots: list[str] = Field(default_factory=lambda: list(DEFAULT_WRITABLE_ROOTS))
    protected_paths: list[str] = Field(default_factory=lambda: list(DEFAULT_PROTECTED_PATHS))
    # Changes matching these skip the shadowing checks; they apply only under writable roots.
    tamper_ignore: list[str] = Field(default_factory=lambda: ["*/__pycache__", "*/__pycache__/*"])
    infra_retries: int = Field(default=2, ge=0)
    # Which integrity levels may feed training data and promotion gates.
    training_integrity: list[Integrity] = Field(default_factory=lambda: list(STRONG_LEVELS))
    promotion_integrity: list[Integrity] = Field(default_factory=lambda: list(STRONG_LEVELS))
    # Consecutive endpoint or daemon failures after which a job stops as `interrupted`.
    infra_circuit_breaker: int = Field(default=3, ge=1)


class TrajectorySpec(_Strict):
    format: Literal["ATIF"] = "ATIF"
    version: str = "1.7"


class Acceptance(_Strict):
    min_reward: float = 1.0
    per_task_quota: int = Field(default=4, gt=0)
    require_clean_exit: bool = True
    # Replies of two accepted trajectories of one task this similar (0..1) count as one (`rsi update`).
    near_duplicate_threshold: float = Field(default=0.95, gt=0, le=1)


# What the holdout split keeps whole: a task, a template (`<family>/<template>`) or a family. Tasks of one
# template differ in names and data only, so a holdout split by task measures whether a template was learnt;
# split by template, no template has tasks on both sides and the holdout measures transfer to unseen ones.
HoldoutUnit = Literal["task", "template", "family"]
# The parts of the sealed holdout and what each may gate: `in_skill` and `unseen` (a task's `[metadata.rsi]
# holdout_part`) and `no_forgetting` (every in-skill task an earlier cycle drew: rsi.core.holdout_parts);
# `superiority` (the candidate must be better: min_delta and the one-sided paired test, clustered on units),
# `non_inferiority` (the candidate may not be worse by more than the part's margin), `report` (measured only).
PartRole = Literal["superiority", "non_inferiority", "report"]
GatedPart = Literal["in_skill", "unseen", "no_forgetting"]
DEFAULT_GATES: dict[GatedPart, PartRole] = {"in_skill": "superiority", "unseen": "non_inferiority",
                                            "no_forgetting": "non_inferiority"}
# What the in-skill part asks: `compositions` (held-out compositions of trained operations, the compose
# generator's, where the template split has any) or `phrasings` (train templates in held-out phrasings)
InSkillSource = Literal["compositions", "phrasings"]


class Promotion(_Strict):
    holdout_fraction: float = Field(default=0.2, gt=0, lt=1)
    # the unit of the split and of the paired test (clustered on it); a task without a template is its own unit
    holdout_unit: HoldoutUnit = "template"
    trials_per_task: int = Field(default=4, gt=0)
    # a minimum effect on the holdout (mean per-unit pass-rate gain), on top of the significance gate
    min_delta: float = Field(default=0.05, ge=0, le=1)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    family_regression_ceiling: float = 0.1
    infra_error_ceiling: float = 0.05
    # fixed task directories no generator wrote (relative to the workspace root), never training data:
    # the candidate may not be worse than its parent there by more than suite_margin (one-sided test)
    suites: list[str] = Field(default_factory=list)
    suite_margin: float = Field(default=0.1, ge=0, le=1)
    suite_trials_per_task: int = Field(default=2, gt=0)
    # Mixture-of-LoRA: the candidate's routing accuracy on holdout instructions may not fall below the
    # parent's by more than this (L0 is retrained every generation, so routing can regress)
    routing_margin: float = Field(default=0.05, ge=0, le=1)
    # trials per train task and generation for the in-template rate (the templates update trained on):
    # measured beside the holdout and reported, never gated; 0 measures nothing
    in_template_trials_per_task: int = Field(default=0, ge=0)
    # at most this many train tasks measured for it, spread across families, then templates (every family first); 0: all
    in_template_max_tasks: int = Field(default=0, ge=0)
    # the last N wordings (phrasings) of every template are held out: never trained on, used only by the
    # in-skill holdout (train templates in words the update never saw)
    holdout_phrasings: int = Field(default=1, ge=0)
    # which holdout part gates what; exactly one part is the superiority gate. A holdout where no task names
    # its part (a workspace discovered before the two-part holdout) is all `unseen` and gated for superiority
    gates: dict[GatedPart, PartRole] = Field(default_factory=lambda: dict(DEFAULT_GATES))
    # the non-inferiority margin of the unseen-template part (mean per-unit pass-rate loss it may show)
    unseen_margin: float = Field(default=0.1, ge=0, le=1)
    # ... and of the no-forgetting part (every earlier cycle's in-skill tasks, frozen)
    no_forgetting_margin: float = Field(default=0.1, ge=0, le=1)
    # what the in-skill part is: held-out compositions of trained operations, or (a workspace whose split has
    # none, or this set to `phrasings`) train templates in held-out phrasings
    in_skill: InSkillSource = "compositions"
    # group-sequential promote: measure in this many rounds (round k brings every task to
    # ceil(k * trials_per_task / looks) trials) and stop early on a clear gain or failure; 1 = one fixed test;
    # at most trials_per_task rounds run (each adds a trial per task)
    looks: int = Field(default=1, ge=1, le=10)
    # Lan-DeMets alpha-spending function: the overall one-sided type-I error stays `alpha`
    spending: Literal["obrien_fleming", "pocock"] = "obrien_fleming"
    # stop at an interim look for futility when the gate's z (Phi^-1(1 - p)) is at or below this; null: never
    futility_z: float | None = 0.0
    # alpha spending of the non-inferiority gates (unseen part, suites) over the same looks: O'Brien-Fleming
    # spends almost nothing at an interim look, so the last look is judged near alpha (a non-inferiority test
    # on half the trials rarely decides anything, and a Pocock bound there would cost power at the end)
    noninferiority_spending: Literal["obrien_fleming", "pocock"] = "obrien_fleming"

    @model_validator(mode="after")
    def _one_superiority_part(self) -> Promotion:
        sup = [p for p, r in self.gates.items() if r == "superiority"]
        if len(sup) != 1:
            raise ValueError(f"gates: exactly one holdout part must be `superiority` (got {sup or 'none'})")
        return self

    @property
    def superiority_part(self) -> GatedPart:
        return next(p for p, r in self.gates.items() if r == "superiority")

    def margin(self, part: str) -> float | None:
        """A non-inferiority part's margin (`<part>_margin`); None for a part without one."""
        return {"unseen": self.unseen_margin, "no_forgetting": self.no_forgetting_margin}.get(part)


class AttributionRules(_Strict):
    oracle_reruns: int = Field(default=2, ge=1)
    config_probes: int = Field(default=4, ge=0)


class Discovery(_Strict):
    """How `rsi discover` admits tasks: validity-gate repetitions, the frontier band, near-duplicates."""

    oracle_runs: int = Field(default=2, ge=1)  # the oracle must pass every run (a flaky verifier fails)
    probe_attempts: int = Field(default=4, ge=1)  # K attempts of the current generation per candidate
    # Admit a candidate whose probe pass rate p satisfies lo <= p <= hi.
    band: tuple[float, float] = (0.0, 0.75)
    # Normalised instruction similarity (0..1) at or above which a candidate is a near-duplicate.
    near_duplicate_threshold: float = Field(default=0.98, gt=0, le=1)
    max_difficulty: int = Field(default=10, ge=1, le=10)


SourceKind = Literal["self", "gateway", "hinted", "oracle"]
SOURCE_KINDS: tuple[SourceKind, ...] = ("self", "gateway", "hinted", "oracle")


class TrainingRules(_Strict):
    """What `rsi update` may train on and how far a candidate may move from its parent."""

    # KL to the parent policy (its adapter; the base for a generation without one), k3 on the trained tokens.
    # A floor: `train.kl_coef` in rsi.yaml may raise it, not lower it; 0 turns it off.
    kl_coef: float = Field(default=0.1, ge=0)
    # At most this many trajectories that train (accepted first) per template (`<family>/<template>`; a task
    # without one is its own template), so no template dominates.
    per_template_cap: int = Field(default=8, gt=0)
    # Accepted trajectories of earlier generations (the lineage) mixed in, spread across templates; 0: none.
    replay_cap: int = Field(default=8, ge=0)
    # Train templates held out of training (a function of the template id alone); their accepted completions'
    # log-probability is measured during training and stops it when it falls. 0: no validation slice.
    validation_fraction: float = Field(default=0.2, ge=0, lt=1)
    # Which sources may train (DESIGN §12): `self` (the generation's own rollouts), `gateway` (its own rollouts
    # under an external harness, as the recording gateway saw them: exact served token ids), `hinted` (its
    # rollouts with a hint drawn from the reference, stored without it) and `oracle` (the reference replayed
    # through the harness).
    # Where caps bind, the model's own samples come first, then hinted, then replays (acceptance.per_task_quota
    # per task, per_template_cap per template, across sources).
    # The update refuses a dataset whose sample holds more than this share of an unseen-template holdout
    # reference's command n-grams (rsi.core.leakage); the highest share is reported whatever it is.
    max_reference_overlap: float = Field(default=0.5, gt=0, le=1)
    sources: list[SourceKind] = Field(default_factory=lambda: list(SOURCE_KINDS), min_length=1)


class Contract(_Strict):
    schema_version: int = 1
    hcp: str
    substrate: Substrate
    limits: Limits = Field(default_factory=Limits)
    grading: Grading = Field(default_factory=Grading)
    trajectory: TrajectorySpec = Field(default_factory=TrajectorySpec)
    acceptance: Acceptance = Field(default_factory=Acceptance)
    promotion: Promotion = Field(default_factory=Promotion)
    attribution: AttributionRules = Field(default_factory=AttributionRules)
    discovery: Discovery = Field(default_factory=Discovery)
    training: TrainingRules = Field(default_factory=TrainingRules)

    @property
    def major(self) -> int:
        return int(self.hcp.split(".")[0])

    def openai_tools(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        """The substrate's tools in OpenAI `tools` form, optionally only those named."""
        out = []
        for name, spec in self.substrate.tools.items():
            if names is not None and name not in names:
                continue
            out.append(
                {
                    "type": "function",
                    "function": {"name": name, "description": spec.description, "parameters": spec.parameters},
                }
            )
        return out
